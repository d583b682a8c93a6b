"""Experiment controls: environment variables that change what a job does, so that `stallscope
passes`/`sweep` can measure "what if" (no input pipeline, no side work, other DataLoader
settings) without editing the job. Read once, when stallscope.auto installs its hooks; when none
is set nothing here runs at all. A value that cannot be used turns that control off with one
`[stallscope] experiment: ...` line; the job never sees an error of ours.

  variable                       value                 what it does (module)
  STALLSCOPE_STOP_AFTER_STEPS    N >= 1                after the N-th step boundary of this process
                                                       (automatic or stallscope.step()): sends the
                                                       "experiment" info, flushes like exit, shuts
                                                       down live DataLoader workers, os._exit(0)
                                                       (_exp_stop.py)
  STALLSCOPE_SYNTHETIC_DATA      K >= 1                each DataLoader with a len() yields its
                                                       first K real batches, then copies of them
                                                       round-robin; an epoch keeps len(loader)
                                                       batches; later epochs start no iterator
                                                       (_exp_synthetic.py)
  STALLSCOPE_SIDE_WORK_OFF       a flag: 1, true, yes, torch.save does nothing and returns None;
                                 on (0, false, no,     a repeated eval forward (same module, same
                                 off: the control is   argument signature) returns a copy of the
                                 off; stallscope/      first one's output without running
                                 _env.py)              (_exp_side_work.py)
  STALLSCOPE_SCRATCH_DIR         an existing dir       torch.save to a path writes DIR/<pid>-<n>-
                                                       <basename> instead; torch.load of that path
                                                       reads it back (SIDE_WORK_OFF wins)
                                                       (_exp_scratch.py)
  STALLSCOPE_LOADER_SET          JSON object           replaces DataLoader arguments: num_workers
                                                       (int >= 0), batch_size (int >= 1),
                                                       prefetch_factor (int >= 1), pin_memory,
                                                       persistent_workers (bools)
                                                       (_exp_loader_set.py)

What each control did goes to ONE info record of kind "experiment" per process (a flat JSON
object; loader_set is the one nested value), sent at exit and when stopping, by a process that
recorded anything (DataLoader workers do not). It has the keys of the controls that are on
(stallscope/_protocol.py EXPERIMENT_KEYS, in the order of the table; src/ parses exactly these
names; never rename):

  stop_after_steps (int), steps (int: step boundaries seen), stopped (bool)
  synthetic_batches_cached (int), synthetic_batches_served (int: copies handed out),
      synthetic_not_applied (str: "; "-joined reasons, "" when every loader was served)
  saves_skipped (int), eval_forwards_cached (int: served from the cache),
      eval_forwards_run (int: outermost no-grad calls that ran for real)
  saves_redirected (int), saves_not_redirected (int: file objects, saved as given)
  loader_set (object: the settings), loader_set_applied (int: DataLoaders constructed with at
      least one setting), loader_set_errors (str: "; "-joined, "" when none)

How: patches put on top of the hooks' own (the phases are still recorded, and shrink): a
wrapper around DataLoader.__iter__ (synthetic data; stop, to find the live iterators),
torch.save / torch.load (side work off, scratch), DataLoader.__init__ (loader set),
nn.Module.__call__ (the eval cache). Nothing applies inside DataLoader workers, while
torch.compile traces, or inside another auto phase. Each control is an _exp_base.Control; this
module reads the variables, makes the controls that are on, and installs them.
"""

from . import (_exp_loader_set, _exp_scratch, _exp_side_work, _exp_stop, _exp_synthetic, _hooks,
               _notes)
from ._protocol import (ENV_LOADER_SET, ENV_SCRATCH_DIR, ENV_SIDE_WORK_OFF, ENV_STOP_AFTER_STEPS,
                        ENV_SYNTHETIC_DATA, INFO_EXPERIMENT)

