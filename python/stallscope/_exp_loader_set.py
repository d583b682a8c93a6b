"""STALLSCOPE_LOADER_SET={JSON object}, an experiment control (stallscope/_experiment.py; set by
`stallscope sweep`): replaces DataLoader arguments at DataLoader.__init__: num_workers
(int >= 0), batch_size (int >= 1), prefetch_factor (int >= 1), pin_memory, persistent_workers
(bools), then reconciles the rest so that DataLoader accepts them (no workers: no
persistent_workers, prefetch_factor or multiprocessing_context). A setting that cannot apply is
said in loader_set_errors and the job's own value is kept; a DataLoader that refuses the
settings is made with the job's arguments. Its keys of the "experiment" info: loader_set (the
settings), loader_set_applied (DataLoaders constructed with at least one setting),
loader_set_errors ("; "-joined, "" when none)."""

import functools
import inspect
import json

from . import _exp_base, _hooks
from ._exp_base import add_message
from ._protocol import (ENV_LOADER_SET, KEY_BATCH_SIZE, KEY_LOADER_SET, KEY_LOADER_SET_APPLIED,
                        KEY_LOADER_SET_ERRORS, KEY_NUM_WORKERS, KEY_PERSISTENT_WORKERS,
                        KEY_PIN_MEMORY, KEY_PREFETCH_FACTOR)

ENV = ENV_LOADER_SET

# The settings (stallscope/_protocol.py LOADER_SET_KEYS), each with the type its value must have
# (bool is not an int here) and an int's lowest value. They are DataLoader's argument names.
KEYS = {KEY_NUM_WORKERS: (int, 0), KEY_BATCH_SIZE: (int, 1), KEY_PREFETCH_FACTOR: (int, 1),
        KEY_PIN_MEMORY: (bool, None), KEY_PERSISTENT_WORKERS: (bool, None)}
_BATCH_SAMPLER = "batch_sampler"
_MULTIPROCESSING_CONTEXT = "multiprocessing_context"


def parse(text):
    settings = json.loads(text)
    if not isinstance(settings, dict):
        raise ValueError("not a JSON object")
    for key, value in settings.items():
        if key not in KEYS:
            raise ValueError(f"unknown key {key!r} (known: {', '.join(KEYS)})")
        kind, low = KEYS[key]
        if kind is bool and not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false, not {value!r}")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"{key} must be an integer >= {low}, not {value!r}")
    return settings


class LoaderSet(_exp_base.Control):
    def __init__(self, experiment, settings):
        super().__init__(experiment)
        self.settings = settings
        self.applied = 0
        self.errors = []

    def plan(self):
        return [f"DataLoader settings replaced: {json.dumps(self.settings)}"]

    def info(self):
        return {KEY_LOADER_SET: dict(self.settings), KEY_LOADER_SET_APPLIED: self.applied,
                KEY_LOADER_SET_ERRORS: "; ".join(self.errors)}

    def install(self, torch):
        import importlib
        dl = importlib.import_module("torch.utils.data.dataloader")
        _hooks.patch(dl.DataLoader, "__init__", self._wrap_init)

    def arguments(self, signature, bound):
        """Applies the settings to a DataLoader.__init__ call bound to `signature`, reconciled
        so that the DataLoader accepts it. Returns True when any setting was applied."""
        params = signature.parameters
        given = bound.arguments

        def value(name):
            return given[name] if name in given else params[name].default

        applied = False
        for name, setting in self.settings.items():
            if name not in params:
                add_message(self.errors, f"{name}: this DataLoader has no such argument")
            elif name == KEY_BATCH_SIZE and value(_BATCH_SAMPLER) is not None:
                add_message(self.errors, "batch_size not applied: the job passes a batch_sampler")
            else:
                given[name] = setting
                applied = True
        if KEY_NUM_WORKERS in params and value(KEY_NUM_WORKERS) == 0:
            # What DataLoader rejects without workers (torch 1.13 and 2.x alike).
            for name, default in ((KEY_PERSISTENT_WORKERS, False),
                                  (KEY_PREFETCH_FACTOR, _default(params, KEY_PREFETCH_FACTOR)),
                                  (_MULTIPROCESSING_CONTEXT, None)):
                if name in params and value(name) != default:
                    if name in self.settings:
                        add_message(self.errors, f"{name} not applied: num_workers=0")
                    given[name] = default
        return applied

    def _wrap_init(self, original):
        control = self
        signature = inspect.signature(original)

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            if _exp_base.passes_through():
                return original(self, *args, **kwargs)
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError:  # the job's own mistake: let DataLoader say it
                return original(self, *args, **kwargs)
            try:
                applied = control.arguments(signature, bound)
            except Exception as e:
                add_message(control.errors, f"{type(e).__name__}: {e}")
                return original(self, *args, **kwargs)
            try:
                original(*bound.args, **bound.kwargs)
            except Exception as e:
                add_message(control.errors,
                            f"not applied, DataLoader refused: {type(e).__name__}: {e}")
                return original(self, *args, **kwargs)
            if applied:
                control.applied += 1
            return None
        return __init__


def _default(params, name):
    return params[name].default if name in params else None
