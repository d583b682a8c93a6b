"""STALLSCOPE_PROFILE=1: periodic per-phase summaries on stderr, like a trainer's profiler.

Reads the process's own ring through the backend's ``Profiler`` (a second reader: the monitor's cursor
is unaffected), so the numbers are the ones ``stallscope run`` would see. One line per window:

    [stallscope] steps 101-200 (12.3 s, 8.13 steps/s): data_loading 41.2% (n=100, mean 50.7 ms) | ...

share = time inside the phase / wall time of the window (nested phases overlap, so shares can
sum past 100%); n = phases that ended in the window; counters are totals.
"""

import atexit
import os
import shutil
import sys
import time


def format_ns(ns):
    """A duration for people: 850 ns, 12.3 us, 4.56 ms, 1.23 s."""
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.3g} us"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.3g} ms"
    return f"{ns / 1e9:.3g} s"


def format_summary(first_step, last_step, wall_ns, phases, counters, unmatched=0, lost=0):
    """One summary line. phases/counters: (name, count, total_ns, max_ns), largest first."""
    wall_ns = max(wall_ns, 1)
    steps = last_step - first_step + 1
    if steps > 0:
        head = (
            f"[stallscope] steps {first_step}-{last_step} "
            f"({format_ns(wall_ns)}, {steps / (wall_ns / 1e9):.3g} steps/s)"
        )
    else:
        head = f"[stallscope] no steps ({format_ns(wall_ns)})"
    parts = [
        f"{name or '?'} {100.0 * total_ns / wall_ns:.1f}% (n={count}, mean {format_ns(total_ns / count)})"
        for name, count, total_ns, _max_ns in phases
    ]
    parts += [f"{name or '?'} {total}" for name, _count, total, _max in counters]
    if lost:
        parts.append(f"lost {lost} records")
    if unmatched:
        parts.append(f"{unmatched} unmatched begin/end")
    return head + ": " + (" | ".join(parts) if parts else "no phases")


class Session:
    """Prints a summary every ``every`` steps, and one for the rest at exit."""

    def __init__(self, profiler, every=100, temp_dir=None, stream=None):
        self._profiler = profiler
        self._every = max(1, int(every))
        self._stream = stream
        self._temp_dir = temp_dir
        self._pid = os.getpid()
        self._lost_reported = 0
        self._start_window(0)
        atexit.register(self._at_exit)

    def _start_window(self, last_step):
        self._first_step = last_step + 1
        self._last_step = last_step
        self._window_start_ns = time.monotonic_ns()

    def on_step(self, step):
        """Called after each step record; ``step`` is the process's step count."""
        self._last_step = step
        if step % self._every == 0:
            self.report()
        else:
            self._profiler.poll()  # keep up with the ring between summaries

    def report(self, window=None):
        """Prints the summary of the window that ends now; returns the line."""
        phases, counters, _steps, unmatched, lost = window or self._profiler.take()
        now_ns = time.monotonic_ns()
        line = format_summary(
            self._first_step,
            self._last_step,
            now_ns - self._window_start_ns,
            phases,
            counters,
            unmatched,
            lost - self._lost_reported,
        )
        self._lost_reported = lost
        print(line, file=self._stream or sys.stderr, flush=True)
        self._start_window(self._last_step)
        return line

    def after_fork_in_child(self):
        self._profiler.reset()
        self._lost_reported = 0
        self._start_window(0)

    def _at_exit(self):
        if os.getpid() != self._pid:
            return  # a forked child that exits normally: the temp dir is the parent's
        window = self._profiler.take()
        if self._last_step >= self._first_step or window[0]:
            self.report(window)
        if self._temp_dir:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
