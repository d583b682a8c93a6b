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

from . import _cuda, _ddp, _hooks, _syncs
from ._hooks import report_error

# The phases, as recorded (src/base/vocabulary.h).
PHASE_DATA = _hooks.PHASE_DATA
PHASE_FORWARD = _hooks.PHASE_FORWARD
PHASE_EVAL_FORWARD = _hooks.PHASE_EVAL_FORWARD
PHASE_BACKWARD = _hooks.PHASE_BACKWARD
PHASE_COMM_WAIT = _hooks.PHASE_COMM_WAIT
PHASE_OPTIMIZER = _hooks.PHASE_OPTIMIZER
PHASE_CHECKPOINT = _hooks.PHASE_CHECKPOINT
HOST_SYNCS = "host_syncs"  # key in the "hooks" note for the host_sync.* counters
GPU_TIME = "gpu_time"  # key in the "hooks" note for the CUDA-event GPU times

# How a phase is measured, as the "hooks" note says it (src/diagnose/python_notes.h).
MECH_GLOBAL = "global hook"
MECH_PATCH = "patch"
NOT_MEASURED = "not measured: "


# Private names that tests call directly (python/tests).
_forward_pre_hook = _hooks.forward_pre_hook
_forward_hook = _hooks.forward_hook
_optimizer_pre_hook = _hooks.optimizer_pre_hook
_optimizer_post_hook = _hooks.optimizer_post_hook


def installed():
    """True while the hooks are installed and active."""
    return not _hooks.state.off


def mechanisms():
    """{phase: "global hook" | "patch" | "not measured: <why>"} of the current install."""
    return dict(_hooks.state.mechanisms)


def track_user_steps(api):
    """Wraps api.step so a call from the job means "the job marks its own steps". Idempotent;
    sitecustomize calls it as soon as the stallscope package is imported, so `from stallscope
    import step` binds the wrapper too."""
    original = getattr(api, "step", None)
    if original is None or getattr(original, _hooks.MARK, False):
        return

    @functools.wraps(original)
    def step(*args, **kwargs):
        _hooks.state.user_marks_steps = True
        return original(*args, **kwargs)

    setattr(step, _hooks.MARK, True)
    setattr(step, "__wrapped_stallscope__", original)
    api.step = step
    _hooks.state.undo.append(functools.partial(setattr, api, "step", original))


def _raw_step(api):
    step = api.step
    return getattr(step, "__wrapped_stallscope__", step)


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
        _hooks.state.undo.append(register_post(_hooks.forward_hook, always_call=True).remove)
        _hooks.state.undo.append(register_pre(_hooks.forward_pre_hook).remove)
        return MECH_GLOBAL
    _hooks.patch(torch.nn.Module, "__call__", _hooks.wrap_module_call)
    return MECH_PATCH


def _install_optimizer(torch, global_hooks, _done):
    optimizer_mod = _submodule("torch.optim.optimizer")
    register_pre = getattr(optimizer_mod, "register_optimizer_step_pre_hook", None)
    register_post = getattr(optimizer_mod, "register_optimizer_step_post_hook", None)
    if global_hooks and register_pre is not None and register_post is not None:
        _hooks.state.undo.append(register_pre(_hooks.optimizer_pre_hook).remove)
        _hooks.state.undo.append(register_post(_hooks.optimizer_post_hook).remove)
        return MECH_GLOBAL
    # Each class' step is wrapped at its first instance: subclasses override step.
    _hooks.patch(torch.optim.Optimizer, "__init__", _hooks.wrap_optimizer_init)
    return MECH_PATCH


def _install_backward(torch, _global_hooks, _done):
    _hooks.patch(torch.Tensor, "backward", _hooks.wrap_backward)
    _hooks.patch(torch.autograd, "backward", _hooks.wrap_backward)
    return MECH_PATCH


def _install_data_loading(torch, _global_hooks, _done):
    dl = _submodule("torch.utils.data.dataloader")
    _hooks.patch(dl.DataLoader, "__iter__", _hooks.wrap_loader_iter)
    # Private: __next__ lives on the base iterator class in 1.13 and 2.x; subclasses implement
    # _next_data.
    _hooks.patch(dl._BaseDataLoaderIter, "__next__", _hooks.wrap_phase(PHASE_DATA))
    return MECH_PATCH


