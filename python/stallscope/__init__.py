"""stallscope: time the phases of a training job from inside it.

    import stallscope

    with stallscope.phase("ema_update"):      # a context manager ...
        ema.update(model)

    @stallscope.phase("sampling")             # ... and a decorator
    def sample(model, n): ...

    stallscope.step()                         # once per training step
    stallscope.mark("eval_start", epoch=3)    # a point event with data
    stallscope.count("host_syncs")            # a counter

Under ``stallscope run`` (which sets STALLSCOPE_RUN_DIR and puts this package on PYTHONPATH)
each process writes its events into a shared-memory ring, ``$STALLSCOPE_RUN_DIR/phases/<pid>.ring``,
that the monitor drains live; one ``with`` costs well under a microsecond and no system call.

Outside ``run`` every call is a cheap no-op, unless the flag STALLSCOPE_PROFILE is on (1, true,
yes or on; stallscope/_env.py reads every STALLSCOPE_* flag): then the process records on its own
and prints a per-phase summary to stderr every STALLSCOPE_PROFILE_EVERY steps (default 100).

The recorder is C++ code (src/phase) reached one of two ways, picked when recording starts:
``_core``, a CPython extension built for one interpreter (Debian's python3) where it imports,
else ``_native``: the C library libstallscope_rec.so through ctypes, which works in every CPython
>= 3.8 from the same build. STALLSCOPE_BACKEND=core|native forces one. If neither loads, the
package still imports, as a no-op, and warns once; under ``run`` the report says why.

Phases nest and may be used from any thread. Decorating a generator or ``async`` function times
only the call that creates the generator/coroutine: use ``with`` inside it instead.
"""

import functools
import importlib
import json
import os
import sys
import warnings

from . import _env, _notes
from ._protocol import (BACKEND_CORE, BACKEND_NATIVE, ENV_BACKEND, ENV_PROFILE, ENV_PROFILE_EVERY,
                        ENV_RUN_DIR, KEY_BACKEND, KEY_BACKEND_ERROR, KEY_RECORDING)

try:
    # Written by the build from CMakeLists.txt's project(VERSION), the version's one source.
    from ._version import __version__
except ImportError:  # the source tree, not a build
    __version__ = "0+unknown"
__all__ = ["phase", "step", "mark", "count", "info", "enabled", "backend"]

_BACKEND_FIRST = "auto"  # STALLSCOPE_BACKEND's default: the first that loads
_BACKEND_ORDER = {_BACKEND_FIRST: (BACKEND_CORE, BACKEND_NATIVE), BACKEND_CORE: (BACKEND_CORE,),
                  BACKEND_NATIVE: (BACKEND_NATIVE,)}


def _load_backend():
    """(module, None) for the first recorder backend that loads, or (None, why none did)."""
    choice = os.environ.get(ENV_BACKEND, "").strip().lower() or _BACKEND_FIRST
    order = _BACKEND_ORDER.get(choice)
    if order is None:
        return None, f"{ENV_BACKEND}={choice!r} is not one of auto, core, native"
    errors = []
    for name in order:
        try:
            return importlib.import_module(f"{__name__}._{name}"), None
        except Exception as e:  # ImportError, or OSError from dlopen with its reason
            errors.append(f"{name}: {e}")
    return None, "; ".join(errors)


def _to_json(data):
    """JSON for a meta line: anything not JSON-native is written as str(value)."""
    try:
        return json.dumps(data, default=str, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):  # circular, or keys that are not strings
        return json.dumps({"repr": repr(data)})


