"""Zero-code-change PyTorch hooks: a training job gets phases without editing its code.

`python/sitecustomize.py` calls install() right after the job imports torch (only under
`stallscope run`, and not with --no-auto / STALLSCOPE_AUTO=0). What gets recorded:

  DataLoader.__iter__ and iterator __next__  -> phase "data_loading"   (+ info "dataloader" once
                                                per loader, "dataloader_workers" when PIDs change)
  outermost nn.Module call, grad enabled      -> phase "forward_pass"
  outermost nn.Module call, no grad           -> phase "eval_forward"   (sampling / validation)
  Tensor.backward, torch.autograd.backward    -> phase "backward_pass" (+ "comm_wait" with DDP)
  Optimizer.step (every subclass)             -> phase "optimizer_step", then a step boundary
                                                unless the job marks steps itself
  torch.save                                  -> phase "checkpointing"
  Tensor.item/.cpu/.tolist/.numpy, blocking   -> counter "host_sync.<kind>", info "sync_site"
  .to/.cuda copies, torch.cuda.synchronize,      per call site (stallscope/_syncs.py)
  torch.cuda.empty_cache
  forward/eval_forward/backward/optimizer     -> their GPU time from CUDA events, once the job
                                                uses CUDA (stallscope/_cuda.py)
  first recorded event of the process         -> info "torch" (version, threads, rank, ...)

How: torch's public global hooks where this torch has them, else a patch of the method. Probed
once per install by what torch's functions accept, never by version string:

  phase            torch 1.13              torch 2.0               torch >= 2.1
  forward_pass     patch Module.__call__   patch Module.__call__   global forward pre/post hooks
  optimizer_step   patch <class>.step      global step pre/post    global step pre/post hooks
  comm_wait        the backward_pass patch, plus a gradient hook on each DDP parameter
  the others       patches (public functions, and private _BaseDataLoaderIter.__next__)

Forward hooks need `always_call=True` (torch 2.1): without it no hook runs when forward raises and
the phase would stay open. Each phase installs on its own: when a patch target is missing in
this torch, that phase alone is "not measured: <why>" (one `[stallscope]` line on stderr) and
the others still install. The choice per phase goes to $STALLSCOPE_RUN_DIR/python.jsonl (note
"hooks"), which the run report shows.

Contract: the job behaves exactly as without the hooks. Every original is called with the same
arguments, its result or exception is passed through unchanged (StopIteration included), hooks
return None (torch keeps inputs and outputs), no object is replaced by a proxy, and torch is
never imported by this module. An error inside a hook is reported once on stderr with a
`[stallscope]` prefix and turns all hooks into pass-throughs.

Auto phases never nest: while one is open on a thread, hooks on that thread pass through (a
Module called by a transform inside data_loading, or by activation checkpointing inside
backward_pass, is not a forward_pass). Nothing is recorded inside DataLoader worker processes
or while torch.compile traces. Host syncs are counted outside phases and inside forward/backward,
not inside data_loading, optimizer_step or checkpointing (torch's own bookkeeping there is not
the loop's doing).

DDP's all-reduce wait, "comm_wait": a backward during which a watched DDP gradient was ready is
recorded as backward_pass up to the last one and comm_wait from there until backward returns
(stallscope/_ddp.py says why that is the exposed all-reduce wait, and its caveat on NCCL).

Not measured: a model compiled with `module.compile()` (torch >= 2.2) runs even its outermost
hooks inside the compiled code, so under global forward hooks its forward is no phase
(`torch.compile(model)` is: the wrapper's own call is eager); optimizer steps inside a compiled
function.
"""

import functools
import os
import sys
import threading
import time
import weakref

from . import _cuda as _cuda_mod
from . import _ddp as _ddp_mod
from . import _facts
from . import _syncs as _syncs_mod

PHASE_DATA = "data_loading"
PHASE_FORWARD = "forward_pass"
PHASE_EVAL_FORWARD = "eval_forward"
PHASE_BACKWARD = "backward_pass"
PHASE_COMM_WAIT = "comm_wait"
PHASE_OPTIMIZER = "optimizer_step"
PHASE_CHECKPOINT = "checkpointing"
HOST_SYNCS = "host_syncs"  # key in the "hooks" note for the host_sync.* counters
GPU_TIME = "gpu_time"  # key in the "hooks" note for the CUDA-event GPU times

