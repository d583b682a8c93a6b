"""The hooks of stallscope.auto: what runs inside the job's torch calls. auto.py says what is
recorded and the contract; _install.py puts these hooks in place, one phase at a time.

Every wrapper and global hook here reads `state` (stallscope/_state.py), the process's one
State, and passes straight through to the original when the hooks are off, when an auto phase
is already open on the thread, inside a DataLoader worker, or while torch.compile traces. The
recording helpers swallow their own errors: report_error() turns every hook into a
pass-through and says so once.
"""

import functools
import sys
import threading
import time
import weakref

from . import _facts
from ._notes import say
from ._protocol import (GPU_TIMED_PHASES, INFO_BACKENDS, INFO_TORCH, PHASE_BACKWARD,
                        PHASE_CHECKPOINT, PHASE_COMM_WAIT, PHASE_DATA, PHASE_EVAL_FORWARD,
                        PHASE_FORWARD, PHASE_OPTIMIZER)
from ._state import State

# Phases whose host syncs are torch's or the data pipeline's, not the training loop's: Adam in
# torch 1.13 calls .item() on a CPU step tensor per parameter; transforms call .numpy().
_NO_SYNC_COUNT_IN = (PHASE_DATA, PHASE_OPTIMIZER, PHASE_CHECKPOINT)
_GPU_TIMED = frozenset(GPU_TIMED_PHASES)  # looked up at every phase begin

MARK = "_stallscope_auto"  # attribute set on every wrapper we install

state = State()  # the one per process: torch calls the hooks with no context to pass
_lock = threading.Lock()  # one wrapper per optimizer class, whichever thread creates it


def report_error(where, exc):
    """Turns the hooks off and says so once on stderr. Never raises."""
    state.off = True
    if state.error_reported:
        return
    state.error_reported = True
    say(f"auto-instrumentation turned off after an error in {where}: "
        f"{type(exc).__name__}: {exc}")


# ----------------------------------------------------------------------------------------------
# Recording helpers. Each one swallows its own errors; none changes what the original returns.
# ----------------------------------------------------------------------------------------------

def _enter(name):
    """Opens phase `name` on the API; returns the context manager or None after an error."""
    try:
        if not state.process_info_sent:
            _send_process_info()
        cm = state.api.phase(name)
        cm.__enter__()
        if state.gpu is not None and name in _GPU_TIMED:
            state.tls.gpu = state.gpu.begin(name)
        return cm
    except Exception as e:
        report_error(f"phase({name!r})", e)
        return None


def _exit(cm, name, exc_info):
    token = state.tls.gpu
    if token is not None:
        state.tls.gpu = None
        state.gpu.end(token)
    try:
        cm.__exit__(*exc_info)  # its return value is ignored: we never swallow the job's error
    except Exception as e:
        report_error(f"phase({name!r}) exit", e)


def in_phase(name, fn, *args, **kwargs):
    """Runs fn(*args, **kwargs) as auto phase `name` on this thread; returns its result. For
    the hooks and the experiment controls' patches, where quiet() is false."""
    cm = _enter(name)
    if cm is None:
        return fn(*args, **kwargs)
    state.tls.active = name
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        state.tls.active = None
        _exit(cm, name, sys.exc_info())
        raise
    state.tls.active = None
    _exit(cm, name, (None, None, None))
    return result


def quiet():
    """True where hooks must not record: turned off, inside an auto phase, or in a worker."""
    if state.tls.frame is not None:
        _close_if_stale()
    return state.off or state.tls.active is not None or state.get_worker_info() is not None


def in_worker():
    """True inside a DataLoader worker process (where nothing is recorded or changed)."""
    return state.get_worker_info() is not None


def _call_api(what, *args):
    try:
        if not state.process_info_sent:
            _send_process_info()
        getattr(state.api, what)(*args)
    except Exception as e:
        report_error(f"{what}()", e)


