"""STALLSCOPE_SCRATCH_DIR=DIR (an existing directory), an experiment control
(stallscope/_experiment.py): torch.save to a path writes DIR/<pid>-<n>-<basename> instead, and
torch.load of that path reads it back, so a pass never overwrites the job's own checkpoints
(STALLSCOPE_SIDE_WORK_OFF wins: a skipped save writes nothing anywhere). Its keys of the
"experiment" info: saves_redirected, saves_not_redirected (file objects, saved as given)."""

import os

from . import _exp_base
from ._protocol import ENV_SCRATCH_DIR, KEY_SAVES_NOT_REDIRECTED, KEY_SAVES_REDIRECTED

ENV = ENV_SCRATCH_DIR


def parse(text):
    if not os.path.isdir(text):
        raise ValueError("not an existing directory")
    return os.path.abspath(text)


class ScratchDir(_exp_base.Control):
    def __init__(self, experiment, directory):
        super().__init__(experiment)
        self.directory = directory
        self.saves_redirected = self.saves_not_redirected = 0
        self.paths = {}  # the job's absolute path -> the file written instead

    def plan(self):
        skipped = " (skipped: side work is off)" if self.experiment.side_work_off else ""
        return [f"torch.save to a path writes under {self.directory} instead{skipped}"]

    def info(self):
        return {KEY_SAVES_REDIRECTED: self.saves_redirected,
                KEY_SAVES_NOT_REDIRECTED: self.saves_not_redirected}

    def install(self, torch):
        for name, method in (("save", self.save), ("load", self.load)):
            _exp_base.patch_serialization(
                torch, name, lambda original, method=method: _exp_base.wrap_io(original, method))

    def save(self, original, args, kwargs):
        """torch.save, to the scratch file of its path (a file object: as given)."""
        args, kwargs, path = replace_arg(args, kwargs, 1, "f", self._scratch_path)
        if path is None:
            self.saves_not_redirected += 1
        else:
            self.saves_redirected += 1
        return original(*args, **kwargs)

    def load(self, original, args, kwargs):
        """torch.load, from the scratch file of a path saved to before."""
        def redirected(f):
            return self.paths.get(os.path.abspath(os.fsdecode(os.fspath(f))), f)

        if self.paths:
            args, kwargs, _ = replace_arg(args, kwargs, 0, "f", redirected)
        return original(*args, **kwargs)

    def _scratch_path(self, f):
        key = os.path.abspath(os.fsdecode(os.fspath(f)))
        path = self.paths.get(key)
        if path is None:
            name = f"{os.getpid()}-{len(self.paths) + 1}-{os.path.basename(key)}"
            path = self.paths[key] = os.path.join(self.directory, name)
        return path


def replace_arg(args, kwargs, index, keyword, replace):
    """(args, kwargs, new value or None): the path argument at `index` / `keyword` replaced by
    replace(path) when it is a str, bytes or os.PathLike (file objects are left alone)."""
    if len(args) > index:
        f = args[index]
    elif keyword in kwargs:
        f = kwargs[keyword]
    else:
        return args, kwargs, None
    if not isinstance(f, (str, bytes, os.PathLike)):
        return args, kwargs, None
    new = replace(f)
    if len(args) > index:
        args = (*args[:index], new, *args[index + 1:])
    else:
        kwargs = {**kwargs, keyword: new}
    return args, kwargs, new