class _NoopPhase:
    """What phase() returns without the extension: enter/exit do nothing, decorating returns
    the function unchanged."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return None

    def __exit__(self, exc_type, exc, tb):
        return None

    def __call__(self, fn):
        return fn

    def __repr__(self):
        return f"stallscope.phase({self.name!r}) [off]"


class _Cache(dict):
    """key -> factory(key), made once. ``phase`` is this dict's ``__getitem__``, so a cached
    lookup runs no Python frame."""

    def __init__(self, factory):
        super().__init__()
        self._factory = factory

    def __missing__(self, key):
        value = self[key] = self._factory(key if isinstance(key, str) else str(key))
        return value


class _Recorder:
    """The process's recording state: the backend, its writer, and the profiler when
    STALLSCOPE_PROFILE is on. Created at import; survives fork (the child gets its own ring)."""

    def __init__(self):
        self.backend = None
        self.backend_error = None
        self.writer = None
        self.session = None
        self.warned = False
        run_dir = os.environ.get(ENV_RUN_DIR)
        profile = _env.flag(ENV_PROFILE, False, say=_notes.say_once)
        if not run_dir and not profile:
            return
        self.backend, self.backend_error = _load_backend()
        if self.backend is None:
            warnings.warn(
                f"stallscope: the recorder could not load ({self.backend_error}); "
                "phase markers record nothing",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        temp_dir = None
        if run_dir:
            self.writer = self.backend.Writer.from_env()
        else:
            # Standalone profiling: a private ring in a temp dir, removed at exit.
            import tempfile

            temp_dir = tempfile.mkdtemp(prefix="stallscope-profile-")
            self.writer = self.backend.Writer.from_env(os.path.join(temp_dir, "phases"))
        if profile:
            from . import _profile

            self.session = _profile.Session(
                self.backend.Profiler(self.writer),
                every=_env.positive_int(ENV_PROFILE_EVERY, 100),
                temp_dir=temp_dir,
            )
        os.register_at_fork(after_in_child=self.after_fork_in_child)

    def after_fork_in_child(self):
        self.writer.after_fork_in_child()
        if self.session is not None:
            self.session.after_fork_in_child()

    def check(self, error):
        """Warns once when a rare-path call failed or the writer turned itself off."""
        if self.warned:
            return
        error = error or self.writer.error
        if error:
            self.warned = True
            warnings.warn(f"stallscope: {error}", RuntimeWarning, stacklevel=3)


_recorder = _Recorder()
_writer = _recorder.writer

if _writer is not None:

    class _Phase(_recorder.backend.Phase):
        """A recording phase: ``with`` it (begin/end are foreign calls), or decorate a function."""

        __slots__ = ()

        def __call__(self, fn):
            @functools.wraps(fn)
            def timed(*args, **kwargs):
                with self:
                    return fn(*args, **kwargs)

            return timed

        def __repr__(self):
            return f"stallscope.phase({self.name!r})"

    _phases = _Cache(lambda name: _Phase(_writer, name))
    _ids = _Cache(_writer.name_id)
else:
    _phases = _Cache(_NoopPhase)

#: phase(name) -> the phase object for ``name`` (one per name, cached): ``with`` it, or use it
#: as a decorator. Cost of a cached lookup: one dict probe.
phase = _phases.__getitem__

if _writer is None:

    def step():
        """Marks the end of a training step (no-op: not recording)."""
        return None

    def mark(name, **data):
        """Records a point event ``name`` with keyword data (no-op: not recording)."""
        return None

    def count(name, n=1):
        """Adds ``n`` to counter ``name`` (no-op: not recording)."""
        return None

    def info(kind, data):
        """Records a dict of facts, e.g. DataLoader settings (no-op: not recording)."""
        return None

else:
    if _recorder.session is None:
        step = _writer.step
    else:
        _on_step = _recorder.session.on_step

        def step():
            """Marks the end of a training step; prints a summary every N steps."""
            _on_step(_writer.step())

    def mark(name, **data):
        """Records a point event ``name``; keyword data goes to the run's meta file."""
        _recorder.check(_writer.mark(_ids[name], _to_json(data) if data else ""))

    def count(name, n=1):
        """Adds ``n`` to counter ``name`` (e.g. host syncs)."""
        _writer.counter(_ids[name], int(n))

    def info(kind, data):
        """Records a dict of facts (e.g. DataLoader settings) as one meta line of ``kind``."""
        _recorder.check(_writer.info(str(kind), _to_json(data)))


# For stallscope.auto: a phase boundary observed earlier (DDP's last gradient ready), at its
# CLOCK_MONOTONIC time in ns (time.monotonic_ns()), on this thread. Private: a thread's records
# should stay in time order (src/phase/phase_writer.h); auto writes these as soon as the backward
# they split returns.
if _writer is None:

    def _begin_at(name, ts_ns):
        return None

    _end_at = _begin_at

    def _gpu_span(name, begin_ts_ns, gpu_ns):
        return None

else:

    def _begin_at(name, ts_ns):
        _writer.begin_at(_ids[name], int(ts_ns))

    def _end_at(name, ts_ns):
        _writer.end_at(_ids[name], int(ts_ns))

    def _gpu_span(name, begin_ts_ns, gpu_ns):
        """The GPU time of an instance of phase `name` that began on the host at begin_ts_ns
        (stallscope._cuda resolves CUDA events after the fact)."""
        _writer.gpu_span(_ids[name], int(begin_ts_ns), int(gpu_ns))


def enabled():
    """True when events are recorded (under ``stallscope run``, or STALLSCOPE_PROFILE=1)."""
    return _writer is not None and _writer.enabled


def backend():
    """The recorder in use: "core" (compiled extension), "native" (C library via ctypes), or
    None (not recording, or none could load)."""
    return _recorder.backend.BACKEND if _recorder.backend is not None else None


def _recorder_status():
    """For the start note in python.jsonl (stallscope._startup)."""
    return {KEY_BACKEND: backend(), KEY_BACKEND_ERROR: _recorder.backend_error,
            KEY_RECORDING: enabled()}


if os.environ.get(ENV_RUN_DIR):
    from . import _startup

    _startup.start(sys.modules[__name__])