# How a phase is measured, as the "hooks" note says it (src/diagnose/python_notes.h).
MECH_GLOBAL = "global hook"
MECH_PATCH = "patch"
NOT_MEASURED = "not measured: "

# Phases whose host syncs are torch's or the data pipeline's, not the training loop's: Adam in
# torch 1.13 calls .item() on a CPU step tensor per parameter; transforms call .numpy().
_NO_SYNC_COUNT_IN = (PHASE_DATA, PHASE_OPTIMIZER, PHASE_CHECKPOINT)

_MARK = "_stallscope_auto"  # attribute set on every wrapper we install


class _ThreadState(threading.local):
    active = None  # name of the auto phase open on this thread, or None
    # A phase opened by a global pre hook is closed by a later post hook call, so it keeps:
    cm = None  # its context manager
    owner = None  # the module / optimizer whose pre hook opened it
    depth = 0  # open calls of `owner` (a module re-entered, a step inside a step)
    frame = None  # the frame that called the pre hook; off the stack = the call is over
    gpu = None  # the open phase's GpuTimer token


_tls = _ThreadState()
_lock = threading.Lock()
_api = None  # the stallscope API module (or a fake in tests) while installed
_api_step = None  # the API's own step(), called for automatic boundaries
_off = True  # True: every hook passes straight through
_error_reported = False
_undo = []  # callables that undo what install() did (patches, hook handles), in order
_user_marks_steps = False
_primary_optimizer = None  # weakref to the optimizer whose step() ends a step
_process_info_sent = False
_loaders = _facts.LoaderReporter()  # the DataLoaders reported in this process
_get_worker_info = None
_is_compiling = None
_torch = None
_fork_handler_registered = False
_ddp = None  # _ddp.GradientWatch while comm_wait is measured, else None
_gpu = None  # _cuda.GpuTimer while GPU times are measured, else None
_syncs = None  # _syncs.SyncCounter while host syncs are counted, else None
_exit_handler_registered = False
_mechanisms = {}  # phase -> how it is measured, as noted by the last successful install()


def installed():
    """True while the hooks are installed and active."""
    return not _off


def mechanisms():
    """{phase: "global hook" | "patch" | "not measured: <why>"} of the current install."""
    return dict(_mechanisms)


def _say(text):
    """One `[stallscope]` line on stderr. Never raises."""
    try:
        sys.stderr.write(f"[stallscope] {text}\n")
        sys.stderr.flush()
    except Exception:
        pass


