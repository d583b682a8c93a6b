"""What a run spends before its steady state, as stallscope.auto's info records (auto.py's
table): when this process initialised CUDA, each torch.compile (dynamo) compilation, and the
backend settings at the first step (_facts.backends). The report's "start-up ... · warm-up ..."
line names its causes from them. Every time is time.monotonic_ns(), the clock of the phase
records. torch is passed in, never imported here.

cuda_init: torch's C++ initialises CUDA lazily by calling the Python function
`torch.cuda._lazy_init` (looked up on the module at that moment: torch/csrc/utils/
cuda_lazy_init.cpp in 1.13, device_lazy_init.cpp in 2.x, `PyObject_CallMethod(torch.cuda,
"_lazy_init")`), and so do torch.cuda's own Python functions. Its first call that finds CUDA
uninitialised and leaves it initialised is timed; then the original is put back, so later calls
cost nothing. Caveats: with CUDA_MODULE_LOADING=LAZY the primary context may be created at the
first allocation right after, outside the timed call; a caller that bound `_lazy_init` by name
at import (torch.cuda.memory, .random) is not seen, and a job that initialised CUDA before the
hooks were installed (a late `import stallscope`) gets no record. Nothing here calls CUDA: a
CPU job, or a CPU-only torch, gets no record.

compile: torch 2.x's `torch._dynamo.callback.callback_handler` (where this torch has it) runs
its start and end callbacks around each frame compilation (convert_frame.py's compile_inner;
newer versions pass CallbackArgs: the trigger, e.g. DYNAMO or LAZY_BACKWARD, and fold nested
compilations into one; older ones pass nothing). torch._dynamo is imported lazily by
torch.compile, so the callbacks are registered when `torch._dynamo.callback` is imported (a
post-import hook, _imports.PostImportFinder), never by importing it ourselves. Up to
MAX_COMPILE_RECORDS records per process; the rest are only counted, and at exit "compile_totals"
gives the count and total time of all. A torch without the callback module (1.13; early 2.x):
nothing.

Each callback swallows its errors through `fail` (stallscope/_hooks.report_error): nothing here
can break the job.
"""

import functools
import os
import sys
import time
import types

from ._imports import PostImportFinder
from ._protocol import (INFO_COMPILE, INFO_COMPILE_TOTALS, INFO_CUDA_INIT, KEY_BEGIN_NS, KEY_COUNT,
                        KEY_END_NS, KEY_FRAME, KEY_TOTAL_NS, KEY_TRIGGER)

MAX_COMPILE_RECORDS = 64
CALLBACK_MODULE = "torch._dynamo.callback"
_FRAME_SEARCH_DEPTH = 64  # frames walked up from a start callback to dynamo's _compile


