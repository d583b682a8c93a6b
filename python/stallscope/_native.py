"""The recorder through ctypes: libstallscope_rec.so (src/phase/stallscope_rec.h), a C library
with no Python.h in it, so the same build records from every CPython >= 3.8 (and any Python with
ctypes). It offers what the package uses of the optional compiled extension ``_core``:
``Writer``, ``Phase``, ``Profiler``.

Cost: a ``with phase`` is two foreign calls and one Python frame (see ``Phase``). The record calls
go through ``ctypes.PyDLL`` (the GIL is kept: releasing and re-taking it would cost more than the
~50 ns record) with no ``argtypes`` (ctypes' per-argument converters cost more than the call):
the writer is passed as a ``c_void_p`` and ids as small ints, which C receives as ``uint16_t``.
Calls that write files (mark, info, opening the ring) go through ``ctypes.CDLL`` and release the
GIL.
"""

import ctypes
import functools
import os

from ._protocol import BACKEND_NATIVE, ENV_REC_LIB

BACKEND = BACKEND_NATIVE
LIBRARY = "libstallscope_rec.so"
ABI_VERSION = 2  # STALLSCOPE_REC_ABI_VERSION in stallscope_rec.h

_DEFAULT_CAPACITY = 0  # the library's default (64 Ki records)
_ERR_BYTES = 1024


def _library_path():
    override = os.environ.get(ENV_REC_LIB)
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY)


class _Total(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint16),
        ("reserved0", ctypes.c_uint16),
        ("reserved1", ctypes.c_uint32),
        ("count", ctypes.c_uint64),
        ("total_ns", ctypes.c_int64),
        ("max_ns", ctypes.c_int64),
    ]


def _declare(lib, name, restype, argtypes=None):
    fn = getattr(lib, name)
    fn.restype = restype
    if argtypes is not None:
        fn.argtypes = argtypes
    return fn


_path = _library_path()
_fast = ctypes.PyDLL(_path)  # raises OSError (with dlopen's reason) when it cannot load
_slow = ctypes.CDLL(_path)

_P = ctypes.c_void_p
_S = ctypes.c_size_t
_abi = _declare(_fast, "stallscope_rec_abi_version", ctypes.c_uint32, [])()
if _abi != ABI_VERSION:
    raise ImportError(f"{_path}: C ABI version {_abi}, this package needs {ABI_VERSION}")
RING_VERSION = _declare(_fast, "stallscope_rec_ring_version", ctypes.c_uint32, [])()

# Hot path: no argtypes (see the module docstring).
_begin = _declare(_fast, "stallscope_begin", None)
_end = _declare(_fast, "stallscope_end", None)
_step = _declare(_fast, "stallscope_step", ctypes.c_int64)
# Rare or wide arguments: declared.
_counter = _declare(_fast, "stallscope_counter", None, [_P, ctypes.c_uint16, ctypes.c_int64])
_begin_at = _declare(_fast, "stallscope_begin_at", None, [_P, ctypes.c_uint16, ctypes.c_int64])
_end_at = _declare(_fast, "stallscope_end_at", None, [_P, ctypes.c_uint16, ctypes.c_int64])
_gpu_span = _declare(
    _fast, "stallscope_gpu_span", None, [_P, ctypes.c_uint16, ctypes.c_int64, ctypes.c_int64])
_name_id = _declare(_fast, "stallscope_name_id", ctypes.c_uint16, [_P, ctypes.c_char_p, _S])
_from_env = _declare(_fast, "stallscope_writer_from_env", _P, [ctypes.c_char_p, _S])
_new = _declare(
    _fast, "stallscope_writer_new", _P,
    [ctypes.c_char_p, _S, ctypes.c_int32, ctypes.c_int32, ctypes.c_uint32])
_mark = _declare(
    _slow, "stallscope_mark", ctypes.c_int,
    [_P, ctypes.c_uint16, ctypes.c_char_p, _S, ctypes.c_char_p, _S])
_info = _declare(
    _slow, "stallscope_info", ctypes.c_int,
    [_P, ctypes.c_char_p, _S, ctypes.c_char_p, _S, ctypes.c_char_p, _S])
