"""Zero-code-change PyTorch hooks: a training job gets phases without editing its code.

`python/sitecustomize.py` calls install() right after the job imports torch (only under
`stallscope run`, and not with --no-auto / the flag STALLSCOPE_AUTO off: 0, false, no or off,
stallscope/_env.py). What gets recorded:

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

Start-up facts, info records whose times are time.monotonic_ns() (the phase records' clock;
stallscope/_life.py, _facts.backends):

  torch.cuda._lazy_init, the call that        -> info "cuda_init" {begin_ns, end_ns}, once per
  initialises CUDA (torch's C++ calls it)        process; nothing when CUDA was initialised
                                                before the hooks were installed, or never
  each torch.compile (dynamo) frame           -> info "compile" {begin_ns, end_ns, frame:
  compilation (torch._dynamo.callback's          "file.py:LINE function" or null, trigger:
  start/end callbacks, where torch has them)     "DYNAMO"... where torch says}, the first 64
  process exit, when it compiled anything     -> info "compile_totals" {count, total_ns} of all
                                                its compilations
  the first step boundary (automatic or the   -> info "backends" {cudnn_benchmark,
  job's stallscope.step())                       cudnn_deterministic: bool|null,
                                                float32_matmul_precision: str|null,
                                                cuda_initialized: bool}, once per process

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
return None (torch keeps inputs and outputs), no object is replaced by a proxy, and stallscope
never imports torch. An error inside a hook is reported once on stderr with a
`[stallscope]` prefix and turns all hooks into pass-throughs.

Auto phases never nest: while one is open on a thread, hooks on that thread pass through (a
Module called by a transform inside data_loading, or by activation checkpointing inside
backward_pass, is not a forward_pass). One exception keeps the closure's work visible:
`optimizer.step(closure)` (LBFGS, torch.optim with a closure, Lightning's automatic
optimization) runs forward and backward inside step. There optimizer_step is closed when a
forward with grad (or a backward) begins, those are recorded as forward_pass and backward_pass,
and optimizer_step is opened again when the backward returns: the step's phase is the
optimizer's own work, in two or more pieces per step (once more per extra closure call), and
the step boundary is still marked once, after step returns. A module the optimizer calls
itself under no_grad stays inside optimizer_step.

Nothing is recorded inside DataLoader worker processes or while torch.compile traces. Host
syncs are counted outside phases and inside forward/backward, not inside data_loading,
optimizer_step or checkpointing (torch's own bookkeeping there is not the loop's doing).

DDP's all-reduce wait, "comm_wait": a backward during which a watched DDP gradient was ready is
recorded as backward_pass up to the last one and comm_wait from there until backward returns
(stallscope/_ddp.py says why that is the exposed all-reduce wait, and its caveat on NCCL).

Not measured: a model compiled with `module.compile()` (torch >= 2.2) runs even its outermost
hooks inside the compiled code, so under global forward hooks its forward is no phase
(`torch.compile(model)` is: the wrapper's own call is eager, one forward_pass per call, the
module it wraps a nested call); optimizer steps inside a compiled function.

torch.compile stays silent: a recent torch (2.11 did) warns at each call of a
`torch.compile(module)` while a global module hook is registered ("... this will cause the hooks
to fire an extra time for the `OptimizedModule`"). Ours do not, so torch's check of that,
torch.nn.modules.module._has_any_global_hook, is wrapped to leave stallscope's own hooks out
(stallscope/_install.py): the warning still shows for the job's own global hooks, and no
warnings filter is touched.

Experiment controls (STALLSCOPE_STOP_AFTER_STEPS, _SYNTHETIC_DATA, _SIDE_WORK_OFF, _SCRATCH_DIR,
_LOADER_SET; set by `stallscope passes`/`sweep`) change what the job does on purpose: they are
read at install() and documented, with their "experiment" info record, in
stallscope/_experiment.py. Unset, nothing of them is installed.

Where: this module is the entry point (install, uninstall, the fork and exit handlers).
stallscope/_install.py has one installer per phase (the table above), stallscope/_hooks.py the
hooks themselves (what runs inside the job's torch calls), stallscope/_state.py what they know
(one State per process: the API, torch's probes, on/off, the undo list, each thread's open
phase), stallscope/_facts.py what the info records say, stallscope/_life.py the start-up
facts (CUDA's initialisation, compilations), stallscope/_protocol.py every name written
(phases, info kinds and keys, notes), stallscope/_notes.py the stderr lines and the notes.
"""

