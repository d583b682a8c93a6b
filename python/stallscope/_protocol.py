# The names the Python side writes for the C++ side to read, declared once: the phases in the
# ring, the counters, the info records' kinds and keys (the ring's info records, the run's meta
# file), the python.jsonl notes, and the environment `stallscope run` / `passes` / `sweep` set
# for the job. Every other module of the package uses these constants, never the literals
# (python/tests/test_protocol.py checks that, and that the writers write exactly these keys).
#
# READ BY A C++ CONTRACT TEST with a regular expression, which holds these names equal to the
# C++ side's. Keep the format it parses:
#   - only module-level assignments, each starting at column 0 with an UPPER_CASE name;
#   - a value is a double-quoted string literal, NAME = "value";
#     or a tuple of them, NAME = ("a", "b"), which may span lines;
#     or a dict from a string literal to such a tuple, NAME = {"kind": ("a", "b"), ...};
#   - no expressions, no names on the right-hand side, no imports, no docstring, no escapes in
#     the strings; comments (`#`) anywhere, on their own lines or after a value.
# The tuples repeat the literals of the single constants on purpose (a regex cannot resolve
# names); test_protocol.py holds each tuple equal to its constants. Never rename a value:
# recordings and reports carry them.

# ------------------------------------------------------------------------------------------------
# Phases (the ring's phase names; src/base/vocabulary.h phase_name)
# ------------------------------------------------------------------------------------------------

PHASE_DATA = "data_loading"
PHASE_FORWARD = "forward_pass"
PHASE_EVAL_FORWARD = "eval_forward"
PHASE_BACKWARD = "backward_pass"
PHASE_COMM_WAIT = "comm_wait"
PHASE_OPTIMIZER = "optimizer_step"
PHASE_CHECKPOINT = "checkpointing"
# Every phase stallscope.auto records.
PHASES = ("data_loading", "forward_pass", "eval_forward", "backward_pass", "comm_wait",
          "optimizer_step", "checkpointing")
# The phases that get a GPU span (the ring's gpu span records; stallscope/_cuda.py).
GPU_TIMED_PHASES = ("forward_pass", "eval_forward", "backward_pass", "optimizer_step")

# ------------------------------------------------------------------------------------------------
# Counters (the ring's counter names)
# ------------------------------------------------------------------------------------------------

# Host syncs: PREFIX + kind (stallscope/_syncs.py). The first four kinds are Tensor methods'
# names, the next two torch.cuda functions' names.
HOST_SYNC_PREFIX = "host_sync."
SYNC_ITEM = "item"
SYNC_CPU = "cpu"
SYNC_TOLIST = "tolist"
SYNC_NUMPY = "numpy"
SYNC_SYNCHRONIZE = "synchronize"
SYNC_EMPTY_CACHE = "empty_cache"
SYNC_COPY_H2D = "copy_h2d"
SYNC_COPY_D2H = "copy_d2h"
HOST_SYNC_KINDS = ("item", "cpu", "tolist", "numpy", "synchronize", "empty_cache", "copy_h2d",
                   "copy_d2h")
# GPU spans still running at exit, and instances not timed (stallscope/_cuda.py).
COUNTER_GPU_UNRESOLVED = "gpu_timing.unresolved"
COUNTER_GPU_SKIPPED = "gpu_timing.skipped"
COUNTERS = ("gpu_timing.unresolved", "gpu_timing.skipped")

# ------------------------------------------------------------------------------------------------
# Info records: kinds
# ------------------------------------------------------------------------------------------------

INFO_TORCH = "torch"  # once per process, before its first record (_facts.process)
INFO_DATALOADER = "dataloader"  # once per DataLoader (_facts.loader_settings)
INFO_DATALOADER_WORKERS = "dataloader_workers"  # a DataLoader's worker processes changed
INFO_BACKENDS = "backends"  # at the first step boundary (_facts.backends)
INFO_CUDA_INIT = "cuda_init"  # CUDA's lazy initialisation (_life.py)
INFO_COMPILE = "compile"  # one torch.compile frame compilation (_life.py)
INFO_COMPILE_TOTALS = "compile_totals"  # at exit, when the process compiled anything
INFO_SYNC_SITE = "sync_site"  # a host-sync call site, the first time it is seen (_syncs.py)
INFO_SYNC_SITES = "sync_sites"  # at exit: each site's count
INFO_EXPERIMENT = "experiment"  # what the experiment controls did (_experiment.py)
INFO_KINDS = ("torch", "dataloader", "dataloader_workers", "backends", "cuda_init", "compile",
              "compile_totals", "sync_site", "sync_sites", "experiment")