_open = _declare(_slow, "stallscope_writer_open", ctypes.c_int, [_P])
_after_fork = _declare(_fast, "stallscope_writer_after_fork_in_child", None, [_P])
_enabled = _declare(_fast, "stallscope_writer_enabled", ctypes.c_int, [_P])
_ring_path = _declare(_fast, "stallscope_writer_ring_path", _S, [_P, ctypes.c_char_p, _S])
_meta_path = _declare(_fast, "stallscope_writer_meta_path", _S, [_P, ctypes.c_char_p, _S])
_error = _declare(_fast, "stallscope_writer_error", _S, [_P, ctypes.c_char_p, _S])
_prof_new = _declare(_fast, "stallscope_profiler_new", _P, [_P])
_prof_poll = _declare(_slow, "stallscope_profiler_poll", ctypes.c_uint64, [_P])
_TotalPtr = ctypes.POINTER(_Total)
_U64Ptr = ctypes.POINTER(ctypes.c_uint64)
_prof_take = _declare(
    _slow, "stallscope_profiler_take", _S,
    [_P, _TotalPtr, _S, _TotalPtr, _S, ctypes.POINTER(_S), _U64Ptr, _U64Ptr, _U64Ptr])
_prof_name = _declare(_fast, "stallscope_profiler_name", _S, [_P, ctypes.c_uint16, ctypes.c_char_p, _S])
_prof_reset = _declare(_fast, "stallscope_profiler_reset", None, [_P])


def _utf8(text):
    """Names and kinds as UTF-8, never an exception (the recorder must not change what the job
    does): a lone surrogate (os.fsdecode of a file name that is not UTF-8) becomes the six
    characters "\\udcff" (backslashreplace), as the compiled backend writes it."""
    return text.encode("utf-8", "backslashreplace")


def _json_utf8(text):
    """JSON text as UTF-8: a lone surrogate in a string becomes an escaped backslash and "udcff",
    so the value parses to the same six characters as a name gets."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\\\\u%04x" % ord(c) if "\ud800" <= c <= "\udfff" else c
                       for c in text).encode("utf-8")


def _read_string(fn, handle, *args):
    """Calls a string-out function, growing the buffer when the text did not fit."""
    size = 512
    while True:
        buf = ctypes.create_string_buffer(size)
        n = fn(handle, *args, buf, size)
        if n < size:
            return buf.value.decode("utf-8", "replace")
        size = n + 1


class Writer:
    """Writes this process's ring (created on the first event). Never freed: a phase object
    may still be used by another thread while the interpreter shuts down."""

    __slots__ = ("_ptr",)

    def __init__(self, phases_dir, rank=0, world_size=1, capacity=_DEFAULT_CAPACITY):
        raw = os.fsencode(phases_dir)
        ptr = _new(raw, len(raw), rank, world_size, capacity)
        if not ptr:
            raise MemoryError("stallscope: cannot allocate a writer")
        self._ptr = ctypes.c_void_p(ptr)

    @classmethod
    def from_env(cls, phases_dir=None):
        """Writer for ``phases_dir`` (default $STALLSCOPE_RUN_DIR/phases) with rank and world
        size from the environment; None when there is no directory."""
        raw = os.fsencode(phases_dir) if phases_dir else b""
        ptr = _from_env(raw, len(raw))
        if not ptr:
            return None
        writer = cls.__new__(cls)
        writer._ptr = ctypes.c_void_p(ptr)
        return writer

    def name_id(self, name):
        raw = _utf8(name if isinstance(name, str) else str(name))
        return _name_id(self._ptr, raw, len(raw))

    def begin_at(self, id, ts_ns):  # noqa: A002 (the C API's name)
        _begin_at(self._ptr, id, ts_ns)

    def end_at(self, id, ts_ns):  # noqa: A002
        _end_at(self._ptr, id, ts_ns)

    def gpu_span(self, id, begin_ts_ns, gpu_ns):  # noqa: A002
        _gpu_span(self._ptr, id, begin_ts_ns, gpu_ns)

    def step(self):
        """Marks the end of a training step; returns the process's step count."""
        return _step(self._ptr)

    def counter(self, id, delta=1):  # noqa: A002
        _counter(self._ptr, id, delta)

    def mark(self, id, data_json=""):  # noqa: A002
        """Returns None, or the error text."""
        raw = _json_utf8(data_json)
        err = ctypes.create_string_buffer(_ERR_BYTES)
        if _mark(self._ptr, id, raw, len(raw), err, _ERR_BYTES) == 0:
            return None
        return err.value.decode("utf-8", "replace")

    def info(self, kind, data_json):
        """Returns None, or the error text."""
        k, raw = _utf8(kind), _json_utf8(data_json)
        err = ctypes.create_string_buffer(_ERR_BYTES)
        if _info(self._ptr, k, len(k), raw, len(raw), err, _ERR_BYTES) == 0:
            return None
        return err.value.decode("utf-8", "replace")

    def open(self):
        return bool(_open(self._ptr))

    def after_fork_in_child(self):
        _after_fork(self._ptr)

    @property
    def enabled(self):
        return bool(_enabled(self._ptr))

    @property
    def ring_path(self):
        return _read_string(_ring_path, self._ptr)

    @property
    def meta_path(self):
        return _read_string(_meta_path, self._ptr)

    @property
    def error(self):
        text = _read_string(_error, self._ptr)
        return text or None


