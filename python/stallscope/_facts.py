"""Facts stallscope.auto reports as info records: the process (info "torch"), each DataLoader
(info "dataloader", and "dataloader_workers" when its workers change) and the backend settings
at the first step (info "backends"). Read without changing anything; torch is passed in, never
imported here."""

import os
import weakref

from ._env import optional_int
from ._protocol import (INFO_DATALOADER, INFO_DATALOADER_WORKERS, KEY_BATCH_SIZE, KEY_CPU_AFFINITY,
                        KEY_CPU_COUNT, KEY_CUDA_INITIALIZED, KEY_CUDNN_BENCHMARK,
                        KEY_CUDNN_DETERMINISTIC, KEY_DATASET_LEN, KEY_DATASET_TYPE, KEY_DROP_LAST,
                        KEY_FLOAT32_MATMUL_PRECISION, KEY_INTEROP_THREADS, KEY_INTRA_OP_THREADS,
                        KEY_LOADER, KEY_LOCAL_RANK, KEY_MULTIPROCESSING_CONTEXT, KEY_NUM_WORKERS,
                        KEY_OMP_NUM_THREADS_ENV, KEY_PERSISTENT_WORKERS, KEY_PID, KEY_PIN_MEMORY,
                        KEY_PREFETCH_FACTOR, KEY_RANK, KEY_SAMPLER_TYPE, KEY_TIMEOUT_S,
                        KEY_TORCH_VERSION, KEY_WORKER_PIDS, KEY_WORLD_SIZE)


def process(torch):
    """The "torch" info: versions, threads, CPUs, and the rank in a distributed job."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        KEY_TORCH_VERSION: str(getattr(torch, "__version__", "")),
        KEY_INTRA_OP_THREADS: torch.get_num_threads(),
        KEY_INTEROP_THREADS: torch.get_num_interop_threads(),
        KEY_OMP_NUM_THREADS_ENV: os.environ.get("OMP_NUM_THREADS"),
        KEY_CPU_COUNT: os.cpu_count(),
        KEY_CPU_AFFINITY: affinity,
        KEY_RANK: optional_int("RANK"),
        KEY_LOCAL_RANK: optional_int("LOCAL_RANK"),
        KEY_WORLD_SIZE: optional_int("WORLD_SIZE"),
        KEY_PID: os.getpid(),
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
        KEY_CUDNN_BENCHMARK: flag("benchmark"),
        KEY_CUDNN_DETERMINISTIC: flag("deterministic"),
        KEY_FLOAT32_MATMUL_PRECISION: precision if isinstance(precision, str) else None,
        KEY_CUDA_INITIALIZED: bool(initialized),
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
        KEY_LOADER: serial,
        KEY_NUM_WORKERS: num_workers,
        KEY_BATCH_SIZE: getattr(loader, "batch_size", None),
        KEY_PIN_MEMORY: bool(getattr(loader, "pin_memory", False)),
        KEY_PERSISTENT_WORKERS: bool(getattr(loader, "persistent_workers", False)),
        # torch 1.13 stores 2 even without workers, where it means nothing.
        KEY_PREFETCH_FACTOR: (getattr(loader, "prefetch_factor", None) if num_workers > 0
                              else None),
        KEY_DROP_LAST: bool(getattr(loader, "drop_last", False)),
        KEY_DATASET_LEN: dataset_len,
        KEY_DATASET_TYPE: type(dataset).__name__,
        KEY_SAMPLER_TYPE: type(getattr(loader, "sampler", None)).__name__,
        KEY_MULTIPROCESSING_CONTEXT: start_method,
        KEY_TIMEOUT_S: getattr(loader, "timeout", 0),
        KEY_INTRA_OP_THREADS: intra_op_threads,
        KEY_WORKER_PIDS: pids,
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
                return INFO_DATALOADER_WORKERS, {KEY_LOADER: entry[0], KEY_WORKER_PIDS: pids}
            return None
        self._serial += 1
        self._loaders[loader] = [self._serial, pids]
        return INFO_DATALOADER, loader_settings(loader, self._serial, pids, intra_op_threads())


def default_start_method():
    """The start method workers get when the loader names none."""
    import multiprocessing
    # Neither call fixes the start method (plain get_start_method() would, and a later
    # set_start_method() in the job would then fail). The first of all methods is the
    # platform default (fork on Linux before Python 3.14).
    return (multiprocessing.get_start_method(allow_none=True)
            or multiprocessing.get_all_start_methods()[0])
