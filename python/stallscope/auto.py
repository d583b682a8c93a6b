"""Zero-code-change PyTorch hooks: a training job gets phases without editing its code.

`python/sitecustomize.py` calls install() right after the job imports torch (only under
`stallscope run`, and not with --no-auto / STALLSCOPE_AUTO=0). What gets recorded:

  DataLoader.__iter__ and iterator __next__  -> phase "data_loading"   (+ info "dataloader" once
                                                per loader, "dataloader_workers" when PIDs change)
  outermost nn.Module.__call__, grad enabled  -> phase "forward_pass"
  outermost nn.Module.__call__, no grad       -> phase "eval_forward"   (sampling / validation)
  Tensor.backward, torch.autograd.backward    -> phase "backward_pass"
  Optimizer.step (every subclass)             -> phase "optimizer_step", then a step boundary
                                                unless the job marks steps itself
  torch.save                                  -> phase "checkpointing"
  Tensor.item / .cpu / .tolist / .numpy       -> counter "host_sync.<method>"
  first recorded event of the process         -> info "torch" (version, threads, rank, ...)

Contract: the job behaves exactly as without the hooks. Every original is called with the same
arguments, its result or exception is passed through unchanged (StopIteration included), no
object is replaced by a proxy, and torch is never imported by this module. An error inside a hook
is reported once on stderr with a `[stallscope]` prefix and turns all hooks into pass-throughs.

Auto phases never nest: while one is open on a thread, hooks on that thread pass through (a
Module called by a transform inside data_loading, or by activation checkpointing inside
backward_pass, is not a forward_pass). Nothing is recorded inside DataLoader worker processes.
Host syncs are counted outside phases and inside forward/backward, not inside data_loading,
optimizer_step or checkpointing (torch's own bookkeeping there is not the loop's doing).
"""

import functools
import os
import sys
import threading
import weakref

PHASE_DATA = "data_loading"
PHASE_FORWARD = "forward_pass"
PHASE_EVAL_FORWARD = "eval_forward"
PHASE_BACKWARD = "backward_pass"
PHASE_OPTIMIZER = "optimizer_step"
PHASE_CHECKPOINT = "checkpointing"
HOST_SYNC_METHODS = ("item", "cpu", "tolist", "numpy")
HOST_SYNC_PREFIX = "host_sync."

# Phases whose host syncs are torch's or the data pipeline's, not the training loop's: Adam in
# torch 1.13 calls .item() on a CPU step tensor per parameter; transforms call .numpy().
_NO_SYNC_COUNT_IN = (PHASE_DATA, PHASE_OPTIMIZER, PHASE_CHECKPOINT)

_MARK = "_stallscope_auto"  # attribute set on every wrapper we install


class _ThreadState(threading.local):
    active = None  # name of the auto phase open on this thread, or None


_tls = _ThreadState()
_lock = threading.Lock()
_api = None  # the stallscope API module (or a fake in tests) while installed
_api_step = None  # the API's own step(), called for automatic boundaries
_off = True  # True: every hook passes straight through
_error_reported = False
_patches = []  # (owner, attribute, original) in install order, for uninstall()
_user_marks_steps = False
_primary_optimizer = None  # weakref to the optimizer whose step() ends a step
_process_info_sent = False
_loaders = None  # WeakKeyDictionary: DataLoader -> [serial, worker pids]
_loader_serial = 0  # serials of reported loaders, 1-based, never reused
_get_worker_info = None
_is_compiling = None
_torch = None
_fork_handler_registered = False


def installed():
    """True while the hooks are installed and active."""
    return not _off


