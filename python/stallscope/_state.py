"""What stallscope.auto's hooks know, in one object: the API they record into, this torch's
probes, the on/off switch, what install() must undo, and each thread's open auto phase.

There is one State per process (stallscope/_hooks.py holds it: torch calls the hooks with no
context to pass). install() resets it in place rather than replacing it, so a wrapper handed out
by an earlier install (the job's `from stallscope import step`) still sets the flags of the one
the hooks read. torch is passed in, never imported here.
"""

import threading

from . import _facts


class ThreadState(threading.local):
    """The auto phase open on one thread. Auto phases never nest (stallscope/auto.py)."""

    active = None  # name of the auto phase open on this thread, or None
    # A phase opened by a global pre hook is closed by a later post hook call, so it keeps:
    cm = None  # its context manager
    owner = None  # the module / optimizer whose pre hook opened it
    depth = 0  # open calls of `owner` (a module re-entered, a step inside a step)
    frame = None  # the frame that called the pre hook; off the stack = the call is over
    gpu = None  # the open phase's GpuTimer token
    # optimizer_step closed for the forward/backward of its closure (_hooks.step_gives_way):
    # [owner, depth, frame] of the step, re-opened when the closure's backward returns.
    suspended = None


class State:
    """The hooks' state. Plain attributes (no __slots__): the hooks read some of them while
    torch.compile traces (is_compiling), and an object's own attributes are what dynamo reads
    best."""

    def __init__(self):
        self.tls = ThreadState()
        self.api = None  # the stallscope API module (or a fake in tests) while installed
        self.api_step = None  # the API's own step(), called for automatic boundaries
        self.off = True  # True: every hook passes straight through
        self.error_reported = False  # report_error() has said its line (once per process)
        self.undo = []  # callables that undo what install() did (patches, hook handles), in order
        self.user_marks_steps = False  # the job called stallscope.step() itself
        self.primary_optimizer = None  # weakref to the optimizer whose step() ends a step
        self.process_info_sent = False  # info("torch") written by this process
        self.loaders = _facts.LoaderReporter()  # the DataLoaders reported in this process
        self.get_worker_info = None  # torch.utils.data.get_worker_info
        self.is_compiling = None  # torch's is_compiling(), None on torch 1.x
        self.torch = None
        self.ddp = None  # _ddp.GradientWatch while comm_wait is measured, else None
        self.gpu = None  # _cuda.GpuTimer while GPU times are measured, else None
        self.syncs = None  # _syncs.SyncCounter while host syncs are counted, else None
        self.mechanisms = {}  # phase -> how it is measured, as noted by the last install()
        self.experiment = None  # _experiment.Experiment when a STALLSCOPE_* control is set
        self.life = None  # _life.Life (cuda_init, compile, backends records) while installed
        # Per process, never reset: os.register_at_fork and atexit have no unregister.
        self.fork_handler_registered = False
        self.exit_handler_registered = False

    def reset(self, api, torch):
        """At install(): a fresh start on `api` and `torch`. Phases left open by an earlier
        install are forgotten on all threads."""
        self.api, self.torch = api, torch
        self.tls = ThreadState()
        self.user_marks_steps, self.primary_optimizer, self.process_info_sent = False, None, False
        self.loaders.forget()
        self.experiment = None
        self.get_worker_info = torch.utils.data.get_worker_info
        # torch >= 2.3: torch.compiler.is_compiling; 2.0-2.2: torch._utils.is_compiling; 1.x: none.
        self.is_compiling = (getattr(getattr(torch, "compiler", None), "is_compiling", None)
                             or getattr(getattr(torch, "_utils", None), "is_compiling", None))
