"""What the experiment controls (stallscope/_experiment.py, one module _exp_<control>.py each)
share: the Control interface, value parsing, the bounded message lists of their info, and the
tests every patch makes before it changes anything."""

import functools

from . import _hooks

MAX_MESSAGES = 8  # distinct messages kept in a control's "; "-joined info string


class Control:
    """One experiment control that is on. `experiment` is the Experiment it belongs to (for
    what controls share: the job's tensor type, the stop control's iterator tracking)."""

    def __init__(self, experiment):
        self.experiment = experiment

    def plan(self):
        """The install lines: what the control will do."""
        return []

    def info(self):
        """The control's keys of the "experiment" info record (stallscope/_protocol.py
        EXPERIMENT_KEYS), in their order."""
        return {}

    def install(self, torch):
        """Puts the control's patches in place with _hooks.patch (undone by auto.uninstall)."""


def int_at_least(text, low):
    """int(text), which must be >= low; ValueError otherwise."""
    value = int(text)
    if value < low:
        raise ValueError(f"must be >= {low}")
    return value


def add_message(messages, text):
    """Appends `text` to a control's message list, once, and at most MAX_MESSAGES in all."""
    if text not in messages and len(messages) < MAX_MESSAGES:
        messages.append(text)


def passes_through():
    """True where no control changes anything: the hooks are off, or in a DataLoader worker."""
    return _hooks.state.off or _hooks.in_worker()


def len_or_none(loader):
    """len(loader), or None for a loader without one (an IterableDataset without __len__)."""
    try:
        return len(loader)
    except TypeError:
        return None


def patch_serialization(torch, name, make_wrapper):
    """Patches torch.save or torch.load (`name`) with make_wrapper(original), and makes
    torch.serialization's function the patched one where it was the same function."""
    current = getattr(torch, name)
    _hooks.patch(torch, name, make_wrapper)
    if getattr(torch.serialization, name, None) is current:
        _hooks.patch(torch.serialization, name, lambda _original: getattr(torch, name))


def wrap_io(original, method):
    """A torch.save / torch.load wrapper: method(original, args, kwargs), except where the
    controls pass through."""
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if passes_through():
            return original(*args, **kwargs)
        return method(original, args, kwargs)
    return wrapper