# ------------------------------------------------------------------------------------------------
# Info records: keys (one constant per key; a key shared by kinds is declared once)
# ------------------------------------------------------------------------------------------------

# info "torch"
KEY_TORCH_VERSION = "torch_version"
KEY_INTRA_OP_THREADS = "intra_op_threads"  # also in "dataloader"
KEY_INTEROP_THREADS = "interop_threads"
KEY_OMP_NUM_THREADS_ENV = "omp_num_threads_env"
KEY_CPU_COUNT = "cpu_count"
KEY_CPU_AFFINITY = "cpu_affinity"
KEY_RANK = "rank"
KEY_LOCAL_RANK = "local_rank"
KEY_WORLD_SIZE = "world_size"
KEY_PID = "pid"  # also every python.jsonl note's
# info "dataloader" / "dataloader_workers" (DataLoader's argument names are STALLSCOPE_LOADER_SET's)
KEY_LOADER = "loader"
KEY_NUM_WORKERS = "num_workers"
KEY_BATCH_SIZE = "batch_size"
KEY_PIN_MEMORY = "pin_memory"
KEY_PERSISTENT_WORKERS = "persistent_workers"
KEY_PREFETCH_FACTOR = "prefetch_factor"
KEY_DROP_LAST = "drop_last"
KEY_DATASET_LEN = "dataset_len"
KEY_DATASET_TYPE = "dataset_type"
KEY_SAMPLER_TYPE = "sampler_type"
KEY_MULTIPROCESSING_CONTEXT = "multiprocessing_context"
KEY_TIMEOUT_S = "timeout_s"
KEY_WORKER_PIDS = "worker_pids"
# info "backends"
KEY_CUDNN_BENCHMARK = "cudnn_benchmark"
KEY_CUDNN_DETERMINISTIC = "cudnn_deterministic"
KEY_FLOAT32_MATMUL_PRECISION = "float32_matmul_precision"
KEY_CUDA_INITIALIZED = "cuda_initialized"
# info "cuda_init" / "compile" / "compile_totals"; times are time.monotonic_ns()
KEY_BEGIN_NS = "begin_ns"
KEY_END_NS = "end_ns"
KEY_FRAME = "frame"
KEY_TRIGGER = "trigger"
KEY_COUNT = "count"  # also a "sync_sites" entry's
KEY_TOTAL_NS = "total_ns"
# info "sync_site" / "sync_sites"
KEY_KIND = "kind"
KEY_FILE = "file"
KEY_LINE = "line"
KEY_FUNCTION = "function"
KEY_USER_FILE = "user_file"
KEY_USER_LINE = "user_line"
KEY_SITES = "sites"
# info "experiment": the keys of each control that is on (src/ parses exactly these names)
KEY_STOP_AFTER_STEPS = "stop_after_steps"
KEY_STEPS = "steps"
KEY_STOPPED = "stopped"
KEY_SYNTHETIC_BATCHES_CACHED = "synthetic_batches_cached"
KEY_SYNTHETIC_BATCHES_SERVED = "synthetic_batches_served"
KEY_SYNTHETIC_NOT_APPLIED = "synthetic_not_applied"
KEY_SAVES_SKIPPED = "saves_skipped"
KEY_EVAL_FORWARDS_CACHED = "eval_forwards_cached"
KEY_EVAL_FORWARDS_RUN = "eval_forwards_run"
KEY_SAVES_REDIRECTED = "saves_redirected"
KEY_SAVES_NOT_REDIRECTED = "saves_not_redirected"
KEY_LOADER_SET = "loader_set"
KEY_LOADER_SET_APPLIED = "loader_set_applied"
KEY_LOADER_SET_ERRORS = "loader_set_errors"

