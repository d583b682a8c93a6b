"""GPU-side phase times from CUDA events, for stallscope.auto. Never blocks the job.

On CUDA, forward_pass and backward_pass return once their kernels are queued: their host time
is launch time, and the GPU's work shows up as host time in whatever synchronizes next (an
.item(), a blocking copy, the next optimizer step). So at the begin and end of each compute
phase (TIMED_PHASES) GpuTimer records a CUDA event on the current stream, and later, at a step
boundary, asks each pending pair whether its end has completed (Event.query(): no wait). A
completed pair's elapsed time is written as a gpu span record (src/phase/README.md, kind 6)
stamped with the instance's host begin. The job is never synchronized: a pair still running at
the next poll waits for the one after, and pairs still running at exit are counted
(gpu_timing.unresolved), not waited for.

What a span measures: stream time from the begin event to the end event, i.e. the GPU's work
for the phase plus any gap in which the stream waited for the host inside it. With DDP, the
backward span includes the all-reduce the current stream waits for at its end.

Only once the job itself has initialised CUDA (torch.cuda.is_initialized(), probed every
PROBE_EVERY boundaries until true): a CPU job, or a job before its DataLoader forks its
workers, never gets a CUDA context from stallscope. Events are pooled and reused. An error turns
GPU timing off (one `[stallscope]` line); the host-side phases go on.
"""

import collections
import os
import time

from . import _env, _notes
from ._protocol import (COUNTER_GPU_SKIPPED, COUNTER_GPU_UNRESOLVED, ENV_GPU_TIME,
                        GPU_TIMED_PHASES)

TIMED_PHASES = frozenset(GPU_TIMED_PHASES)
MAX_PENDING = 512  # pairs awaiting their GPU: beyond, new instances are not timed (counted)
POLL_AT = 64  # pending pairs that trigger a poll at a phase end (jobs with no optimizer step)
PROBE_EVERY = 64  # boundaries between is_initialized() probes while CUDA is not in use yet

UNRESOLVED = COUNTER_GPU_UNRESOLVED  # counters, in the run report's counters
SKIPPED = COUNTER_GPU_SKIPPED


def why_not(torch, api):
    """Why GPU times cannot be measured with this torch and API, or None when they can."""
    cuda = getattr(torch, "cuda", None)
    if not _env.flag(ENV_GPU_TIME, True, say=_notes.say_once):
        return f"{ENV_GPU_TIME}={os.environ[ENV_GPU_TIME].strip()}"
    if getattr(getattr(torch, "version", None), "cuda", None) is None:
        return "this torch is built without CUDA"
    if not (hasattr(cuda, "Event") and callable(getattr(cuda, "is_initialized", None))):
        return "this torch has no torch.cuda events"
    if not callable(getattr(api, "_gpu_span", None)):
        return "this stallscope API has no _gpu_span"
    return None


class GpuTimer:
    """Begin/end CUDA events per phase instance, resolved without blocking.

    `cuda` is torch.cuda (or a fake with is_initialized() and Event(enable_timing=True) whose
    objects have record(), query(), elapsed_time(other) in ms). `span(name, begin_ns, gpu_ns)`
    records a resolved span, `count(name, n)` a counter, `say(text)` one stderr line. Called
    from the job's threads under the GIL; a token belongs to the thread that began it."""

    def __init__(self, cuda, span, count, say):
        self._cuda = cuda
        self._span = span
        self._count = count
        self._say = say
        self._pool = []  # recorded-and-resolved events, reused
        self._pending = collections.deque()  # (name, begin_ns, start event, end event)
        self._probe = 0  # boundaries until the next is_initialized() probe
        self.active = False  # CUDA in use by this process: events are recorded
        self.off = False  # after an error, for good
        self.resolved = 0
        self.skipped = 0

    def begin(self, name):
        """At the begin of an instance of `name`: a token for end(), or None (not timed)."""
        if not self.active:
            if self.off or not self._probe_now():
                return None
        if len(self._pending) >= MAX_PENDING:
            self.skipped += 1
            return None
        try:
            return (name, time.monotonic_ns(), self._recorded())
        except Exception as e:
            self._fail("record", e)
            return None

    def end(self, token):
        """At the end of the instance `token` (from begin) belongs to."""
        if token is None or self.off:
            return
        try:
            self._pending.append((token[0], token[1], token[2], self._recorded()))
        except Exception as e:
            self._fail("record", e)
            return
        if len(self._pending) >= POLL_AT:
            self.poll()

    def poll(self):
        """Writes the spans whose end event has completed, oldest first; stops at the first
        still running (stream order). Never waits."""
        if self.off:
            return
        if not self.active:
            self._probe_now()
            return
        pending = self._pending
        try:
            while pending:
                name, begin_ns, start, end = pending[0]
                if not end.query():
                    break
                pending.popleft()
                gpu_ns = int(start.elapsed_time(end) * 1e6)
                self._pool.append(start)
                self._pool.append(end)
                self._span(name, begin_ns, gpu_ns)
                self.resolved += 1
        except Exception as e:
            self._fail("resolve", e)

    def finish(self):
        """At exit: resolves what has completed, counts the rest and the skipped."""
        self.poll()
        unresolved = len(self._pending)
        self._pending.clear()
        try:
            if unresolved:
                self._count(UNRESOLVED, unresolved)
            if self.skipped:
                self._count(SKIPPED, self.skipped)
                self.skipped = 0
        except Exception:
            pass

    def after_fork_in_child(self):
        """A forked child cannot use its parent's CUDA context: forget everything."""
        self._pool = []
        self._pending = collections.deque()
        self.active = False
        self._probe = 0

    def _probe_now(self):
        self._probe -= 1
        if self._probe > 0:
            return False
        self._probe = PROBE_EVERY
        try:
            self.active = bool(self._cuda.is_initialized())
        except Exception as e:
            self._fail("torch.cuda.is_initialized()", e)
        return self.active

    def _recorded(self):
        """An event recorded on the current stream now. A pooled event recorded before on
        another device cannot be recorded here: it is dropped for a new one."""
        if self._pool:
            event = self._pool.pop()
            try:
                event.record()
                return event
            except Exception:
                pass
        event = self._cuda.Event(enable_timing=True)
        event.record()
        return event

    def _fail(self, where, exc):
        self.off = True
        self.active = False
        self._pending.clear()
        self._pool = []
        self._say(f"GPU phase times turned off after an error in {where}: "
                  f"{type(exc).__name__}: {exc}")