class Life:
    """The records' state in one process. `info(kind, dict)` is the API's; `fail(where, exc)`
    reports an error (and turns the hooks off); `quiet()` is true where nothing may be recorded
    (hooks off, a DataLoader worker)."""

    def __init__(self, info, fail, quiet):
        self._info = info
        self._fail = fail
        self._quiet = quiet
        self.cuda_init_done = False  # recorded, or found initialised: nothing more to watch
        self.backends_sent = False  # _hooks.note_backends
        self.compile_count = 0
        self.compile_total_ns = 0
        self._compile_depth = 0
        self._compile_begin = None  # (begin_ns, frame, trigger) of the open compilation

    def after_fork_in_child(self):
        self.backends_sent = False
        self.compile_count = self.compile_total_ns = self._compile_depth = 0
        self._compile_begin = None

    def finish(self):
        """At exit: "compile_totals" when this process compiled anything."""
        if self.compile_count and not self._quiet():
            self._send(INFO_COMPILE_TOTALS, {KEY_COUNT: self.compile_count,
                                             KEY_TOTAL_NS: self.compile_total_ns})

    # cuda_init ------------------------------------------------------------------------------

    def wrap_lazy_init(self, cuda):
        """A wrapper maker for `cuda._lazy_init` (for _hooks.patch)."""
        life = self

        def make(original):
            @functools.wraps(original)
            def _lazy_init(*args, **kwargs):
                if life.cuda_init_done or life._quiet():
                    return original(*args, **kwargs)
                if life._initialized(cuda):  # before us, or by a caller we do not see
                    life._cuda_init_over(cuda, _lazy_init, original)
                    return original(*args, **kwargs)
                begin_ns = time.monotonic_ns()
                result = original(*args, **kwargs)  # an exception passes through: not recorded
                end_ns = time.monotonic_ns()
                # A call made while CUDA initialises (a queued call re-entering) returns early
                # with CUDA not yet initialised: only the outermost one is the initialisation.
                if not life.cuda_init_done and life._initialized(cuda):
                    life._cuda_init_over(cuda, _lazy_init, original)
                    life._send(INFO_CUDA_INIT, {KEY_BEGIN_NS: begin_ns, KEY_END_NS: end_ns})
                return result
            return _lazy_init
        return make

    def _initialized(self, cuda):
        try:
            return bool(cuda.is_initialized())
        except Exception as e:
            self._fail("torch.cuda.is_initialized()", e)
            return True  # watch no more

    def _cuda_init_over(self, cuda, wrapper, original):
        """Nothing more to time: the original goes back, so later calls cost nothing (the undo
        that uninstall runs sets it again, harmlessly)."""
        self.cuda_init_done = True
        try:
            if getattr(cuda, "_lazy_init", None) is wrapper:
                cuda._lazy_init = original
        except Exception:
            pass

    # compile --------------------------------------------------------------------------------

    def on_compile_start(self, *args):
        """A callback_handler start callback: (CallbackArgs) on newer torch, () on older."""
        try:
            self._compile_depth += 1
            if self._compile_depth > 1 or self._quiet():
                return  # older torch does not fold nested compilations into one
            trigger = getattr(getattr(args[0], "callback_trigger", None), "name", None) \
                if args else None
            # The frame is looked up only for a compilation that gets its own record.
            frame = (compiled_frame(sys._getframe(1))
                     if self.compile_count < MAX_COMPILE_RECORDS else None)
            self._compile_begin = (time.monotonic_ns(), frame, trigger)
        except Exception as e:
            self._fail("compile start callback", e)

    def on_compile_end(self, *args):
        try:
            if self._compile_depth == 0:
                return  # registered while a compilation was running
            self._compile_depth -= 1
            if self._compile_depth:
                return
            begin, self._compile_begin = self._compile_begin, None
            if begin is None:
                return
            end_ns = time.monotonic_ns()
            begin_ns, frame, trigger = begin
            self.compile_count += 1
            self.compile_total_ns += end_ns - begin_ns
            if self.compile_count <= MAX_COMPILE_RECORDS:
                record = {KEY_BEGIN_NS: begin_ns, KEY_END_NS: end_ns, KEY_FRAME: frame}
                if trigger is not None:
                    record[KEY_TRIGGER] = trigger
                self._send(INFO_COMPILE, record)
        except Exception as e:
            self._fail("compile end callback", e)

    def _send(self, kind, data):
        try:
            self._info(kind, data)
        except Exception as e:
            self._fail(f"info({kind!r})", e)


def compiled_frame(frame):
    """"file.py:LINE function" of the code dynamo compiles, from the `code` argument of
    torch/_dynamo/convert_frame.py's _compile (or its nested compile_inner, which runs the
    callbacks in recent versions) on the stack above `frame`, or None."""
    marker = os.sep + "_dynamo" + os.sep + "convert_frame"
    for _ in range(_FRAME_SEARCH_DEPTH):
        if frame is None:
            return None
        if marker in frame.f_code.co_filename:
            code = frame.f_locals.get("code")
            if isinstance(code, types.CodeType):
                return "%s:%d %s" % (os.path.basename(code.co_filename), code.co_firstlineno,
                                     code.co_name)
        frame = frame.f_back
    return None


def watch_compiles(life, undo):
    """Registers life's callbacks with torch._dynamo.callback's handler: now if it is imported,
    else when it is. Appends what removes them to `undo`. False when this torch cannot have them
    (no torch._dynamo at all)."""
    name = CALLBACK_MODULE
    module = sys.modules.get(name)
    if module is not None:
        return _register(life, module, undo)
    if not _exists(name.rpartition(".")[0]):
        return False  # torch < 2.0: no torch._dynamo, nothing to wait for
    finder = PostImportFinder({name: lambda m: _register(life, m, undo)})
    sys.meta_path.insert(0, finder)
    undo.append(functools.partial(_remove_finder, finder))
    return True


def _exists(package):
    """Whether `package` can be imported, without importing it (its parent must be)."""
    import importlib.util
    try:
        return importlib.util.find_spec(package) is not None
    except Exception:
        return False


def _remove_finder(finder):
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


def _register(life, module, undo):
    handler = getattr(module, "callback_handler", None)
    register_start = getattr(handler, "register_start_callback", None)
    register_end = getattr(handler, "register_end_callback", None)
    if not (callable(register_start) and callable(register_end)):
        return False
    start, end = life.on_compile_start, life.on_compile_end
    register_start(start)
    undo.append(functools.partial(_remove_callback, handler, "remove_start_callback", start))
    register_end(end)
    undo.append(functools.partial(_remove_callback, handler, "remove_end_callback", end))
    return True


def _remove_callback(handler, method, callback):
    try:
        getattr(handler, method)(callback)
    except (AttributeError, ValueError):
        pass