# Every key each kind may have, in the order written. Sometimes absent: "compile"'s trigger
# (where torch names none), "sync_site"'s user_file and user_line (a site in the job's own
# code), and each control's "experiment" keys while that control is off (EXPERIMENT_KEYS).
INFO_KEYS = {
    "torch": ("torch_version", "intra_op_threads", "interop_threads", "omp_num_threads_env",
              "cpu_count", "cpu_affinity", "rank", "local_rank", "world_size", "pid"),
    "dataloader": ("loader", "num_workers", "batch_size", "pin_memory", "persistent_workers",
                   "prefetch_factor", "drop_last", "dataset_len", "dataset_type", "sampler_type",
                   "multiprocessing_context", "timeout_s", "intra_op_threads", "worker_pids"),
    "dataloader_workers": ("loader", "worker_pids"),
    "backends": ("cudnn_benchmark", "cudnn_deterministic", "float32_matmul_precision",
                 "cuda_initialized"),
    "cuda_init": ("begin_ns", "end_ns"),
    "compile": ("begin_ns", "end_ns", "frame", "trigger"),
    "compile_totals": ("count", "total_ns"),
    "sync_site": ("kind", "file", "line", "function", "user_file", "user_line"),
    "sync_sites": ("sites",),
    "experiment": ("stop_after_steps", "steps", "stopped", "synthetic_batches_cached",
                   "synthetic_batches_served", "synthetic_not_applied", "saves_skipped",
                   "eval_forwards_cached", "eval_forwards_run", "saves_redirected",
                   "saves_not_redirected", "loader_set", "loader_set_applied",
                   "loader_set_errors"),
}
# Keys that are not always there (see above).
INFO_OPTIONAL_KEYS = {
    "compile": ("trigger",),
    "sync_site": ("user_file", "user_line"),
}
# The keys of each object in "sync_sites"' list "sites".
SYNC_SITES_ENTRY_KEYS = ("kind", "file", "line", "count")
# The keys "experiment"'s object "loader_set" may have: the DataLoader arguments the
# STALLSCOPE_LOADER_SET control replaces.
LOADER_SET_KEYS = ("num_workers", "batch_size", "prefetch_factor", "pin_memory",
                   "persistent_workers")
# "experiment"'s keys by the control (environment variable) that writes them, in INFO_KEYS order.
EXPERIMENT_KEYS = {
    "STALLSCOPE_STOP_AFTER_STEPS": ("stop_after_steps", "steps", "stopped"),
    "STALLSCOPE_SYNTHETIC_DATA": ("synthetic_batches_cached", "synthetic_batches_served",
                                  "synthetic_not_applied"),
    "STALLSCOPE_SIDE_WORK_OFF": ("saves_skipped", "eval_forwards_cached", "eval_forwards_run"),
    "STALLSCOPE_SCRATCH_DIR": ("saves_redirected", "saves_not_redirected"),
    "STALLSCOPE_LOADER_SET": ("loader_set", "loader_set_applied", "loader_set_errors"),
}

# ------------------------------------------------------------------------------------------------
# python.jsonl: one note per line (stallscope/_notes.py note(); src/rundir/python_notes.h)
# ------------------------------------------------------------------------------------------------