INFO_KIND = INFO_EXPERIMENT
# In the order of the table: the order of the plan's lines and of the info's keys.
_MODULES = (_exp_stop, _exp_synthetic, _exp_side_work, _exp_scratch, _exp_loader_set)
ENV_ALL = tuple(module.ENV for module in _MODULES)


def from_env(environ, at_exit):
    """The Experiment the environment asks for, or None when no control is set (or none is
    usable). Says one line per control. `at_exit` is auto's exit flush, run before stopping."""
    values = {}
    loud = _notes.main_process()
    for module in _MODULES:
        text = environ.get(module.ENV)
        if not text:
            continue
        try:
            value = module.parse(text)
        except ValueError as e:  # json.JSONDecodeError is one
            if loud:
                _notes.say(f"experiment: {module.ENV}={text!r} ignored: {e}")
            continue
        if value is not None and value is not False:  # a flag that is off, or blank
            values[module.ENV] = value
    if not values:
        return None
    experiment = Experiment(values, at_exit)
    if loud:
        for line in experiment.plan():
            _notes.say(f"experiment: {line}")
    return experiment


class Experiment:
    """The controls that are on in this process and what they did (the "experiment" info)."""

    def __init__(self, values, at_exit):
        # The values asked for (None: the control is off).
        self.stop_after_steps = values.get(ENV_STOP_AFTER_STEPS)
        self.synthetic_batches = values.get(ENV_SYNTHETIC_DATA)
        self.side_work_off = values.get(ENV_SIDE_WORK_OFF, False)
        self.scratch_dir = values.get(ENV_SCRATCH_DIR)
        self.loader_set = values.get(ENV_LOADER_SET)
        self.at_exit = at_exit
        self.tensor_type = None  # torch.Tensor, at install()
        self.info_sent = False
        # The controls that are on, None for the others.
        self.stop = self.synthetic = self.side_work = self.scratch = self.loader = None
        if self.stop_after_steps is not None:
            self.stop = _exp_stop.StopAfterSteps(self, self.stop_after_steps)
        if self.synthetic_batches is not None:
            self.synthetic = _exp_synthetic.SyntheticData(self, self.synthetic_batches)
        if self.side_work_off:
            self.side_work = _exp_side_work.SideWorkOff(self)
        if self.scratch_dir is not None:
            self.scratch = _exp_scratch.ScratchDir(self, self.scratch_dir)
        if self.loader_set is not None:
            self.loader = _exp_loader_set.LoaderSet(self, self.loader_set)
        self.controls = tuple(c for c in (self.stop, self.synthetic, self.side_work,
                                          self.scratch, self.loader) if c is not None)

    def plan(self):
        """The install lines: what each control will do."""
        return [line for control in self.controls for line in control.plan()]

    def info(self):
        """The "experiment" info record: the keys of the controls that are on."""
        data = {}
        for control in self.controls:
            data.update(control.info())
        return data

    def install(self, torch):
        """Puts the controls' patches in place, on top of the phases' (undone first). Scratch
        before side work: side work's torch.save is the outer one, so it wins."""
        self.tensor_type = torch.Tensor
        for control in (self.stop, self.synthetic, self.scratch, self.side_work, self.loader):
            if control is not None:
                control.install(torch)

    def send_info(self):
        """Sends the info once, from a process that recorded anything. Never raises."""
        state = _hooks.state
        if self.info_sent or not state.process_info_sent or state.api is None:
            return
        self.info_sent = True
        try:
            state.api.info(INFO_KIND, self.info())
        except Exception as e:
            _hooks.report_error(f"info({INFO_KIND!r})", e)

    def step_ended(self):
        """Called at each step boundary of this process (automatic or the job's own):
        STALLSCOPE_STOP_AFTER_STEPS may end the process here."""
        if self.stop is not None:
            self.stop.step_ended()

    def track(self, iterator):
        """A real DataLoader iterator the stop must shut down (nothing without a stop)."""
        if self.stop is not None:
            self.stop.track(iterator)


def install(torch, experiment):
    """Puts the experiment's patches in place (stallscope/_install.py install_experiment)."""
    experiment.install(torch)
