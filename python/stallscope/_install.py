"""stallscope.auto's installers, one per phase: each puts its hooks (stallscope/_hooks.py) in
place with torch's global hooks where this torch has them, else with patches, and returns how
its phase is measured, as the "hooks" note in python.jsonl says it. Probed by what torch's
functions accept, never by version string. One that raises is undone alone: its phase is "not
measured: <why>" (one `[stallscope]` line) and the others still install. torch is passed in,
never imported here.
"""

import functools

from . import _cuda, _ddp, _experiment, _hooks, _life, _notes, _syncs
from ._protocol import (MECH_CUDA_EVENTS, MECH_GLOBAL, MECH_PATCH, MECHANISM_GPU_TIME,
                        MECHANISM_HOST_SYNCS, NOT_MEASURED, PHASE_BACKWARD, PHASE_CHECKPOINT,
                        PHASE_COMM_WAIT, PHASE_DATA, PHASE_FORWARD, PHASE_OPTIMIZER)

HOST_SYNCS = MECHANISM_HOST_SYNCS  # key in the "hooks" note for the host_sync.* counters
GPU_TIME = MECHANISM_GPU_TIME  # key in the "hooks" note for the CUDA-event GPU times


def accepts_keyword(fn, keyword):
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
            and accepts_keyword(register_post, "always_call")):
        post = register_post(_hooks.forward_hook, always_call=True)
        _hooks.state.undo.append(post.remove)
        pre = register_pre(_hooks.forward_pre_hook)
        _hooks.state.undo.append(pre.remove)
        _hide_from_compile_warning(module_mod, (post.id, pre.id))
        return MECH_GLOBAL
    _hooks.patch(torch.nn.Module, "__call__", _hooks.wrap_module_call)
    return MECH_PATCH


def _hide_from_compile_warning(module_mod, ours):
    """A recent torch (2.11 did) warns at each call of a `torch.compile(module)` ("Using
    `torch.compile(module)` when there are global hooks on modules (e.g., from
    `register_module_forward_hook`); this will cause the hooks to fire an extra time for the
    `OptimizedModule` ...") when torch.nn.modules.module._has_any_global_hook() is true
    (OptimizedModule.__call__, torch/_dynamo/eval_frame.py). Ours do not fire an extra phase
    (the OptimizedModule is the outermost module, the one it wraps a nested call), so that
    check is wrapped to leave our hooks out: true only when another global hook is registered.
    The job's own hooks still get the warning; no warnings filter is touched. The hook tables
    are the globals the original reads (its co_names), so a table added in a later torch is
    seen too."""
    original = getattr(module_mod, "_has_any_global_hook", None)
    names = tuple(n for n in getattr(getattr(original, "__code__", None), "co_names", ())
                  if n.startswith("_global_"))
    if not callable(original) or not names:
        return  # a torch without the warning, or a check of another shape: left as it is
    ours = frozenset(ours)

    def make(original):
        @functools.wraps(original)
        def _has_any_global_hook():
            result = original()
            if not result:
                return result
            for name in names:
                hooks = getattr(module_mod, name, None)
                if not isinstance(hooks, dict):
                    if hooks:
                        return result
                elif any(key not in ours for key in hooks):
                    return result
            return False
        return _has_any_global_hook

    _hooks.patch(module_mod, "_has_any_global_hook", make)


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
    _hooks.state.gpu = _cuda.GpuTimer(torch.cuda, api._gpu_span, api.count, _notes.say)
    return MECH_CUDA_EVENTS


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


def install_phases(torch, global_hooks):
    """Runs every installer; one that fails is undone alone and its phase is not measured.
    Returns {phase: mechanism}."""
    mechanisms = {}
    for phase, installer in _INSTALLERS:
        mark = len(_hooks.state.undo)
        try:
            mechanisms[phase] = installer(torch, global_hooks, mechanisms)
        except Exception as e:
            undo_to(mark)
            why = f"{type(e).__name__}: {e}"
            mechanisms[phase] = NOT_MEASURED + why
            _notes.say(f"{phase} not measured: {why}")
    return mechanisms


def install_life(torch):
    """The start-up records (stallscope/_life.py): CUDA's lazy initialisation where this torch
    has CUDA and it is not initialised yet, compile callbacks where torch has torch._dynamo.
    Returns the _life.Life, or None when they could not be put in place (undone, one
    `[stallscope]` line). Not a phase: the "hooks" note does not list it."""
    state = _hooks.state
    mark = len(state.undo)
    try:
        life = _life.Life(state.api.info, _hooks.report_error,
                          lambda: state.off or state.get_worker_info() is not None)
        cuda = getattr(torch, "cuda", None)
        if (getattr(getattr(torch, "version", None), "cuda", None) is not None
                and callable(getattr(cuda, "_lazy_init", None))
                and callable(getattr(cuda, "is_initialized", None))):
            if cuda.is_initialized():
                life.cuda_init_done = True  # before us: nothing to time
            else:
                _hooks.patch(cuda, "_lazy_init", life.wrap_lazy_init(cuda))
        _life.watch_compiles(life, state.undo)
        return life
    except Exception as e:
        undo_to(mark)
        _notes.say(f"start-up records not made: {type(e).__name__}: {e}")
        return None


def install_experiment(torch, experiment):
    """The experiment controls' patches (stallscope/_experiment.py), on top of the phases'.
    Returns the experiment, or None when its patches could not all be put in place (undone,
    one `[stallscope]` line)."""
    mark = len(_hooks.state.undo)
    try:
        _experiment.install(torch, experiment)
        return experiment
    except Exception as e:
        undo_to(mark)
        _notes.say(f"experiment: not applied: {type(e).__name__}: {e}")
        return None


def undo_to(mark):
    """Undoes, newest first, what was installed since len(state.undo) was `mark`."""
    undo = _hooks.state.undo
    while len(undo) > mark:
        try:
            undo.pop()()
        except Exception:  # a hook handle torch already dropped: nothing left to undo
            pass