NOTES_FILE = "python.jsonl"
NOTE_START = "start"  # an interpreter under `stallscope run` (stallscope/_startup.py)
NOTE_HOOKS = "hooks"  # auto.install(): how each phase is measured, or why not
NOTE_EVENTS = ("start", "hooks")
# Every note's first keys.
KEY_TS_NS = "ts_ns"
KEY_EVENT = "event"
NOTE_ENVELOPE_KEYS = ("ts_ns", "pid", "event")
# "start": the interpreter, the recorder, and whether the hooks watch for torch.
KEY_PPID = "ppid"
KEY_PYTHON = "python"
KEY_IMPLEMENTATION = "implementation"
KEY_EXECUTABLE = "executable"
KEY_PREFIX = "prefix"
KEY_VENV = "venv"
KEY_ARGV = "argv"
KEY_FLAGS = "flags"
KEY_IGNORE_ENVIRONMENT = "ignore_environment"
KEY_ISOLATED = "isolated"
KEY_NO_SITE = "no_site"
KEY_SHIM = "shim"
KEY_BACKEND = "backend"
KEY_BACKEND_ERROR = "backend_error"
KEY_RECORDING = "recording"
KEY_AUTO = "auto"
# "hooks"
KEY_TORCH = "torch"
KEY_MECHANISMS = "mechanisms"
KEY_ERROR = "error"
# The keys after the envelope, in the order written. "start" has backend, backend_error and
# recording only where the package is the real one (a stand-in package has no recorder status).
NOTE_KEYS = {
    "start": ("ppid", "python", "implementation", "executable", "prefix", "venv", "argv",
              "flags", "shim", "backend", "backend_error", "recording", "auto"),
    "hooks": ("torch", "mechanisms", "error"),
}
# The keys of "start"'s object "flags" (sys.flags).
START_FLAGS_KEYS = ("ignore_environment", "isolated", "no_site")
# "start"'s backend: the recorder in use (null: none loaded, or not recording).
BACKEND_CORE = "core"
BACKEND_NATIVE = "native"
BACKENDS = ("core", "native")
# "hooks"' mechanisms: {what: how}. The keys are the phases auto installs (eval_forward comes with
# forward_pass), then the host-sync counters and the GPU spans, in this order.
MECHANISM_HOST_SYNCS = "host_syncs"
MECHANISM_GPU_TIME = "gpu_time"
MECHANISM_KEYS = ("forward_pass", "optimizer_step", "backward_pass", "data_loading",
                  "checkpointing", "host_syncs", "gpu_time", "comm_wait")
# The values: how it is measured, or NOT_MEASURED + why.
MECH_GLOBAL = "global hook"
MECH_PATCH = "patch"
MECH_CUDA_EVENTS = "cuda events"
NOT_MEASURED = "not measured: "
MECHANISMS = ("global hook", "patch", "cuda events")

# ------------------------------------------------------------------------------------------------
# The environment the binary sets for the job (src/cli/run_cmd.cc, src/experiment/passes.cc,
# sweep.cc), and the package's own switches. Flags are read by stallscope/_env.py.
# ------------------------------------------------------------------------------------------------

ENV_RUN_DIR = "STALLSCOPE_RUN_DIR"  # the run directory: recording on
ENV_AUTO = "STALLSCOPE_AUTO"  # flag, default on: the PyTorch hooks (off: --no-auto)
ENV_STOP_AFTER_STEPS = "STALLSCOPE_STOP_AFTER_STEPS"  # experiment controls (_experiment.py)
ENV_SYNTHETIC_DATA = "STALLSCOPE_SYNTHETIC_DATA"
ENV_SIDE_WORK_OFF = "STALLSCOPE_SIDE_WORK_OFF"  # flag, default off
ENV_SCRATCH_DIR = "STALLSCOPE_SCRATCH_DIR"
ENV_LOADER_SET = "STALLSCOPE_LOADER_SET"
ENV_PROFILE = "STALLSCOPE_PROFILE"  # flag, default off: standalone profiling
ENV_PROFILE_EVERY = "STALLSCOPE_PROFILE_EVERY"  # int >= 1, default 100
ENV_GPU_TIME = "STALLSCOPE_GPU_TIME"  # flag, default on: GPU spans
ENV_BACKEND = "STALLSCOPE_BACKEND"  # auto | core | native
ENV_REC_LIB = "STALLSCOPE_REC_LIB"  # path of libstallscope_rec.so
ENV_FLAGS = ("STALLSCOPE_AUTO", "STALLSCOPE_SIDE_WORK_OFF", "STALLSCOPE_PROFILE",
             "STALLSCOPE_GPU_TIME")
EXPERIMENT_ENV = ("STALLSCOPE_STOP_AFTER_STEPS", "STALLSCOPE_SYNTHETIC_DATA",
                  "STALLSCOPE_SIDE_WORK_OFF", "STALLSCOPE_SCRATCH_DIR", "STALLSCOPE_LOADER_SET")