def report_error(where, exc):
    """Turns the hooks off and says so once on stderr. Never raises."""
    global _off, _error_reported
    _off = True
    if _error_reported:
        return
    _error_reported = True
    _say(f"auto-instrumentation turned off after an error in {where}: "
         f"{type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------------------------------
# Recording helpers. Each one swallows its own errors; none changes what the original returns.
# ----------------------------------------------------------------------------------------------

def _enter(name):
    """Opens phase `name` on the API; returns the context manager or None after an error."""
    try:
        if not _process_info_sent:
            _send_process_info()
        cm = _api.phase(name)
        cm.__enter__()
        if _gpu is not None and name in _cuda_mod.TIMED_PHASES:
            _tls.gpu = _gpu.begin(name)
        return cm
    except Exception as e:
        report_error(f"phase({name!r})", e)
        return None


def _exit(cm, name, exc_info):
    token = _tls.gpu
    if token is not None:
        _tls.gpu = None
        _gpu.end(token)
    try:
        cm.__exit__(*exc_info)  # its return value is ignored: we never swallow the job's error
    except Exception as e:
        report_error(f"phase({name!r}) exit", e)


def _in_phase(name, fn, *args, **kwargs):
    """Runs fn(*args, **kwargs) as auto phase `name` on this thread."""
    cm = _enter(name)
    if cm is None:
        return fn(*args, **kwargs)
    _tls.active = name
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        _tls.active = None
        _exit(cm, name, sys.exc_info())
        raise
    _tls.active = None
    _exit(cm, name, (None, None, None))
    return result


def _quiet():
    """True where hooks must not record: turned off, inside an auto phase, or in a worker."""
    if _tls.frame is not None:
        _close_if_stale()
    return _off or _tls.active is not None or _get_worker_info() is not None


def _call_api(what, *args):
    try:
        if not _process_info_sent:
            _send_process_info()
        getattr(_api, what)(*args)
    except Exception as e:
        report_error(f"{what}()", e)


def _send_process_info():
    """One info("torch") per process, sent lazily so that a process that records nothing (a
    forkserver, a worker) stays silent and the thread count is the one the job set."""
    global _process_info_sent
    _process_info_sent = True
    _api.info("torch", _facts.process(_torch))


# ----------------------------------------------------------------------------------------------
# Phases opened by a global pre hook and closed by its post hook
# ----------------------------------------------------------------------------------------------

def _open(name, owner, frame):
    cm = _enter(name)
    if cm is None:
        return
    tls = _tls
    tls.active, tls.cm, tls.owner, tls.depth, tls.frame = name, cm, owner, 1, frame


def _close():
    tls = _tls
    cm, name = tls.cm, tls.active
    tls.active = tls.cm = tls.owner = tls.frame = None
    tls.depth = 0
    _exit(cm, name, (None, None, None))


def _on_stack(frame):
    f = sys._getframe(1)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def _close_if_stale():
    """Closes this thread's hook-opened phase when the call that opened it is over without its
    post hook: torch runs no step post hook when step() raises, and no forward hook for a
    BaseException (KeyboardInterrupt) even with always_call. Its end is then late (now) rather
    than missing, and the thread records again. True when it closed one."""
    frame = _tls.frame
    if frame is None or _on_stack(frame):
        return False
    _close()
    return True


# ----------------------------------------------------------------------------------------------
# forward_pass / eval_forward
# ----------------------------------------------------------------------------------------------

def _forward_name(module):
    """The phase of an outermost module call (and the start of DDP's gradient watch)."""
    if _ddp is not None and _ddp.is_ddp(module):
        _watch_ddp(module)
    return PHASE_FORWARD if _torch.is_grad_enabled() else PHASE_EVAL_FORWARD


def _wrap_module_call(original):
    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        # torch.compile traces through here; is_compiling() is a constant to dynamo, so the
        # traced path never touches thread-locals (no graph break).
        if _is_compiling is not None and _is_compiling():
            return original(self, *args, **kwargs)
        # Inlined _quiet(), nested calls first: this runs for every submodule of every model.
        # A step that raised under torch 2.0's global step hooks left optimizer_step open.
        if _tls.active is not None and (_tls.active != PHASE_OPTIMIZER or not _close_if_stale()):
            return original(self, *args, **kwargs)
        if _off or _get_worker_info() is not None:
            return original(self, *args, **kwargs)
        return _in_phase(_forward_name(self), original, self, *args, **kwargs)
    return __call__


def _forward_pre_hook(module, args):
    """Global forward pre hook (torch >= 2.1): opens the phase at the outermost module call.
    Runs for every module call, so the common cases return first."""
    if _is_compiling is not None and _is_compiling():  # first: dynamo folds it, no graph break
        return None
    tls = _tls
    if tls.active is not None:
        if module is not tls.owner and tls.active != PHASE_OPTIMIZER:
            return None  # a submodule, or a module inside data_loading / backward_pass
        if not _close_if_stale():
            if module is tls.owner:
                tls.depth += 1  # the outermost module called again from its own forward
            return None
    if _off or _get_worker_info() is not None:
        return None
    _open(_forward_name(module), module, sys._getframe(1))
    return None


def _forward_hook(module, args, output):
    """Global forward hook, registered with always_call=True: torch runs it also when forward
    raises an Exception, then re-raises it."""
    if _is_compiling is not None and _is_compiling():
        return None
    tls = _tls
    if module is not tls.owner:
        return None
    if tls.depth > 1:
        tls.depth -= 1
    else:
        _close()
    return None


# ----------------------------------------------------------------------------------------------
# optimizer_step and the automatic step boundary
# ----------------------------------------------------------------------------------------------

def _wrap_optimizer_init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not _off:
            try:
                _wrap_optimizer_class(type(self))
            except Exception as e:
                report_error("Optimizer.__init__", e)
    return __init__


def _wrap_optimizer_class(cls):
    """Wraps cls.step once. torch 1.13 and 2.x wrap `self.__class__.step` in a profiling hook on
    the first instance (Optimizer._hook_for_profile / _patch_step_function) and skip classes
    whose step has `hooked` set; functools.wraps copies that flag onto our wrapper, so torch
    does not wrap again and nothing runs twice."""
    step = getattr(cls, "step", None)
    if step is None or getattr(step, _MARK, False):
        return
    with _lock:
        if not getattr(cls.step, _MARK, False):
            _patch(cls, "step", _wrap_optimizer_step)


def _wrap_optimizer_step(original):
    @functools.wraps(original)
    def step(self, *args, **kwargs):
        if _quiet():
            return original(self, *args, **kwargs)
        result = _in_phase(PHASE_OPTIMIZER, original, self, *args, **kwargs)
        _end_step(self)
        return result
    return step


def _optimizer_pre_hook(optimizer, args, kwargs):
    """Global step pre hook (torch >= 2.0)."""
    if _is_compiling is not None and _is_compiling():
        return None
    tls = _tls
    if tls.active is not None:
        if tls.active != PHASE_OPTIMIZER:
            return None  # inside another auto phase (a step called from forward, a transform)
        if not _close_if_stale():
            tls.depth += 1  # a step inside a step: ZeroRedundancyOptimizer, super().step()
            return None
    if _off or _get_worker_info() is not None:
        return None
    _open(PHASE_OPTIMIZER, optimizer, sys._getframe(1))
    return None


def _optimizer_post_hook(optimizer, args, kwargs):
    """Global step post hook (torch >= 2.0); torch skips it when step() raises."""
    if _is_compiling is not None and _is_compiling():
        return None
    tls = _tls
    if tls.active != PHASE_OPTIMIZER or tls.owner is None:
        return None
    if tls.depth > 1:
        tls.depth -= 1
        return None
    owner = tls.owner
    _close()
    _end_step(owner)
    return None


def _end_step(optimizer):
    if _gpu is not None:
        _gpu.poll()
    if not _off and not _user_marks_steps and _is_primary(optimizer):
        try:
            _api_step()
        except Exception as e:
            report_error("step()", e)


def _is_primary(optimizer):
    """Only the first optimizer that steps ends a step (a GAN's two optimizers make one step).
    When it is garbage-collected, the next one to step takes over."""
    global _primary_optimizer
    primary = _primary_optimizer() if _primary_optimizer is not None else None
    if primary is None:
        _primary_optimizer = weakref.ref(optimizer)
        return True
    return primary is optimizer


def track_user_steps(api):
    """Wraps api.step so a call from the job means "the job marks its own steps". Idempotent;
    sitecustomize calls it as soon as the stallscope package is imported, so `from stallscope
    import step` binds the wrapper too."""
    original = getattr(api, "step", None)
    if original is None or getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def step(*args, **kwargs):
        global _user_marks_steps
        _user_marks_steps = True
        return original(*args, **kwargs)

    setattr(step, _MARK, True)
    setattr(step, "__wrapped_stallscope__", original)
    api.step = step
    _undo.append(functools.partial(setattr, api, "step", original))


def _raw_step(api):
    step = api.step
    return getattr(step, "__wrapped_stallscope__", step)


# ----------------------------------------------------------------------------------------------
# backward_pass and DDP's comm_wait
# ----------------------------------------------------------------------------------------------

def _wrap_backward(original):
    @functools.wraps(original)
    def backward(*args, **kwargs):
        if _quiet():
            return original(*args, **kwargs)
        if _ddp is None or not _ddp.active:  # no DDP model seen: nothing to split
            return _in_phase(PHASE_BACKWARD, original, *args, **kwargs)
        return _ddp_backward(original, args, kwargs)
    return backward


def _ddp_backward(original, args, kwargs):
    """backward_pass with explicit times: when a watched DDP gradient was ready during it, it
    ends at the last one and comm_wait runs from there to the return (stallscope/_ddp.py)."""
    watch = _ddp
    begin_ns = time.monotonic_ns()
    if not _record_at(("_begin_at", PHASE_BACKWARD, begin_ns)):
        return original(*args, **kwargs)
    _tls.active = PHASE_BACKWARD
    token = _gpu.begin(PHASE_BACKWARD) if _gpu is not None else None
    returned = False
    try:
        result = original(*args, **kwargs)
        returned = True
        return result
    finally:
        _tls.active = None
        if token is not None:
            _gpu.end(token)
        end_ns = time.monotonic_ns()
        ready_ns = watch.ready_ns
        if returned and ready_ns > begin_ns:
            _record_at(("_end_at", PHASE_BACKWARD, ready_ns),
                       ("_begin_at", PHASE_COMM_WAIT, ready_ns),
                       ("_end_at", PHASE_COMM_WAIT, end_ns))
        else:  # it raised, or computed no gradient of a DDP model
            _record_at(("_end_at", PHASE_BACKWARD, end_ns))


def _record_at(*records):
    """Records (API method, phase, ts_ns) boundaries; False after an error (reported)."""
    try:
        if not _process_info_sent:
            _send_process_info()
        for what, name, ts_ns in records:
            getattr(_api, what)(name, ts_ns)
        return True
    except Exception as e:
        report_error(f"phase({records[0][1]!r}) at a given time", e)
        return False


def _watch_ddp(ddp):
    """Hooks a DDP model's gradients; on an error comm_wait is given up (one stderr line) and
    every other phase goes on."""
    global _ddp
    try:
        _undo.extend(_ddp.watch(ddp))
    except Exception as e:
        _ddp = None
        _say(f"{PHASE_COMM_WAIT} not measured: {type(e).__name__}: {e}")


# ----------------------------------------------------------------------------------------------
# data_loading, checkpointing, host syncs
# ----------------------------------------------------------------------------------------------

def _patch(owner, attr, make_wrapper):
    original = getattr(owner, attr)
    # Restore exactly: an inherited attribute is deleted again, not copied down.
    own = attr in getattr(owner, "__dict__", {})
    wrapper = make_wrapper(original)
    setattr(wrapper, _MARK, True)
    setattr(owner, attr, wrapper)
    if own:
        _undo.append(functools.partial(setattr, owner, attr, original))
    else:
        _undo.append(functools.partial(delattr, owner, attr))


def _wrap_phase(name):
    def make(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if _quiet():
                return original(*args, **kwargs)
            return _in_phase(name, original, *args, **kwargs)
        return wrapper
    return make


def _may_count_sync():
    return not _off and _tls.active not in _NO_SYNC_COUNT_IN and _get_worker_info() is None


def _sync_hit(kind):
    """Counts a host sync of `kind` whose wrapper (_syncs.counting/copying) the job called."""
    if _off:
        return
    try:
        _syncs.hit(kind, 2)
    except Exception as e:
        report_error("count()", e)


def _wrap_loader_iter(original):
    @functools.wraps(original)
    def __iter__(self):
        if _quiet():
            return original(self)
        # Creating the iterator starts the workers (each epoch unless persistent): data time.
        it = _in_phase(PHASE_DATA, original, self)
        if not _off:
            try:
                record = _loaders.seen(self, it, _torch.get_num_threads)
                if record is not None:
                    _call_api("info", *record)
            except Exception as e:
                report_error("DataLoader settings", e)
        return it
    return __iter__


# ----------------------------------------------------------------------------------------------
# Installers, one per phase: each returns its mechanism, or raises and is rolled back alone.
# ----------------------------------------------------------------------------------------------

def _accepts_keyword(fn, keyword):
    """True when fn's signature has `keyword` (torch's hook registration functions are Python)."""
    import inspect
    try:
        return keyword in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _submodule(name):
    """A torch submodule by name: already imported with torch, but not always an attribute
    (torch/optim/__init__.py deletes `optimizer`)."""
    import importlib
    return importlib.import_module(name)


def _install_forward(torch, global_hooks, _done):
    module_mod = _submodule("torch.nn.modules.module")
    register_pre = getattr(module_mod, "register_module_forward_pre_hook", None)
    register_post = getattr(module_mod, "register_module_forward_hook", None)
    # always_call (torch 2.1) is what closes the phase of a forward that raises.
    if (global_hooks and register_pre is not None and register_post is not None
            and _accepts_keyword(register_post, "always_call")):
        _undo.append(register_post(_forward_hook, always_call=True).remove)
        _undo.append(register_pre(_forward_pre_hook).remove)
        return MECH_GLOBAL
    _patch(torch.nn.Module, "__call__", _wrap_module_call)
    return MECH_PATCH


def _install_optimizer(torch, global_hooks, _done):
    optimizer_mod = _submodule("torch.optim.optimizer")
    register_pre = getattr(optimizer_mod, "register_optimizer_step_pre_hook", None)
    register_post = getattr(optimizer_mod, "register_optimizer_step_post_hook", None)
    if global_hooks and register_pre is not None and register_post is not None:
        _undo.append(register_pre(_optimizer_pre_hook).remove)
        _undo.append(register_post(_optimizer_post_hook).remove)
        return MECH_GLOBAL
    # Each class' step is wrapped at its first instance: subclasses override step.
    _patch(torch.optim.Optimizer, "__init__", _wrap_optimizer_init)
    return MECH_PATCH


def _install_backward(torch, _global_hooks, _done):
    _patch(torch.Tensor, "backward", _wrap_backward)
    _patch(torch.autograd, "backward", _wrap_backward)
    return MECH_PATCH


def _install_data_loading(torch, _global_hooks, _done):
    dl = _submodule("torch.utils.data.dataloader")
    _patch(dl.DataLoader, "__iter__", _wrap_loader_iter)
    # Private: __next__ lives on the base iterator class in 1.13 and 2.x; subclasses implement
    # _next_data.
    _patch(dl._BaseDataLoaderIter, "__next__", _wrap_phase(PHASE_DATA))
    return MECH_PATCH


def _install_checkpointing(torch, _global_hooks, _done):
    save = torch.save
    _patch(torch, "save", _wrap_phase(PHASE_CHECKPOINT))
    if getattr(torch.serialization, "save", None) is save:
        _patch(torch.serialization, "save", lambda _original: torch.save)
    return MECH_PATCH


def _install_host_syncs(torch, _global_hooks, _done):
    global _syncs
    _syncs = _syncs_mod.SyncCounter(torch, _api.count, _api.info, _may_count_sync)
    _syncs_mod.patch_all(torch, _patch, _sync_hit,
                         lambda: _is_compiling is not None and _is_compiling())
    return MECH_PATCH


def _install_gpu_time(torch, _global_hooks, _done):
    """CUDA events at the compute phases' boundaries, active once the job uses CUDA."""
    global _gpu
    why_not = _cuda_mod.why_not(torch, _api)
    if why_not:
        return NOT_MEASURED + why_not
    _gpu = _cuda_mod.GpuTimer(torch.cuda, _api._gpu_span, _api.count, _say)
    return "cuda events"


def _install_comm_wait(torch, _global_hooks, done):
    """comm_wait is cut out of the backward_pass patch; DDP models are found at their first
    outermost call. Returns "not measured" quietly where no DDP can run at all."""
    global _ddp
    if done.get(PHASE_BACKWARD) != MECH_PATCH:
        return NOT_MEASURED + "backward_pass is not measured"
    distributed = getattr(torch, "distributed", None)
    if distributed is None or not distributed.is_available():
        return NOT_MEASURED + "this torch has no torch.distributed"
    if not (callable(getattr(_api, "_begin_at", None))
            and callable(getattr(_api, "_end_at", None))):
        raise AttributeError("the stallscope API has no _begin_at/_end_at")
    _ddp = _ddp_mod.GradientWatch(torch.nn.parallel.DistributedDataParallel)
    return MECH_PATCH


# In the order of the "hooks" note; comm_wait after backward_pass, which it needs.
_INSTALLERS = (
    (PHASE_FORWARD, _install_forward),
    (PHASE_OPTIMIZER, _install_optimizer),
    (PHASE_BACKWARD, _install_backward),
    (PHASE_DATA, _install_data_loading),
    (PHASE_CHECKPOINT, _install_checkpointing),
    (HOST_SYNCS, _install_host_syncs),
    (GPU_TIME, _install_gpu_time),
    (PHASE_COMM_WAIT, _install_comm_wait),
)


def _install_phases(torch, global_hooks):
    """Runs every installer; one that fails is undone alone and its phase is not measured.
    Returns {phase: mechanism}."""
    mechanisms = {}
    for phase, installer in _INSTALLERS:
        mark = len(_undo)
        try:
            mechanisms[phase] = installer(torch, global_hooks, mechanisms)
        except Exception as e:
            _undo_to(mark)
            why = f"{type(e).__name__}: {e}"
            mechanisms[phase] = NOT_MEASURED + why
            _say(f"{phase} not measured: {why}")
    return mechanisms


def _undo_to(mark):
    while len(_undo) > mark:
        try:
            _undo.pop()()
        except Exception:  # a hook handle torch already dropped: nothing left to undo
            pass


def _note_hooks(torch, mechanisms, error):
    """The "hooks" line in python.jsonl (stallscope._startup.note never raises)."""
    try:
        from . import _startup
        _startup.note("hooks", torch=str(getattr(torch, "__version__", "")),
                      mechanisms=mechanisms, error=error)
    except Exception:
        pass


# ----------------------------------------------------------------------------------------------
# Install / uninstall
# ----------------------------------------------------------------------------------------------

def install(api=None, global_hooks=True):
    """Hooks the already-imported torch. `api` defaults to the stallscope package; tests pass
    a fake with phase/step/count/info/enabled (and _begin_at/_end_at for comm_wait).
    global_hooks=False patches even where torch has global hooks (tests compare the two).
    Returns True when the hooks are active. Idempotent. Never raises: a failure is reported
    once and leaves torch as it was."""
    global _api_step, _off, _mechanisms
    if _undo and not _off:
        return True
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        if api is None:
            import stallscope as api
        for name in ("phase", "step", "count", "info"):
            if not callable(getattr(api, name, None)):
                raise AttributeError(f"stallscope API has no {name}()")
        enabled = getattr(api, "enabled", None)
        if enabled is not None and not enabled():
            return False
        uninstall()
        _reset(api, torch)
        track_user_steps(api)
        _api_step = _raw_step(api)
        _mechanisms = _install_phases(torch, global_hooks)
        _register_fork_handler()
        _register_exit_handler()
        _off = False
    except Exception as e:
        try:
            uninstall()
        except Exception:
            pass
        report_error("install", e)
        _note_hooks(torch, {}, f"{type(e).__name__}: {e}")
        return False
    _note_hooks(torch, _mechanisms, None)
    return True


def _reset(api, torch):
    global _api, _torch, _tls, _user_marks_steps, _primary_optimizer, _process_info_sent
    global _get_worker_info, _is_compiling
    _api, _torch = api, torch
    _tls = _ThreadState()  # phases left open by an earlier install are forgotten on all threads
    _user_marks_steps, _primary_optimizer, _process_info_sent = False, None, False
    _loaders.forget()
    _get_worker_info = torch.utils.data.get_worker_info
    # torch >= 2.3: torch.compiler.is_compiling; 2.0-2.2: torch._utils.is_compiling; 1.x: none.
    _is_compiling = (getattr(getattr(torch, "compiler", None), "is_compiling", None)
                     or getattr(getattr(torch, "_utils", None), "is_compiling", None))


def _after_fork_in_child():
    # A forked child is a new process: it owes its own info("torch"). (A DataLoader worker
    # forked inside data_loading inherits that thread state and stays quiet.)
    global _process_info_sent
    _process_info_sent = False
    for part in (_gpu, _syncs):
        if part is not None:
            part.after_fork_in_child()


def _at_exit():
    """GPU spans that completed, the rest counted; each sync site's count. Never raises."""
    for part in (_gpu, _syncs):
        try:
            if part is not None and not _off:
                part.finish()
        except Exception:
            pass


def _register_exit_handler():
    # Registered after torch's own handlers, so it runs before them (atexit is LIFO): CUDA is
    # still up.
    global _exit_handler_registered
    if not _exit_handler_registered:
        import atexit
        atexit.register(_at_exit)
        _exit_handler_registered = True


def _register_fork_handler():
    global _fork_handler_registered
    if not _fork_handler_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_handler_registered = True


def uninstall():
    """Removes every patch and hook handle (for tests; a job never needs it)."""
    global _off, _api, _api_step, _ddp, _mechanisms, _gpu, _syncs
    _off = True
    _ddp = _gpu = _syncs = None
    _mechanisms = {}
    _undo_to(0)
    _api = None
    _api_step = None
