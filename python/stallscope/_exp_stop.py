"""STALLSCOPE_STOP_AFTER_STEPS=N (N >= 1), an experiment control (stallscope/_experiment.py):
after the N-th step boundary of this process (automatic or stallscope.step()) it sends the
"experiment" info, flushes like exit (auto's exit handler: GPU spans, sync sites), shuts down
live DataLoader workers and ends the process with os._exit(0). Its keys of the info:
stop_after_steps, steps (step boundaries seen), stopped."""

import functools
import os
import sys
import weakref

from . import _exp_base, _hooks, _notes
from ._protocol import ENV_STOP_AFTER_STEPS, KEY_STEPS, KEY_STOP_AFTER_STEPS, KEY_STOPPED

ENV = ENV_STOP_AFTER_STEPS


def parse(text):
    return _exp_base.int_at_least(text, 1)


class StopAfterSteps(_exp_base.Control):
    def __init__(self, experiment, limit):
        super().__init__(experiment)
        self.limit = limit
        self.steps = 0
        self.stopped = False
        self.iterators = weakref.WeakSet()  # live real DataLoader iterators, shut down at stop

    def plan(self):
        return [f"will stop the process after {self.limit} steps"]

    def info(self):
        return {KEY_STOP_AFTER_STEPS: self.limit, KEY_STEPS: self.steps,
                KEY_STOPPED: self.stopped}

    def install(self, torch):
        # With synthetic data on, its DataLoader.__iter__ tracks the real iterators itself.
        if self.experiment.synthetic is None:
            import importlib
            dl = importlib.import_module("torch.utils.data.dataloader")
            _hooks.patch(dl.DataLoader, "__iter__", self._wrap_iter)

    def track(self, iterator):
        """Keeps a real DataLoader iterator, to shut its workers down at the stop."""
        try:
            self.iterators.add(iterator)
        except TypeError:  # not weak-referenceable
            pass

    def step_ended(self):
        """Called at each step boundary of this process (automatic or the job's own)."""
        self.steps += 1
        if self.steps >= self.limit and not _hooks.in_worker():
            self._stop()

    def _stop(self):
        _notes.say(f"experiment: stopping after {self.steps} steps")
        self.stopped = True
        try:
            self.experiment.at_exit()  # auto._at_exit: GPU spans, sync sites, and the info
        except Exception:
            pass
        self.experiment.send_info()
        for it in list(self.iterators):
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                try:
                    shutdown()
                except Exception:
                    pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0)

    def _wrap_iter(self, original):
        control = self

        @functools.wraps(original)
        def __iter__(self):
            it = original(self)
            control.track(it)
            return it
        return __iter__