def _send_process_info():
    """One info("torch") per process, sent lazily so that a process that records nothing (a
    forkserver, a worker) stays silent and the thread count is the one the job set."""
    state.process_info_sent = True
    state.api.info(INFO_TORCH, _facts.process(state.torch))


def note_backends():
    """The "backends" info, once per process, at its first step boundary. Never raises."""
    life = state.life
    if life is None or life.backends_sent or state.off:
        return
    life.backends_sent = True
    _call_api("info", INFO_BACKENDS, _facts.backends(state.torch))


# ----------------------------------------------------------------------------------------------
# Phases opened by a global pre hook and closed by its post hook
# ----------------------------------------------------------------------------------------------

def _open(name, owner, frame):
    cm = _enter(name)
    if cm is None:
        return
    tls = state.tls
    tls.active, tls.cm, tls.owner, tls.depth, tls.frame = name, cm, owner, 1, frame


def _close():
    tls = state.tls
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
    frame = state.tls.frame
    if frame is None or _on_stack(frame):
        return False
    _close()
    return True


# ----------------------------------------------------------------------------------------------
# forward_pass / eval_forward
# ----------------------------------------------------------------------------------------------

def _forward_name(module):
    """The phase of an outermost module call (and the start of DDP's gradient watch)."""
    if state.ddp is not None and state.ddp.is_ddp(module):
        _watch_ddp(module)
    return PHASE_FORWARD if state.torch.is_grad_enabled() else PHASE_EVAL_FORWARD


def wrap_module_call(original):
    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        # torch.compile traces through here; is_compiling() is a constant to dynamo, so the
        # traced path never touches thread-locals (no graph break).
        if state.is_compiling is not None and state.is_compiling():
            return original(self, *args, **kwargs)
        # Inlined quiet(), nested calls first: this runs for every submodule of every model.
        # Inside optimizer_step: the forward of the step's closure, or a step that raised.
        tls = state.tls
        active = tls.active
        if active is not None and (active != PHASE_OPTIMIZER or not step_gives_way(True)):
            return original(self, *args, **kwargs)
        if state.off or state.get_worker_info() is not None:
            return original(self, *args, **kwargs)
        return in_phase(_forward_name(self), original, self, *args, **kwargs)
    return __call__


def forward_pre_hook(module, args):
    """Global forward pre hook (torch >= 2.1): opens the phase at the outermost module call.
    Runs for every module call, so the common cases return first."""
    # First: dynamo folds is_compiling(), so the traced path never breaks the graph.
    if state.is_compiling is not None and state.is_compiling():
        return None
    tls = state.tls
    active = tls.active
    if active is not None:
        if active == PHASE_OPTIMIZER:
            if not step_gives_way(True):
                return None  # a module the optimizer calls itself, without grad
        elif module is tls.owner:
            if not _close_if_stale():
                tls.depth += 1  # the outermost module called again from its own forward
                return None
        else:
            return None  # a submodule, or a module inside data_loading / backward_pass
    if state.off or state.get_worker_info() is not None:
        return None
    _open(_forward_name(module), module, sys._getframe(1))
    return None


def forward_hook(module, args, output):
    """Global forward hook, registered with always_call=True: torch runs it also when forward
    raises an Exception, then re-raises it."""
    if state.is_compiling is not None and state.is_compiling():
        return None
    tls = state.tls
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

def wrap_optimizer_init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not state.off:
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
    if step is None or getattr(step, MARK, False):
        return
    with _lock:
        if not getattr(cls.step, MARK, False):
            patch(cls, "step", _wrap_optimizer_step)


def _wrap_optimizer_step(original):
    @functools.wraps(original)
    def step(self, *args, **kwargs):
        if quiet():
            return original(self, *args, **kwargs)
        # Opened like a global pre hook's phase (no frame: closed here, never stale), so that a
        # closure's forward can suspend it (step_gives_way).
        _open(PHASE_OPTIMIZER, self, None)
        if state.tls.owner is not self:  # the API failed: reported, hooks off
            return original(self, *args, **kwargs)
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            _leave_step(self)
            raise
        _leave_step(self)
        _end_step(self)
        return result
    return step


