"""Facts stallscope.auto reports as info records: the process (info "torch"), each DataLoader
(info "dataloader", and "dataloader_workers" when its workers change) and the backend settings
at the first step (info "backends"). Read without changing anything; torch is passed in, never
imported here."""

import os
import weakref


def _env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def process(torch):
    """The "torch" info: versions, threads, CPUs, and the rank in a distributed job."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "torch_version": str(getattr(torch, "__version__", "")),
        "intra_op_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "rank": _env_int("RANK"),
        "local_rank": _env_int("LOCAL_RANK"),
        "world_size": _env_int("WORLD_SIZE"),
        "pid": os.getpid(),
    }


def _read(getter):
    try:
        return getter()
    except Exception:
        return None


def backends(torch):
    """The "backends" info: settings that make the first steps slow (cudnn.benchmark autotunes
    each new shape) or change the kernels, and whether this process has initialised CUDA. Plain
    reads: nothing is initialised by them. A setting this torch lacks is None."""
    cudnn = getattr(getattr(torch, "backends", None), "cudnn", None)

    def flag(name):
        value = _read(lambda: getattr(cudnn, name))
        return value if isinstance(value, bool) else None

    precision = _read(lambda: torch.get_float32_matmul_precision())
    initialized = _read(lambda: torch.cuda.is_initialized())
    return {
        "cudnn_benchmark": flag("benchmark"),
        "cudnn_deterministic": flag("deterministic"),
        "float32_matmul_precision": precision if isinstance(precision, str) else None,
        "cuda_initialized": bool(initialized),
    }


def worker_pids(it):
    """PIDs of the iterator's worker processes ([] without workers)."""
    return [int(w.pid) for w in getattr(it, "_workers", None) or () if w.pid is not None]


def loader_settings(loader, serial, pids, intra_op_threads):
    """The "dataloader" info of `loader`, the `serial`-th reported in this process."""
    dataset = getattr(loader, "dataset", None)
    try:
        dataset_len = len(dataset)
    except Exception:  # an IterableDataset without __len__
        dataset_len = None
    num_workers = getattr(loader, "num_workers", 0)
    ctx = getattr(loader, "multiprocessing_context", None)
    start_method = None
    if num_workers > 0:
        start_method = ctx.get_start_method() if ctx is not None else default_start_method()
    return {
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
        "intra_op_threads": intra_op_threads,
        "worker_pids": pids,
    }


class LoaderReporter:
    """Which DataLoaders were reported, so each gets one "dataloader" info, and another
    "dataloader_workers" when its worker processes changed (non-persistent workers: new
    processes every epoch). Loaders are held weakly; serials are 1-based and never reused in
    the process, not even after forget()."""

    def __init__(self):
        self._loaders = weakref.WeakKeyDictionary()  # loader -> [serial, worker pids]
        self._serial = 0

    def forget(self):
        """Forgets the loaders seen (a new install); serials go on."""
        self._loaders = weakref.WeakKeyDictionary()

    def seen(self, loader, it, intra_op_threads):
        """At `loader`.__iter__, which returned `it`: the info to record as (kind, data), or
        None. `intra_op_threads()` is called only for a loader seen the first time."""
        pids = worker_pids(it)
        entry = self._loaders.get(loader)
        if entry is not None:
            if pids and pids != entry[1]:
                entry[1] = pids
                return "dataloader_workers", {"loader": entry[0], "worker_pids": pids}
            return None
        self._serial += 1
        self._loaders[loader] = [self._serial, pids]
        return "dataloader", loader_settings(loader, self._serial, pids, intra_op_threads())


def default_start_method():
    """The start method workers get when the loader names none."""
    import multiprocessing
    # Neither call fixes the start method (plain get_start_method() would, and a later
    # set_start_method() in the job would then fail). The first of all methods is the
    # platform default (fork on Linux before Python 3.14).
    return (multiprocessing.get_start_method(allow_none=True)
            or multiprocessing.get_all_start_methods()[0])