import functools
import os
import sys

from . import _experiment, _hooks, _install, _notes, _protocol
from ._hooks import report_error
from ._protocol import KEY_ERROR, KEY_MECHANISMS, KEY_TORCH, NOTE_HOOKS

# The phases, as recorded (src/base/vocabulary.h).
PHASE_DATA = _protocol.PHASE_DATA
PHASE_FORWARD = _protocol.PHASE_FORWARD
PHASE_EVAL_FORWARD = _protocol.PHASE_EVAL_FORWARD
PHASE_BACKWARD = _protocol.PHASE_BACKWARD
PHASE_COMM_WAIT = _protocol.PHASE_COMM_WAIT
PHASE_OPTIMIZER = _protocol.PHASE_OPTIMIZER
PHASE_CHECKPOINT = _protocol.PHASE_CHECKPOINT
# Keys of the "hooks" note besides the phases, and how a phase is measured there.
HOST_SYNCS = _protocol.MECHANISM_HOST_SYNCS
GPU_TIME = _protocol.MECHANISM_GPU_TIME
MECH_GLOBAL = _protocol.MECH_GLOBAL
MECH_PATCH = _protocol.MECH_PATCH
NOT_MEASURED = _protocol.NOT_MEASURED

# Private names that tests call directly (python/tests).
_forward_pre_hook = _hooks.forward_pre_hook
_forward_hook = _hooks.forward_hook
_optimizer_pre_hook = _hooks.optimizer_pre_hook
_optimizer_post_hook = _hooks.optimizer_post_hook
_accepts_keyword = _install.accepts_keyword


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
        if _hooks.state.life is not None and not _hooks.state.life.backends_sent:
            _hooks.note_backends()
        result = original(*args, **kwargs)
        experiment = _hooks.state.experiment
        if experiment is not None:
            experiment.step_ended()  # STALLSCOPE_STOP_AFTER_STEPS may end the process here
        return result

    setattr(step, _hooks.MARK, True)
    setattr(step, "__wrapped_stallscope__", original)
    api.step = step
    _hooks.state.undo.append(functools.partial(setattr, api, "step", original))


def _raw_step(api):
    step = api.step
    return getattr(step, "__wrapped_stallscope__", step)


def _note_hooks(torch, mechanisms, error):
    """The "hooks" line in python.jsonl (stallscope._notes.note never raises)."""
    try:
        _notes.note(NOTE_HOOKS, {KEY_TORCH: str(getattr(torch, "__version__", "")),
                                 KEY_MECHANISMS: mechanisms, KEY_ERROR: error})
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
            api = sys.modules[__package__]  # the stallscope package: imported before us
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
        state.mechanisms = _install.install_phases(torch, global_hooks)
        state.life = _install.install_life(torch)
        experiment = _experiment.from_env(os.environ, _at_exit)
        if experiment is not None:
            state.experiment = _install.install_experiment(torch, experiment)
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
    for part in (state.gpu, state.syncs, state.life):
        if part is not None:
            part.after_fork_in_child()


def _at_exit():
    """GPU spans that completed, the rest counted; each sync site's count; the "experiment"
    info. Never raises."""
    state = _hooks.state
    for part in (state.gpu, state.syncs, state.life):
        try:
            if part is not None and not state.off:
                part.finish()
        except Exception:
            pass
    if state.experiment is not None:
        state.experiment.send_info()


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
    state.ddp = state.gpu = state.syncs = state.experiment = state.life = None
    state.mechanisms = {}
    _install.undo_to(0)
    state.api = None
    state.api_step = None