def _leave_step(optimizer):
    """At the return of a patched step: closes its phase, or forgets it where the closure's
    forward suspended it and no backward re-opened it."""
    tls = state.tls
    if tls.active == PHASE_OPTIMIZER and tls.owner is optimizer:
        _close()
    elif tls.suspended is not None and tls.suspended[0] is optimizer:
        tls.suspended = None


def step_gives_way(forward):
    """Called where a forward (forward=True) or a backward begins on a thread whose open phase
    is optimizer_step. True when the caller may open its own phase: the step had raised (its
    phase is closed now, late), or it is suspended for the closure's work (torch.optim's
    `step(closure)`, LBFGS, Lightning's automatic optimization run forward and backward inside
    step). A forward without grad is the optimizer's own module call and does not suspend it
    (torch runs step under no_grad and the closure under enable_grad). The suspended step is
    re-opened when a backward returns (resume_step), once per closure call."""
    if _close_if_stale():
        return True
    if state.off or (forward and not state.torch.is_grad_enabled()):
        return False
    tls = state.tls
    tls.suspended = [tls.owner, tls.depth, tls.frame]
    _close()
    return True


def resume_step():
    """After a backward returned: re-opens the optimizer_step it suspended. A step whose call is
    over (it raised under global hooks, which run no post hook) stays closed."""
    tls = state.tls
    suspended = tls.suspended
    if suspended is None or tls.active is not None:
        return
    tls.suspended = None
    owner, depth, frame = suspended
    if state.off or (frame is not None and not _on_stack(frame)):
        return
    _open(PHASE_OPTIMIZER, owner, frame)
    if tls.active == PHASE_OPTIMIZER:
        tls.depth = depth


def optimizer_pre_hook(optimizer, args, kwargs):
    """Global step pre hook (torch >= 2.0)."""
    if state.is_compiling is not None and state.is_compiling():
        return None
    tls = state.tls
    if tls.active is not None:
        if tls.active != PHASE_OPTIMIZER:
            return None  # inside another auto phase (a step called from forward, a transform)
        if not _close_if_stale():
            tls.depth += 1  # a step inside a step: ZeroRedundancyOptimizer, super().step()
            return None
    if state.off or state.get_worker_info() is not None:
        return None
    suspended = tls.suspended
    if suspended is not None and suspended[2] is not None and not _on_stack(suspended[2]):
        tls.suspended = None  # a step that raised inside its closure: over
    _open(PHASE_OPTIMIZER, optimizer, sys._getframe(1))
    return None


def optimizer_post_hook(optimizer, args, kwargs):
    """Global step post hook (torch >= 2.0); torch skips it when step() raises."""
    if state.is_compiling is not None and state.is_compiling():
        return None
    tls = state.tls
    if tls.active is None and tls.suspended is not None:
        # The closure's forward suspended the step and no backward re-opened it.
        suspended = tls.suspended
        if suspended[1] > 1:
            suspended[1] -= 1
            return None
        tls.suspended = None
        _end_step(suspended[0])
        return None
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
    if state.gpu is not None:
        state.gpu.poll()
    if state.life is not None and not state.life.backends_sent:
        note_backends()
    if not state.off and not state.user_marks_steps and _is_primary(optimizer):
        try:
            state.api_step()
        except Exception as e:
            report_error("step()", e)
        if state.experiment is not None:
            state.experiment.step_ended()  # STALLSCOPE_STOP_AFTER_STEPS may end the process here


def _is_primary(optimizer):
    """Only the first optimizer that steps ends a step (a GAN's two optimizers make one step).
    When it is garbage-collected, the next one to step takes over."""
    primary = state.primary_optimizer() if state.primary_optimizer is not None else None
    if primary is None:
        state.primary_optimizer = weakref.ref(optimizer)
        return True
    return primary is optimizer


# ----------------------------------------------------------------------------------------------
# backward_pass and DDP's comm_wait
# ----------------------------------------------------------------------------------------------

