// stallscope._core: the fast path of the Python API (src/phase/README.md). Thin bindings over
// PhaseWriter / PhaseReader / PhaseAggregator; the public API is stallscope/__init__.py.
//
// No module-level state: the package creates one Writer per process and keeps it.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <structmember.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "base/units.h"
#include "phase/phase_aggregator.h"
#include "phase/phase_reader.h"
#include "phase/phase_writer.h"

namespace py = pybind11;

namespace stallscope::phase {
namespace {

using WriterPtr = std::shared_ptr<PhaseWriter>;

/// A str from bytes that should be UTF-8; a damaged file's bad bytes become U+FFFD.
py::str Utf8(const std::string& bytes) {
  PyObject* text =
      PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (text == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

/// How RecorderText writes a lone surrogate.
enum class Surrogates { kBackslash, kJsonBackslash };

/// `text` (a str, else its str()) as UTF-8 for the recorder, never an exception: the recorder
/// must not change what the job does. A str with lone surrogates (os.fsdecode of a file name
/// that is not UTF-8) has no UTF-8 form, so each surrogate becomes the six characters "\udcff"
/// as Python's backslashreplace writes them: valid UTF-8, recognisable in reports. In JSON text
/// (kJsonBackslash) the backslash is escaped too, so the value parses to those six characters.
/// Empty only when even str() fails (the error is cleared).
std::string RecorderText(PyObject* text, Surrogates surrogates) {
  py::object as_str;
  if (!PyUnicode_Check(text)) {
    as_str = py::reinterpret_steal<py::object>(PyObject_Str(text));
    if (!as_str) {
      PyErr_Clear();
      return {};
    }
    text = as_str.ptr();
  }
  Py_ssize_t size = 0;
  if (const char* utf8 = PyUnicode_AsUTF8AndSize(text, &size)) {
    return std::string(utf8, static_cast<size_t>(size));
  }
  PyErr_Clear();  // UnicodeEncodeError: a lone surrogate
  std::string out;
  const Py_ssize_t length = PyUnicode_GetLength(text);
  constexpr std::string_view kHex = "0123456789abcdef";
  for (Py_ssize_t i = 0; i < length; ++i) {
    const Py_UCS4 c = PyUnicode_ReadChar(text, i);
    if (c < 0xD800 || c > 0xDFFF) {
      AppendUtf8(out, c);
      continue;
    }
    out += surrogates == Surrogates::kJsonBackslash ? "\\\\u" : "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(c >> shift) & 0xF];
  }
  return out;
}

std::optional<std::string> ErrorText(const Status& status) {
  if (status.ok()) return std::nullopt;
  return status.error().message;
}

// The Phase type is written against the CPython API, not pybind11: `with` calls __enter__ and
// __exit__ on every use, and pybind11's generic dispatch (argument loaders, overload chain)
// costs more per call than the record itself (~50 ns). Measured with python/bench_marker.py:
// a recording `with` ~190 ns this way, ~480 ns with pybind11-bound __enter__/__exit__.

/// `with phase:` records begin on enter and end on exit. Stateless apart from its id, so one
/// object per name serves every thread and every nesting level.
struct PhaseObject {
  PyObject_HEAD PhaseWriter* writer;  // owned by writer_ref
  PyObject* writer_ref;               // the Python Writer: keeps the C++ writer alive
  PyObject* name;                     // str
  uint16_t id;
};

int PhaseInit(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* kKeywords[] = {"writer", "name", nullptr};
  PyObject* writer_obj = nullptr;
  PyObject* name = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OU:Phase", const_cast<char**>(kKeywords),
                                   &writer_obj, &name)) {
    return -1;
  }
  PhaseWriter* writer = nullptr;
  try {  // binding boundary: pybind11 reports a failed cast by throwing
    writer = py::handle(writer_obj).cast<PhaseWriter*>();
  } catch (const py::cast_error&) {
    PyErr_SetString(PyExc_TypeError, "Phase(writer, name): writer must be a stallscope Writer");
    return -1;
  }
  const std::string utf8 = RecorderText(name, Surrogates::kBackslash);
  auto* phase = reinterpret_cast<PhaseObject*>(self);
  Py_INCREF(writer_obj);
  Py_INCREF(name);
  Py_XSETREF(phase->writer_ref, writer_obj);
  Py_XSETREF(phase->name, name);
  phase->writer = writer;
  phase->id = writer->NameId(utf8);
  return 0;
}

void PhaseDealloc(PyObject* self) {
  auto* phase = reinterpret_cast<PhaseObject*>(self);
  PyTypeObject* type = Py_TYPE(self);
  Py_CLEAR(phase->writer_ref);
  Py_CLEAR(phase->name);
  type->tp_free(self);
  Py_DECREF(type);  // instances of heap types own a reference to their type
}

PyObject* NotInitialized() {
  PyErr_SetString(PyExc_RuntimeError, "stallscope Phase used before __init__");
  return nullptr;
}

PyObject* PhaseEnter(PyObject* self, PyObject* /*unused*/) {
  auto* phase = reinterpret_cast<PhaseObject*>(self);
  if (phase->writer == nullptr) [[unlikely]]
    return NotInitialized();
  phase->writer->Begin(phase->id);
  Py_RETURN_NONE;
}

PyObject* PhaseExit(PyObject* self, PyObject* const* /*args*/, Py_ssize_t /*nargs*/) {
  auto* phase = reinterpret_cast<PhaseObject*>(self);
  if (phase->writer == nullptr) [[unlikely]]
    return NotInitialized();
  phase->writer->End(phase->id);
  Py_RETURN_NONE;  // falsy: exceptions propagate
}

PyMethodDef kPhaseMethods[] = {
    {"__enter__", PhaseEnter, METH_NOARGS, "Records the begin of the phase."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(PhaseExit)),
     METH_FASTCALL, "Records the end of the phase (exceptions propagate)."},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef kPhaseMembers[] = {
    {"name", T_OBJECT_EX, offsetof(PhaseObject, name), READONLY, "The phase's name."},
    {"id", T_USHORT, offsetof(PhaseObject, id), READONLY, "Its id in the ring's name table."},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kPhaseSlots[] = {
    {Py_tp_doc, const_cast<char*>("Phase(writer, name): `with` records a begin and an end.")},
    {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
    {Py_tp_init, reinterpret_cast<void*>(PhaseInit)},
    {Py_tp_dealloc, reinterpret_cast<void*>(PhaseDealloc)},
    {Py_tp_methods, kPhaseMethods},
    {Py_tp_members, kPhaseMembers},
    {0, nullptr},
};

PyType_Spec kPhaseSpec = {
    "stallscope._core.Phase",
    sizeof(PhaseObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,  // the package subclasses it (adds __call__)
    kPhaseSlots,
};

void AddPhaseType(py::module_& m) {
  PyObject* type = PyType_FromSpec(&kPhaseSpec);
  if (type == nullptr) throw py::error_already_set();
  m.add_object("Phase", py::reinterpret_steal<py::object>(type));
}

/// Reads the writer's own ring and sums it into windows for STALLSCOPE_PROFILE summaries.
class PyProfiler {
 public:
  explicit PyProfiler(WriterPtr writer) : writer_(std::move(writer)) {}

  /// Drains new records into the current window. Returns the records lost so far.
  uint64_t Poll() {
    if (!reader_) {
      if (!writer_->Open().ok()) return 0;
      Result<PhaseReader> reader = PhaseReader::Open(writer_->ring_path());
      if (!reader.ok()) return 0;
      reader_ = std::make_unique<PhaseReader>(std::move(reader).value());
    }
    reader_->Drain([this](const PhaseRecord& record) { aggregator_.Add(record); });
    return reader_->totals().lost();
  }

  /// Ends the window: (phases, counters, steps, unmatched, lost) where phases and counters are
  /// lists of (name, count, total_ns, max_ns), largest total first.
  py::tuple Take() {
    Poll();
    PhaseWindow window = aggregator_.Take();
    auto rows = [this](const std::vector<PhaseTotal>& totals) {
      py::list list;
      for (const PhaseTotal& t : totals) {
        py::str name = Utf8(reader_ ? reader_->Name(t.phase_id) : std::string());
        list.append(py::make_tuple(name, t.count, t.total_ns, t.max_ns));
      }
      return list;
    };
    const uint64_t lost = reader_ ? reader_->totals().lost() : 0;
    return py::make_tuple(rows(window.phases), rows(window.counters), window.steps,
                          window.unmatched, lost);
  }

  /// Forgets the ring and the window (in a forked child, before its first poll).
  void Reset() {
    reader_.reset();
    aggregator_ = PhaseAggregator();
  }

 private:
  WriterPtr writer_;
  std::unique_ptr<PhaseReader> reader_;
  PhaseAggregator aggregator_;
};

WriterPtr MakeWriter(std::string phases_dir, int32_t rank, int32_t world_size, uint32_t capacity) {
  WriterOptions options;
  options.phases_dir = std::move(phases_dir);
  options.rank = rank;
  options.world_size = world_size;
  options.capacity = capacity;
  return std::make_shared<PhaseWriter>(std::move(options));
}

void BindWriter(py::module_& m) {
  py::class_<PhaseWriter, WriterPtr>(m, "Writer",
                                     "Writes this process's ring (created on first event).")
      .def(py::init(&MakeWriter), py::arg("phases_dir"), py::arg("rank") = 0,
           py::arg("world_size") = 1, py::arg("capacity") = kDefaultCapacity)
      .def_static(
          "from_env",
          [](std::optional<std::string> phases_dir) -> std::optional<WriterPtr> {
            WriterOptions options = WriterOptionsFromEnv(ProcessEnv());
            if (phases_dir) options.phases_dir = *phases_dir;
            if (options.phases_dir.empty()) return std::nullopt;
            return std::make_shared<PhaseWriter>(std::move(options));
          },
          py::arg("phases_dir") = py::none(),
          "Writer for `phases_dir` (default $STALLSCOPE_RUN_DIR/phases) with rank and world\n"
          "size from the environment; None when there is no directory.")
      .def(
          "name_id",
          [](PhaseWriter& w, py::handle name) {
            return w.NameId(RecorderText(name.ptr(), Surrogates::kBackslash));
          },
          py::arg("name"))
      .def("begin", [](PhaseWriter& w, uint16_t id) { w.Begin(id); })
      .def("end", [](PhaseWriter& w, uint16_t id) { w.End(id); })
      .def("begin_at", [](PhaseWriter& w, uint16_t id, int64_t ts) { w.BeginAt(id, ts); })
      .def("end_at", [](PhaseWriter& w, uint16_t id, int64_t ts) { w.EndAt(id, ts); })
      .def("step", &PhaseWriter::Step, "Marks the end of a training step; returns the count.")
      .def("counter", &PhaseWriter::Counter, py::arg("id"), py::arg("delta") = 1)
      .def("gpu_span", &PhaseWriter::GpuSpan, py::arg("id"), py::arg("begin_ts_ns"),
           py::arg("gpu_ns"))
      .def(
          "mark",
          [](PhaseWriter& w, uint16_t id, py::handle data_json) {
            return ErrorText(w.Mark(id, RecorderText(data_json.ptr(), Surrogates::kJsonBackslash)));
          },
          py::arg("id"), py::arg("data_json") = "", "Returns None, or the error text.")
      .def(
          "info",
          [](PhaseWriter& w, py::handle kind, py::handle data_json) {
            return ErrorText(w.Info(RecorderText(kind.ptr(), Surrogates::kBackslash),
                                    RecorderText(data_json.ptr(), Surrogates::kJsonBackslash)));
          },
          py::arg("kind"), py::arg("data_json"), "Returns None, or the error text.")
      .def("open", [](PhaseWriter& w) { return w.Open().ok(); })
      .def("after_fork_in_child", &PhaseWriter::AfterForkInChild)
      .def_property_readonly("enabled", &PhaseWriter::enabled)
      .def_property_readonly("ring_path", &PhaseWriter::ring_path)
      .def_property_readonly("meta_path", &PhaseWriter::meta_path)
      .def_property_readonly("error", [](const PhaseWriter& w) -> std::optional<std::string> {
        std::optional<Error> error = w.error();
        if (!error) return std::nullopt;
        return error->message;
      });
}

}  // namespace
}  // namespace stallscope::phase

PYBIND11_MODULE(_core, m) {
  namespace ph = stallscope::phase;
  m.doc() = "stallscope phase markers: shared-memory ring writer (see stallscope/__init__.py)";
  ph::BindWriter(m);

  ph::AddPhaseType(m);

  py::class_<ph::PyProfiler>(m, "Profiler")
      .def(py::init<ph::WriterPtr>(), py::arg("writer"))
      .def("poll", &ph::PyProfiler::Poll)
      .def("take", &ph::PyProfiler::Take)
      .def("reset", &ph::PyProfiler::Reset);

  m.attr("RING_VERSION") = ph::kRingVersion;
  m.attr("BACKEND") = "core";
}