class Phase:
    """``with phase:`` records a begin on enter and an end on exit. One object per name serves
    every thread and nesting level. Subclassable (the package adds ``__call__``).

    Each name gets its own small subclass whose ``__enter__`` is the foreign call itself with the
    writer and the id bound (a ``staticmethod`` of a ``functools.partial``: no Python frame) and
    whose ``__exit__`` is one Python frame around the bound end call: ~20% less per ``with``
    than two Python methods (python/bench_marker.py)."""

    __slots__ = ()
    name = None  #: the phase's name (class attribute of each name's subclass)
    id = 0  #: its id in the ring's name table

    def __new__(cls, writer, name):
        if not isinstance(writer, Writer):
            raise TypeError("Phase(writer, name): writer must be a stallscope Writer")
        if not isinstance(name, str):
            raise TypeError("Phase(writer, name): name must be a str")
        phase_id = writer.name_id(name)
        end = functools.partial(_end, writer._ptr, phase_id)

        def __exit__(self, exc_type, exc, tb, _end=end):
            _end()  # returns None: exceptions propagate

        named = type(cls.__name__, (cls,), {
            "__slots__": (),
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "name": name,
            "id": phase_id,
            "__enter__": staticmethod(functools.partial(_begin, writer._ptr, phase_id)),
            "__exit__": __exit__,
        })
        return object.__new__(named)


class Profiler:
    """Reads the writer's own ring and sums it into windows (STALLSCOPE_PROFILE summaries)."""

    _ROWS = 256  # a ring has at most 255 names

    def __init__(self, writer):
        self._writer = writer  # keeps the writer's pointer valid
        self._ptr = ctypes.c_void_p(_prof_new(writer._ptr))
        if not self._ptr.value:
            raise MemoryError("stallscope: cannot allocate a profiler")
        self._phases = (_Total * self._ROWS)()
        self._counters = (_Total * self._ROWS)()

    def poll(self):
        """Drains new records into the current window. Returns the records lost so far."""
        return _prof_poll(self._ptr)

    def take(self):
        """Ends the window: (phases, counters, steps, unmatched, lost); phases and counters are
        lists of (name, count, total_ns, max_ns), largest total first."""
        n_counters = ctypes.c_size_t(0)
        steps, unmatched, lost = ctypes.c_uint64(0), ctypes.c_uint64(0), ctypes.c_uint64(0)
        n_phases = _prof_take(
            self._ptr, self._phases, self._ROWS, self._counters, self._ROWS,
            ctypes.byref(n_counters), ctypes.byref(steps), ctypes.byref(unmatched),
            ctypes.byref(lost))

        def rows(table, n):
            return [(_read_string(_prof_name, self._ptr, row.id), row.count, row.total_ns,
                     row.max_ns) for row in table[:n]]

        return (rows(self._phases, n_phases), rows(self._counters, n_counters.value),
                steps.value, unmatched.value, lost.value)

    def reset(self):
        """Forgets the ring and the window (in a forked child, before its first poll)."""
        _prof_reset(self._ptr)
