// The C ABI of the phase recorder (stallscope_rec.h): libstallscope_rec.so, loaded by the Python
// package with ctypes. Thin wrappers; every C++ exception stops here (the caller is C).

#include "phase/stallscope_rec.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>

#include "phase/phase_aggregator.h"
#include "phase/phase_reader.h"
#include "phase/phase_writer.h"

namespace stallscope::phase {
namespace {

std::string_view View(const char* text, size_t len) {
  return text == nullptr ? std::string_view() : std::string_view(text, len);
}

/// Copies `text` into buf (cut, NUL-terminated when cap > 0); returns text's full length.
size_t CopyOut(std::string_view text, char* buf, size_t cap) {
  if (buf != nullptr && cap > 0) {
    const size_t n = std::min(text.size(), cap - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

int StatusOut(const Status& status, char* err, size_t err_cap) {
  if (status.ok()) return 0;
  CopyOut(status.error().message, err, err_cap);
  return -1;
}

}  // namespace
}  // namespace stallscope::phase

struct stallscope_writer {
  explicit stallscope_writer(stallscope::phase::WriterOptions options)
      : writer(std::move(options)) {}
  stallscope::phase::PhaseWriter writer;
};

struct stallscope_profiler {
  stallscope::phase::PhaseWriter* writer = nullptr;
  std::unique_ptr<stallscope::phase::PhaseReader> reader;
  stallscope::phase::PhaseAggregator aggregator;
};

namespace ph = stallscope::phase;

extern "C" {

uint32_t stallscope_rec_abi_version(void) { return STALLSCOPE_REC_ABI_VERSION; }

uint32_t stallscope_rec_ring_version(void) { return ph::kRingVersion; }

stallscope_writer* stallscope_writer_from_env(const char* phases_dir, size_t dir_len) {
  try {
    ph::WriterOptions options = ph::WriterOptionsFromEnv(ph::ProcessEnv());
    if (dir_len > 0) options.phases_dir = std::string(ph::View(phases_dir, dir_len));
    if (options.phases_dir.empty()) return nullptr;
    return new stallscope_writer(std::move(options));
  } catch (...) {  // bad_alloc: the caller sees "no writer"
    return nullptr;
  }
}

stallscope_writer* stallscope_writer_new(const char* phases_dir, size_t dir_len, int32_t rank,
                                         int32_t world_size, uint32_t capacity) {
  try {
    ph::WriterOptions options;
    options.phases_dir = std::string(ph::View(phases_dir, dir_len));
    options.rank = rank;
    options.world_size = world_size;
    if (capacity > 0) options.capacity = capacity;
    return new stallscope_writer(std::move(options));
  } catch (...) {
    return nullptr;
  }
}

void stallscope_writer_free(stallscope_writer* w) { delete w; }

uint16_t stallscope_name_id(stallscope_writer* w, const char* name, size_t len) {
  try {
    return w->writer.NameId(ph::View(name, len));
  } catch (...) {
    return ph::kNoName;
  }
}

void stallscope_begin(stallscope_writer* w, uint16_t id) { w->writer.Begin(id); }

void stallscope_end(stallscope_writer* w, uint16_t id) { w->writer.End(id); }

void stallscope_begin_at(stallscope_writer* w, uint16_t id, int64_t ts_ns) {
  w->writer.BeginAt(id, ts_ns);
}

void stallscope_end_at(stallscope_writer* w, uint16_t id, int64_t ts_ns) {
  w->writer.EndAt(id, ts_ns);
}

int64_t stallscope_step(stallscope_writer* w) { return w->writer.Step(); }

void stallscope_counter(stallscope_writer* w, uint16_t id, int64_t delta) {
  w->writer.Counter(id, delta);
}

void stallscope_gpu_span(stallscope_writer* w, uint16_t id, int64_t begin_ts_ns, int64_t gpu_ns) {
  w->writer.GpuSpan(id, begin_ts_ns, gpu_ns);
}

int stallscope_mark(stallscope_writer* w, uint16_t id, const char* json, size_t json_len, char* err,
                    size_t err_cap) {
  try {
    return ph::StatusOut(w->writer.Mark(id, ph::View(json, json_len)), err, err_cap);
  } catch (...) {
    ph::CopyOut("stallscope: out of memory writing a mark", err, err_cap);
    return -1;
  }
}

int stallscope_info(stallscope_writer* w, const char* kind, size_t kind_len, const char* json,
                    size_t json_len, char* err, size_t err_cap) {
  try {
    return ph::StatusOut(w->writer.Info(ph::View(kind, kind_len), ph::View(json, json_len)), err,
                         err_cap);
  } catch (...) {
    ph::CopyOut("stallscope: out of memory writing an info line", err, err_cap);
    return -1;
  }
}

int stallscope_writer_open(stallscope_writer* w) {
  try {
    return w->writer.Open().ok() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

void stallscope_writer_after_fork_in_child(stallscope_writer* w) { w->writer.AfterForkInChild(); }

int stallscope_writer_enabled(const stallscope_writer* w) { return w->writer.enabled() ? 1 : 0; }

size_t stallscope_writer_ring_path(const stallscope_writer* w, char* buf, size_t cap) {
  try {
    return ph::CopyOut(w->writer.ring_path(), buf, cap);
  } catch (...) {
    return ph::CopyOut("", buf, cap);
  }
}

size_t stallscope_writer_meta_path(const stallscope_writer* w, char* buf, size_t cap) {
  try {
    return ph::CopyOut(w->writer.meta_path(), buf, cap);
  } catch (...) {
    return ph::CopyOut("", buf, cap);
  }
}

size_t stallscope_writer_error(const stallscope_writer* w, char* buf, size_t cap) {
  try {
    std::optional<stallscope::Error> error = w->writer.error();
    return ph::CopyOut(error ? std::string_view(error->message) : std::string_view(), buf, cap);
  } catch (...) {
    return ph::CopyOut("", buf, cap);
  }
}

stallscope_profiler* stallscope_profiler_new(stallscope_writer* w) {
  auto* p = new (std::nothrow) stallscope_profiler;
  if (p != nullptr) p->writer = &w->writer;
  return p;
}

void stallscope_profiler_free(stallscope_profiler* p) { delete p; }

uint64_t stallscope_profiler_poll(stallscope_profiler* p) {
  try {
    if (!p->reader) {
      if (!p->writer->Open().ok()) return 0;
      stallscope::Result<ph::PhaseReader> reader = ph::PhaseReader::Open(p->writer->ring_path());
      if (!reader.ok()) return 0;
      p->reader = std::make_unique<ph::PhaseReader>(std::move(reader).value());
    }
    p->reader->Drain([p](const ph::PhaseRecord& record) { p->aggregator.Add(record); });
    return p->reader->totals().lost();
  } catch (...) {
    return 0;
  }
}

size_t stallscope_profiler_take(stallscope_profiler* p, stallscope_total* phases, size_t phases_cap,
                                stallscope_total* counters, size_t counters_cap, size_t* n_counters,
                                uint64_t* steps, uint64_t* unmatched, uint64_t* lost) {
  const uint64_t lost_so_far = stallscope_profiler_poll(p);
  ph::PhaseWindow window = p->aggregator.Take();
  auto copy = [](const std::vector<ph::PhaseTotal>& from, stallscope_total* to, size_t cap) {
    const size_t n = to == nullptr ? 0 : std::min(from.size(), cap);
    for (size_t i = 0; i < n; ++i) {
      to[i] =
          stallscope_total{from[i].phase_id, 0, 0, from[i].count, from[i].total_ns, from[i].max_ns};
    }
    return n;
  };
  const size_t n_phases = copy(window.phases, phases, phases_cap);
  const size_t n = copy(window.counters, counters, counters_cap);
  if (n_counters != nullptr) *n_counters = n;
  if (steps != nullptr) *steps = window.steps;
  if (unmatched != nullptr) *unmatched = window.unmatched;
  if (lost != nullptr) *lost = lost_so_far;
  return n_phases;
}

size_t stallscope_profiler_name(stallscope_profiler* p, uint16_t id, char* buf, size_t cap) {
  try {
    return ph::CopyOut(p->reader ? p->reader->Name(id) : std::string(), buf, cap);
  } catch (...) {
    return ph::CopyOut("", buf, cap);
  }
}

void stallscope_profiler_reset(stallscope_profiler* p) {
  p->reader.reset();
  p->aggregator = ph::PhaseAggregator();
}

}  // extern "C"
