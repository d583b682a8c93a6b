"""stallscope.auto's installers, one per phase: each puts its hooks (stallscope/_hooks.py) in
place with torch's global hooks where this torch has them, else with patches, and returns how
its phase is measured, as the "hooks" note in python.jsonl says it. Probed by what torch's
functions accept, never by version string. One that raises is undone alone: its phase is "not
measured: <why>" (one `[stallscope]` line) and the others still install. torch is passed in,
never imported here.
"""

from . import _cuda, _ddp, _experiment, _hooks, _syncs
from ._hooks import (PHASE_BACKWARD, PHASE_CHECKPOINT, PHASE_COMM_WAIT, PHASE_DATA,
                     PHASE_FORWARD, PHASE_OPTIMIZER)

HOST_SYNCS = "host_syncs"  # key in the "hooks" note for the host_sync.* counters
GPU_TIME = "gpu_time"  # key in the "hooks" note for the CUDA-event GPU times

# How a phase is measured, as the "hooks" note says it (src/diagnose/python_notes.h).
MECH_GLOBAL = "global hook"
MECH_PATCH = "patch"
NOT_MEASURED = "not measured: "


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
            _hooks.say(f"{phase} not measured: {why}")
    return mechanisms


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
        _hooks.say(f"experiment: not applied: {type(e).__name__}: {e}")
        return None


def undo_to(mark):
    """Undoes, newest first, what was installed since len(state.undo) was `mark`."""
    undo = _hooks.state.undo
    while len(undo) > mark:
        try:
            undo.pop()()
        except Exception:  # a hook handle torch already dropped: nothing left to undo
            pass