def report_error(where, exc):
    """Turns the hooks off and says so once on stderr. Never raises."""
    global _off, _error_reported
    _off = True
    if _error_reported:
        return
    _error_reported = True
    try:
        sys.stderr.write(
            f"[stallscope] auto-instrumentation turned off after an error in {where}: "
            f"{type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
    except Exception:
        pass


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
        return cm
    except Exception as e:
        report_error(f"phase({name!r})", e)
        return None


def _exit(cm, name, exc_info):
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
    return _off or _tls.active is not None or _get_worker_info() is not None


def _call_api(what, *args):
    try:
        if not _process_info_sent:
            _send_process_info()
        getattr(_api, what)(*args)
    except Exception as e:
        report_error(f"{what}()", e)


def _env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _send_process_info():
    """One info("torch") per process, sent lazily so that a process that records nothing (a
    forkserver, a worker) stays silent and the thread count is the one the job set."""
    global _process_info_sent
    _process_info_sent = True
    t = _torch
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    _api.info("torch", {
        "torch_version": str(getattr(t, "__version__", "")),
        "intra_op_threads": t.get_num_threads(),
        "interop_threads": t.get_num_interop_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "rank": _env_int("RANK"),
        "local_rank": _env_int("LOCAL_RANK"),
        "world_size": _env_int("WORLD_SIZE"),
        "pid": os.getpid(),
    })


# ----------------------------------------------------------------------------------------------
# Hooks
# ----------------------------------------------------------------------------------------------

def _patch(owner, attr, make_wrapper):
    original = getattr(owner, attr)
    wrapper = make_wrapper(original)
    setattr(wrapper, _MARK, True)
    setattr(owner, attr, wrapper)
    _patches.append((owner, attr, original))


def _wrap_module_call(original):
    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        # torch.compile traces through here; is_compiling() is a constant to dynamo, so the
        # traced path never touches thread-locals (no graph break).
        if _is_compiling is not None and _is_compiling():
            return original(self, *args, **kwargs)
        # Inlined _quiet(), nested calls first: this runs for every submodule of every model.
        if _tls.active is not None or _off or _get_worker_info() is not None:
            return original(self, *args, **kwargs)
        name = PHASE_FORWARD if _torch.is_grad_enabled() else PHASE_EVAL_FORWARD
        return _in_phase(name, original, self, *args, **kwargs)
    return __call__


def _wrap_phase(name):
    def make(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if _quiet():
                return original(*args, **kwargs)
            return _in_phase(name, original, *args, **kwargs)
        return wrapper
    return make


def _wrap_host_sync(method):
    counter = HOST_SYNC_PREFIX + method

    def make(original):
        @functools.wraps(original)
        def wrapper(self, *args, **kwargs):
            if (not _off and _tls.active not in _NO_SYNC_COUNT_IN
                    and _get_worker_info() is None):
                try:
                    _api.count(counter, 1)
                except Exception as e:
                    report_error("count()", e)
            return original(self, *args, **kwargs)
        return wrapper
    return make


def _wrap_loader_iter(original):
    @functools.wraps(original)
    def __iter__(self):
        if _quiet():
            return original(self)
        # Creating the iterator starts the workers (each epoch unless persistent): data time.
        it = _in_phase(PHASE_DATA, original, self)
        if not _off:
            try:
                _report_loader(self, it)
            except Exception as e:
                report_error("DataLoader settings", e)
        return it
    return __iter__


def _worker_pids(it):
    return [int(w.pid) for w in getattr(it, "_workers", None) or () if w.pid is not None]


def _report_loader(loader, it):
    pids = _worker_pids(it)
    entry = _loaders.get(loader)
    if entry is not None:
        if pids and pids != entry[1]:  # non-persistent workers: new processes every epoch
            entry[1] = pids
            _call_api("info", "dataloader_workers", {"loader": entry[0], "worker_pids": pids})
        return
    global _loader_serial
    _loader_serial += 1
    serial = _loader_serial
    _loaders[loader] = [serial, pids]
    dataset = getattr(loader, "dataset", None)
    try:
        dataset_len = len(dataset)
    except Exception:  # an IterableDataset without __len__
        dataset_len = None
    num_workers = getattr(loader, "num_workers", 0)
    ctx = getattr(loader, "multiprocessing_context", None)
    start_method = None
    if num_workers > 0:
        start_method = ctx.get_start_method() if ctx is not None else _default_start_method()
    _call_api("info", "dataloader", {
        "loader": serial,
        "num_workers": num_workers,
        "batch_size": getattr(loader, "batch_size", None),
        "pin_memory": bool(getattr(loader, "pin_memory", False)),
        "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
        # torch 1.13 stores 2 even without workers, where it means nothing.
        "prefetch_factor": getattr(loader, "prefetch_factor", None) if num_workers > 0 else None,
        "drop_last": bool(getattr(loader, "drop_last", False)),
        "dataset_len": dataset_len,
        "dataset_type": type(dataset).__name__,
        "sampler_type": type(getattr(loader, "sampler", None)).__name__,
        "multiprocessing_context": start_method,
        "timeout_s": getattr(loader, "timeout", 0),
        "intra_op_threads": _torch.get_num_threads(),
        "worker_pids": pids,
    })


def _default_start_method():
    import multiprocessing
    # Neither call fixes the start method (plain get_start_method() would, and a later
    # set_start_method() in the job would then fail). The first of all methods is the
    # platform default (fork on Linux before Python 3.14).
    return (multiprocessing.get_start_method(allow_none=True)
            or multiprocessing.get_all_start_methods()[0])


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
        if getattr(cls.step, _MARK, False):
            return
        had_own = "step" in cls.__dict__
        _patch(cls, "step", _wrap_optimizer_step)
        if not had_own:  # uninstall must delete, not copy the inherited function down
            _patches[-1] = (cls, "step", None)


def _wrap_optimizer_step(original):
    @functools.wraps(original)
    def step(self, *args, **kwargs):
        if _quiet():
            return original(self, *args, **kwargs)
        result = _in_phase(PHASE_OPTIMIZER, original, self, *args, **kwargs)
        if not _off and not _user_marks_steps and _is_primary(self):
            try:
                _api_step()
            except Exception as e:
                report_error("step()", e)
        return result
    return step


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
    _patches.append((api, "step", original))


def _raw_step(api):
    step = api.step
    return getattr(step, "__wrapped_stallscope__", step)


# ----------------------------------------------------------------------------------------------
# Install / uninstall
# ----------------------------------------------------------------------------------------------

def install(api=None):
    """Patches the already-imported torch. `api` defaults to the stallscope package; tests pass
    a fake with phase/step/count/info/enabled. Returns True when the hooks are active.
    Idempotent. Never raises: a failure is reported once and leaves torch as it was."""
    global _api, _api_step, _off, _loaders, _get_worker_info, _is_compiling, _torch
    global _user_marks_steps, _primary_optimizer, _process_info_sent
    if _patches and not _off:
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
        _api, _torch = api, torch
        _user_marks_steps, _primary_optimizer, _process_info_sent = False, None, False
        _loaders = weakref.WeakKeyDictionary()
        _get_worker_info = torch.utils.data.get_worker_info
        # torch >= 2.3: torch.compiler.is_compiling; 2.0-2.2: torch._utils.is_compiling; 1.x: none.
        _is_compiling = (getattr(getattr(torch, "compiler", None), "is_compiling", None)
                         or getattr(getattr(torch, "_utils", None), "is_compiling", None))
        track_user_steps(api)
        _api_step = _raw_step(api)
        _install_torch_patches(torch)
        _register_fork_handler()
        _off = False
        return True
    except Exception as e:
        try:
            uninstall()
        except Exception:
            pass
        report_error("install", e)
        return False


def _after_fork_in_child():
    # A forked child is a new process: it owes its own info("torch"). (A DataLoader worker
    # forked inside data_loading inherits that thread state and stays quiet.)
    global _process_info_sent
    _process_info_sent = False


def _register_fork_handler():
    global _fork_handler_registered
    if not _fork_handler_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_handler_registered = True


def _install_torch_patches(torch):
    from torch.utils.data import dataloader as dl

    _patch(torch.nn.Module, "__call__", _wrap_module_call)
    _patch(dl.DataLoader, "__iter__", _wrap_loader_iter)
    # __next__ lives on the base iterator class in 1.13 and 2.x; subclasses implement _next_data.
    _patch(dl._BaseDataLoaderIter, "__next__", _wrap_phase(PHASE_DATA))
    _patch(torch.Tensor, "backward", _wrap_phase(PHASE_BACKWARD))
    _patch(torch.autograd, "backward", _wrap_phase(PHASE_BACKWARD))
    _patch(torch.optim.Optimizer, "__init__", _wrap_optimizer_init)
    save = torch.save
    _patch(torch, "save", _wrap_phase(PHASE_CHECKPOINT))
    if getattr(torch.serialization, "save", None) is save:
        _patch(torch.serialization, "save", lambda _original: torch.save)
    for method in HOST_SYNC_METHODS:
        _patch(torch.Tensor, method, _wrap_host_sync(method))


def uninstall():
    """Restores every patched attribute (for tests; a job never needs it)."""
    global _off, _api, _api_step
    _off = True
    while _patches:
        owner, attr, original = _patches.pop()
        if original is None:
            try:
                delattr(owner, attr)
            except AttributeError:
                pass
        else:
            setattr(owner, attr, original)
    _api = None
    _api_step = None