def wrap_backward(original):
    @functools.wraps(original)
    def backward(*args, **kwargs):
        if quiet() and not _backward_in_step():
            return original(*args, **kwargs)
        if state.ddp is None or not state.ddp.active:  # no DDP model seen: nothing to split
            result = in_phase(PHASE_BACKWARD, original, *args, **kwargs)
        else:
            result = _ddp_backward(original, args, kwargs)
        if state.tls.suspended is not None:
            resume_step()  # the closure's backward returned: the optimizer's own work goes on
        return result
    return backward


def _backward_in_step():
    """A backward inside an open optimizer_step (its closure's): may it record?"""
    return (state.tls.active == PHASE_OPTIMIZER and not state.off
            and state.get_worker_info() is None and step_gives_way(False))


def _ddp_backward(original, args, kwargs):
    """backward_pass with explicit times: when a watched DDP gradient was ready during it, it
    ends at the last one and comm_wait runs from there to the return (stallscope/_ddp.py)."""
    watch = state.ddp
    begin_ns = time.monotonic_ns()
    if not _record_at(("_begin_at", PHASE_BACKWARD, begin_ns)):
        return original(*args, **kwargs)
    state.tls.active = PHASE_BACKWARD
    token = state.gpu.begin(PHASE_BACKWARD) if state.gpu is not None else None
    returned = False
    try:
        result = original(*args, **kwargs)
        returned = True
        return result
    finally:
        state.tls.active = None
        if token is not None:
            state.gpu.end(token)
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
        if not state.process_info_sent:
            _send_process_info()
        for what, name, ts_ns in records:
            getattr(state.api, what)(name, ts_ns)
        return True
    except Exception as e:
        report_error(f"phase({records[0][1]!r}) at a given time", e)
        return False


def _watch_ddp(ddp):
    """Hooks a DDP model's gradients; on an error comm_wait is given up (one stderr line) and
    every other phase goes on."""
    try:
        state.undo.extend(state.ddp.watch(ddp))
    except Exception as e:
        state.ddp = None
        say(f"{PHASE_COMM_WAIT} not measured: {type(e).__name__}: {e}")


# ----------------------------------------------------------------------------------------------
# data_loading, checkpointing, host syncs
# ----------------------------------------------------------------------------------------------

def patch(owner, attr, make_wrapper):
    """Sets owner.attr to make_wrapper(original), marked, and notes how to undo it."""
    original = getattr(owner, attr)
    # Restore exactly: an inherited attribute is deleted again, not copied down.
    own = attr in getattr(owner, "__dict__", {})
    wrapper = make_wrapper(original)
    setattr(wrapper, MARK, True)
    setattr(owner, attr, wrapper)
    if own:
        state.undo.append(functools.partial(setattr, owner, attr, original))
    else:
        state.undo.append(functools.partial(delattr, owner, attr))


def wrap_phase(name):
    def make(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if quiet():
                return original(*args, **kwargs)
            return in_phase(name, original, *args, **kwargs)
        return wrapper
    return make


def may_count_sync():
    """Whether this thread may count a host sync now (_syncs.SyncCounter asks)."""
    return (not state.off and state.tls.active not in _NO_SYNC_COUNT_IN
            and state.get_worker_info() is None)


def sync_hit(kind):
    """Counts a host sync of `kind` whose wrapper (_syncs.counting/copying) the job called."""
    if state.off:
        return
    try:
        state.syncs.hit(kind, 2)
    except Exception as e:
        report_error("count()", e)


def wrap_loader_iter(original):
    @functools.wraps(original)
    def __iter__(self):
        if quiet():
            return original(self)
        # Creating the iterator starts the workers (each epoch unless persistent): data time.
        it = in_phase(PHASE_DATA, original, self)
        if not state.off:
            try:
                record = state.loaders.seen(self, it, state.torch.get_num_threads)
                if record is not None:
                    _call_api("info", *record)
            except Exception as e:
                report_error("DataLoader settings", e)
        return it
    return __iter__