def _install_checkpointing(torch, _global_hooks, _done):
    save = torch.save
    _hooks.patch(torch, "save", _hooks.wrap_phase(PHASE_CHECKPOINT))
    if getattr(torch.serialization, "save", None) is save:
        _hooks.patch(torch.serialization, "save", lambda _original: torch.save)
    return MECH_PATCH


def _install_host_syncs(torch, _global_hooks, _done):
    state = _hooks.state
    state.syncs = _syncs.SyncCounter(torch, state.api.count, state.api.info,
                                     _hooks.may_count_sync)
    _syncs.patch_all(torch, _hooks.patch, _hooks.sync_hit,
                     lambda: state.is_compiling is not None and state.is_compiling())
    return MECH_PATCH


def _install_gpu_time(torch, _global_hooks, _done):
    """CUDA events at the compute phases' boundaries, active once the job uses CUDA."""
    why_not = _cuda.why_not(torch, _hooks.state.api)
    if why_not:
        return NOT_MEASURED + why_not
    api = _hooks.state.api
    _hooks.state.gpu = _cuda.GpuTimer(torch.cuda, api._gpu_span, api.count, _hooks.say)
    return "cuda events"


def _install_comm_wait(torch, _global_hooks, done):
    """comm_wait is cut out of the backward_pass patch; DDP models are found at their first
    outermost call. Returns "not measured" quietly where no DDP can run at all."""
    if done.get(PHASE_BACKWARD) != MECH_PATCH:
        return NOT_MEASURED + "backward_pass is not measured"
    distributed = getattr(torch, "distributed", None)
    if distributed is None or not distributed.is_available():
        return NOT_MEASURED + "this torch has no torch.distributed"
    if not (callable(getattr(_hooks.state.api, "_begin_at", None))
            and callable(getattr(_hooks.state.api, "_end_at", None))):
        raise AttributeError("the stallscope API has no _begin_at/_end_at")
    _hooks.state.ddp = _ddp.GradientWatch(torch.nn.parallel.DistributedDataParallel)
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
        mark = len(_hooks.state.undo)
        try:
            mechanisms[phase] = installer(torch, global_hooks, mechanisms)
        except Exception as e:
            _undo_to(mark)
            why = f"{type(e).__name__}: {e}"
            mechanisms[phase] = NOT_MEASURED + why
            _hooks.say(f"{phase} not measured: {why}")
    return mechanisms


def _undo_to(mark):
    undo = _hooks.state.undo
    while len(undo) > mark:
        try:
            undo.pop()()
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
    state = _hooks.state
    if state.undo and not state.off:
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
        state.reset(api, torch)
        track_user_steps(api)
        state.api_step = _raw_step(api)
        state.mechanisms = _install_phases(torch, global_hooks)
        _register_fork_handler()
        _register_exit_handler()
        state.off = False
    except Exception as e:
        try:
            uninstall()
        except Exception:
            pass
        report_error("install", e)
        _note_hooks(torch, {}, f"{type(e).__name__}: {e}")
        return False
    _note_hooks(torch, state.mechanisms, None)
    return True


def _after_fork_in_child():
    # A forked child is a new process: it owes its own info("torch"). (A DataLoader worker
    # forked inside data_loading inherits that thread state and stays quiet.)
    state = _hooks.state
    state.process_info_sent = False
    for part in (state.gpu, state.syncs):
        if part is not None:
            part.after_fork_in_child()


def _at_exit():
    """GPU spans that completed, the rest counted; each sync site's count. Never raises."""
    state = _hooks.state
    for part in (state.gpu, state.syncs):
        try:
            if part is not None and not state.off:
                part.finish()
        except Exception:
            pass


def _register_exit_handler():
    # Registered after torch's own handlers, so it runs before them (atexit is LIFO): CUDA is
    # still up.
    state = _hooks.state
    if not state.exit_handler_registered:
        import atexit
        atexit.register(_at_exit)
        state.exit_handler_registered = True


def _register_fork_handler():
    state = _hooks.state
    if not state.fork_handler_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        state.fork_handler_registered = True


def uninstall():
    """Removes every patch and hook handle (for tests; a job never needs it)."""
    state = _hooks.state
    state.off = True
    state.ddp = state.gpu = state.syncs = None
    state.mechanisms = {}
    _undo_to(0)
    state.api = None
    state.api_step = None
