"""Experiment controls: environment variables that change what a job does, so that `stallscope
passes`/`sweep` can measure "what if" (no input pipeline, no side work, other DataLoader
settings) without editing the job. Read once, when stallscope.auto installs its hooks; when none
is set nothing here runs at all. A value that cannot be used turns that control off with one
`[stallscope] experiment: ...` line; the job never sees an error of ours.

  variable                       value                 what it does
  STALLSCOPE_STOP_AFTER_STEPS    N >= 1                after the N-th step boundary of this process
                                                       (automatic or stallscope.step()): sends the
                                                       "experiment" info, flushes like exit, shuts
                                                       down live DataLoader workers, os._exit(0)
  STALLSCOPE_SYNTHETIC_DATA      K >= 1                each DataLoader with a len() yields its
                                                       first K real batches, then copies of them
                                                       round-robin; an epoch keeps len(loader)
                                                       batches; later epochs start no iterator
  STALLSCOPE_SIDE_WORK_OFF       1 (0: off)            torch.save does nothing and returns None;
                                                       a repeated eval forward (same module, same
                                                       argument signature) returns a copy of the
                                                       first one's output without running
  STALLSCOPE_SCRATCH_DIR         an existing dir       torch.save to a path writes DIR/<pid>-<n>-
                                                       <basename> instead; torch.load of that path
                                                       reads it back (SIDE_WORK_OFF wins)
  STALLSCOPE_LOADER_SET          JSON object           replaces DataLoader arguments: num_workers
                                                       (int >= 0), batch_size (int >= 1),
                                                       prefetch_factor (int >= 1), pin_memory,
                                                       persistent_workers (bools)

What each control did goes to ONE info record of kind "experiment" per process (a flat JSON
object; loader_set is the one nested value), sent at exit and when stopping, by a process that
recorded anything (DataLoader workers do not). It has the keys of the controls that are on, and
all of them (src/ parses exactly these names; never rename):

  stop_after_steps (int), steps (int: step boundaries seen), stopped (bool)
  synthetic_batches_cached (int), synthetic_batches_served (int: copies handed out),
      synthetic_not_applied (str: "; "-joined reasons, "" when every loader was served)
  saves_skipped (int), eval_forwards_cached (int: served from the cache),
      eval_forwards_run (int: outermost no-grad calls that ran for real)
  saves_redirected (int), saves_not_redirected (int: file objects, saved as given)
  loader_set (object: the settings), loader_set_applied (int: DataLoaders constructed with at
      least one setting), loader_set_errors (str: "; "-joined, "" when none)

How: patches put on top of the hooks' own (the phases are still recorded, and shrink): a
wrapper around DataLoader.__iter__ (synthetic data), torch.save / torch.load (side work off,
scratch), DataLoader.__init__ (loader set), nn.Module.__call__ (the eval cache: a patch on every
torch, also where forward is measured by global hooks, because a hook cannot skip forward; it
costs one extra Python call per module call while on). Nothing applies inside DataLoader
workers, while torch.compile traces, or inside another auto phase.

Eval cache bounds: 8 signatures per module object, 256 MiB of cached tensors in all; past
them, and for outputs other than tensors / None / numbers / str in tuple, list, dict or
namedtuple, the call runs for real. Not sound for a model whose no-grad output depends on the
values of its inputs, which is the point: the experiment removes that work.
"""

import collections
import inspect
import json
import os
import sys
import weakref

from . import _hooks
from ._hooks import PHASE_CHECKPOINT, PHASE_DATA, PHASE_EVAL_FORWARD

INFO_KIND = "experiment"
ENV_STOP = "STALLSCOPE_STOP_AFTER_STEPS"
ENV_SYNTHETIC = "STALLSCOPE_SYNTHETIC_DATA"
ENV_SIDE_WORK_OFF = "STALLSCOPE_SIDE_WORK_OFF"
ENV_SCRATCH = "STALLSCOPE_SCRATCH_DIR"
ENV_LOADER_SET = "STALLSCOPE_LOADER_SET"
ENV_ALL = (ENV_STOP, ENV_SYNTHETIC, ENV_SIDE_WORK_OFF, ENV_SCRATCH, ENV_LOADER_SET)

EVAL_SIGNATURES_PER_MODULE = 8
EVAL_CACHE_MAX_BYTES = 256 << 20
_MAX_REPR_CHARS = 100  # a non-tensor argument with a longer repr makes the call uncacheable
_MAX_ERRORS = 8  # distinct messages kept in loader_set_errors / synthetic_not_applied

# LOADER_SET keys and the type each value must have (bool is not an int here).
_LOADER_KEYS = {"num_workers": (int, 0), "batch_size": (int, 1), "prefetch_factor": (int, 1),
                "pin_memory": (bool, None), "persistent_workers": (bool, None)}


class _Uncacheable(Exception):
    pass


def _int_at_least(text, low):
    value = int(text)
    if value < low:
        raise ValueError(f"must be >= {low}")
    return value


def _parse_loader_set(text):
    settings = json.loads(text)
    if not isinstance(settings, dict):
        raise ValueError("not a JSON object")
    for key, value in settings.items():
        if key not in _LOADER_KEYS:
            raise ValueError(f"unknown key {key!r} (known: {', '.join(_LOADER_KEYS)})")
        kind, low = _LOADER_KEYS[key]
        if kind is bool and not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false, not {value!r}")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"{key} must be an integer >= {low}, not {value!r}")
    return settings


def _parse_side_work_off(text):
    if text not in ("0", "1"):
        raise ValueError("must be 1 or 0")
    return text == "1"


def _parse_scratch_dir(text):
    if not os.path.isdir(text):
        raise ValueError("not an existing directory")
    return os.path.abspath(text)


_PARSERS = {
    ENV_STOP: lambda text: _int_at_least(text, 1),
    ENV_SYNTHETIC: lambda text: _int_at_least(text, 1),
    ENV_SIDE_WORK_OFF: _parse_side_work_off,
    ENV_SCRATCH: _parse_scratch_dir,
    ENV_LOADER_SET: _parse_loader_set,
}


def _main_process():
    """False in a multiprocessing child (a spawn/forkserver DataLoader worker re-installs the
    hooks): it does not repeat the install lines."""
    try:
        import multiprocessing
        return multiprocessing.current_process().name == "MainProcess"
    except Exception:
        return True


def from_env(environ, at_exit):
    """The Experiment the environment asks for, or None when no control is set (or none is
    usable). Says one line per control. `at_exit` is auto's exit flush, run before stopping."""
    values = {}
    loud = _main_process()
    for name in ENV_ALL:
        text = environ.get(name)
        if not text:
            continue
        try:
            values[name] = _PARSERS[name](text)
        except ValueError as e:  # json.JSONDecodeError is one
            if loud:
                _hooks.say(f"experiment: {name}={text!r} ignored: {e}")
    if values.get(ENV_SIDE_WORK_OFF) is False:
        del values[ENV_SIDE_WORK_OFF]
    if not values:
        return None
    experiment = Experiment(values, at_exit)
    if loud:
        for line in experiment.plan():
            _hooks.say(f"experiment: {line}")
    return experiment


# ----------------------------------------------------------------------------------------------
# Copies of batches and outputs
# ----------------------------------------------------------------------------------------------

class _Pinned:
    """A cached tensor whose copies must be pinned (a pin_memory loader's batch)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


def _template(obj, tensor_type, check_pinned):
    """A private copy of `obj` to serve copies from; tensors detached and cloned (pinned ones
    marked), containers rebuilt, other objects kept as they are."""
    if isinstance(obj, tensor_type):
        if check_pinned and obj.device.type == "cpu" and obj.is_pinned():
            return _Pinned(_pinned_copy(obj))
        return obj.detach().clone()
    return _rebuild(obj, lambda item: _template(item, tensor_type, check_pinned))


def _pinned_copy(tensor):
    import torch  # already imported: the job's torch
    return torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True).copy_(tensor)


def _fresh_copy(template, tensor_type):
    """A copy of a template made by _template()/_output_template() for the job to own."""
    if isinstance(template, tensor_type):
        return template.clone()
    if type(template) is _Pinned:
        return _pinned_copy(template.tensor)
    return _rebuild(template, lambda item: _fresh_copy(item, tensor_type))


def _rebuild(obj, each):
    kind = type(obj)
    if kind is tuple or kind is list:
        return kind(each(item) for item in obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return kind(*(each(item) for item in obj))
    if kind is dict or kind is collections.OrderedDict:
        return kind((key, each(value)) for key, value in obj.items())
    return obj


def _output_template(obj, tensor_type):
    """(template, bytes) of a forward's output; _Uncacheable for a type whose copy we could
    not make (a shared mutable object would leak between calls)."""
    if isinstance(obj, tensor_type):
        copy = obj.detach().clone()
        return copy, copy.numel() * copy.element_size()
    if obj is None or type(obj) in (bool, int, float, str):
        return obj, 0
    kind = type(obj)
    if not (kind in (tuple, list, dict, collections.OrderedDict)
            or (isinstance(obj, tuple) and hasattr(obj, "_fields"))):
        raise _Uncacheable(kind.__name__)
    total = 0

    def each(item):
        nonlocal total
        template, size = _output_template(item, tensor_type)
        total += size
        return template

    return _rebuild(obj, each), total


def _signature(obj, tensor_type):
    """Hashable key of a call's arguments: tensors by shape, dtype and device; other values by
    type and repr when hashable and short; containers element by element."""
    if isinstance(obj, tensor_type):
        return (tuple(obj.shape), obj.dtype, obj.device)
    kind = type(obj)
    if kind is tuple or kind is list:
        return (kind.__name__, tuple(_signature(item, tensor_type) for item in obj))
    if kind is dict:
        return ("dict", tuple((key, _signature(value, tensor_type))
                              for key, value in sorted(obj.items(), key=lambda kv: repr(kv[0]))))
    try:
        hash(obj)
    except TypeError:
        raise _Uncacheable(kind.__name__) from None
    text = repr(obj)
    if len(text) > _MAX_REPR_CHARS:
        raise _Uncacheable(kind.__name__)
    return (kind.__qualname__, text)


# ----------------------------------------------------------------------------------------------
# Synthetic data
# ----------------------------------------------------------------------------------------------

class _LoaderCache:
    """The first K batches of one DataLoader, as templates."""

    __slots__ = ("batches", "exhausted", "broken", "check_pinned")

    def __init__(self, check_pinned):
        self.batches = []
        self.broken = False  # a batch could not be copied: real batches only
        self.exhausted = False  # the real iterator ended before K batches: serve what we have
        self.check_pinned = check_pinned


class _SyntheticIter:
    """One epoch of a loader under STALLSCOPE_SYNTHETIC_DATA: real batches while the cache
    fills (their __next__ is recorded by the hooks), then copies (recorded here)."""

    __slots__ = ("_experiment", "_cache", "_real", "_served", "_length", "__weakref__")

    def __init__(self, experiment, cache, real, length):
        self._experiment, self._cache, self._real = experiment, cache, real
        self._served, self._length = 0, length

    def __iter__(self):
        return self

    def __len__(self):
        return self._length

    def __next__(self):
        if self._served >= self._length:
            if self._real is not None:  # an epoch of fewer than K batches: all there is
                self._cache.exhausted = True
                self._drop_real()
            raise StopIteration
        if self._cache.broken and self._real is not None:
            return next(self._real)
        if self._real is not None:
            batch = self._next_real()
            if batch is not _NONE:
                return batch
        if not self._cache.batches:
            raise StopIteration
        if _hooks._quiet():
            return self._serve()
        return _hooks._in_phase(PHASE_DATA, self._serve)

    def _next_real(self):
        cache, k = self._cache, self._experiment.synthetic_batches
        if len(cache.batches) >= k:
            self._drop_real()
            return _NONE
        try:
            batch = next(self._real)
        except StopIteration:
            cache.exhausted = True
            self._drop_real()
            if not cache.batches:
                raise
            return _NONE
        try:
            template = _template(batch, self._experiment.tensor_type, cache.check_pinned)
        except Exception as e:  # the loader is left alone from here on
            cache.broken = True
            self._experiment._note(self._experiment.synthetic_not_applied,
                                   f"a batch could not be copied: {type(e).__name__}: {e}")
            return batch
        cache.batches.append(template)
        self._experiment.batches_cached += 1
        self._served += 1
        if len(cache.batches) >= k:
            self._drop_real()
        return batch

    def _serve(self):
        batches = self._cache.batches
        template = batches[self._served % len(batches)]
        self._served += 1
        self._experiment.batches_served += 1
        return _fresh_copy(template, self._experiment.tensor_type)

    def _drop_real(self):
        """The real iterator is no longer needed: its workers stop now, not at its __del__."""
        real, self._real = self._real, None
        shutdown = getattr(real, "_shutdown_workers", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:
                pass


_NONE = object()  # _next_real(): no real batch, serve a copy


# ----------------------------------------------------------------------------------------------
# The experiment
# ----------------------------------------------------------------------------------------------

class Experiment:
    """The controls that are on in this process and what they did (the "experiment" info)."""

    def __init__(self, values, at_exit):
        self.stop_after_steps = values.get(ENV_STOP)
        self.synthetic_batches = values.get(ENV_SYNTHETIC)
        self.side_work_off = values.get(ENV_SIDE_WORK_OFF, False)
        self.scratch_dir = values.get(ENV_SCRATCH)
        self.loader_set = values.get(ENV_LOADER_SET)
        self.at_exit = at_exit
        self.tensor_type = None  # torch.Tensor, at install()
        self.info_sent = False
        self.steps = 0
        self.stopped = False
        self.iterators = weakref.WeakSet()  # live real DataLoader iterators, shut down at stop
        self.loaders = weakref.WeakKeyDictionary()  # DataLoader -> _LoaderCache or None
        self.batches_cached = self.batches_served = 0
        self.synthetic_not_applied = []
        self.saves_skipped = self.saves_redirected = self.saves_not_redirected = 0
        self.scratch_paths = {}  # the job's absolute path -> the file written instead
        self.eval_cache = weakref.WeakKeyDictionary()  # module -> {signature: template}
        self.eval_cached_bytes = 0
        self.eval_forwards_cached = self.eval_forwards_run = 0
        self.loader_set_applied = 0
        self.loader_set_errors = []

    def plan(self):
        """The install lines: what each control will do."""
        lines = []
        if self.stop_after_steps is not None:
            lines.append(f"will stop the process after {self.stop_after_steps} steps")
        if self.synthetic_batches is not None:
            lines.append(f"DataLoaders serve copies of their first {self.synthetic_batches}"
                         " batches")
        if self.side_work_off:
            lines.append("torch.save skipped; repeated eval forwards served from a cache")
        if self.scratch_dir is not None:
            lines.append(f"torch.save to a path writes under {self.scratch_dir} instead"
                         + (" (skipped: side work is off)" if self.side_work_off else ""))
        if self.loader_set is not None:
            lines.append(f"DataLoader settings replaced: {json.dumps(self.loader_set)}")
        return lines

    def info(self):
        """The "experiment" info record: the keys of the controls that are on."""
        data = {}
        if self.stop_after_steps is not None:
            data.update(stop_after_steps=self.stop_after_steps, steps=self.steps,
                        stopped=self.stopped)
        if self.synthetic_batches is not None:
            data.update(synthetic_batches_cached=self.batches_cached,
                        synthetic_batches_served=self.batches_served,
                        synthetic_not_applied="; ".join(self.synthetic_not_applied))
        if self.side_work_off:
            data.update(saves_skipped=self.saves_skipped,
                        eval_forwards_cached=self.eval_forwards_cached,
                        eval_forwards_run=self.eval_forwards_run)
        if self.scratch_dir is not None:
            data.update(saves_redirected=self.saves_redirected,
                        saves_not_redirected=self.saves_not_redirected)
        if self.loader_set is not None:
            data.update(loader_set=dict(self.loader_set),
                        loader_set_applied=self.loader_set_applied,
                        loader_set_errors="; ".join(self.loader_set_errors))
        return data

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

    # -- stop after N steps --------------------------------------------------------------------

    def step_ended(self):
        """Called at each step boundary of this process (automatic or the job's own)."""
        if self.stop_after_steps is None:
            return
        self.steps += 1
        if self.steps >= self.stop_after_steps and _hooks.state.get_worker_info() is None:
            self._stop()

    def _stop(self):
        _hooks.say(f"experiment: stopping after {self.steps} steps")
        self.stopped = True
        try:
            self.at_exit()  # auto._at_exit: GPU spans, sync sites, and this info
        except Exception:
            pass
        self.send_info()
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

    def track(self, iterator):
        if self.stop_after_steps is not None:
            try:
                self.iterators.add(iterator)
            except TypeError:  # not weak-referenceable
                pass

    # -- synthetic data ------------------------------------------------------------------------

    def loader_iter(self, loader, original):
        """DataLoader.__iter__ under STALLSCOPE_SYNTHETIC_DATA (`original`: the hooks' one)."""
        try:
            if loader not in self.loaders:
                self.loaders[loader] = self._new_cache(loader)
            cache = self.loaders[loader]
        except TypeError:  # a DataLoader subclass with __slots__: no weak reference
            cache = None
        length = _len_or_none(loader)
        if cache is None or cache.broken or length is None:
            it = original(loader)
            self.track(it)
            return it
        if cache.exhausted or len(cache.batches) >= self.synthetic_batches:
            if _hooks._quiet():
                return _SyntheticIter(self, cache, None, length)
            return _hooks._in_phase(PHASE_DATA, _SyntheticIter, self, cache, None, length)
        real = original(loader)
        self.track(real)
        return _SyntheticIter(self, cache, iter(real), length)

    def _new_cache(self, loader):
        if _len_or_none(loader) is None:
            self._note(self.synthetic_not_applied,
                       f"{type(loader.dataset).__name__}: the DataLoader has no len()")
            return None
        return _LoaderCache(bool(getattr(loader, "pin_memory", False)))

    @staticmethod
    def _note(messages, text):
        if text not in messages and len(messages) < _MAX_ERRORS:
            messages.append(text)

    # -- torch.save / torch.load ---------------------------------------------------------------

    def save(self, original, args, kwargs):
        """torch.save under SIDE_WORK_OFF / SCRATCH_DIR (`original`: the hooks' one)."""
        if self.side_work_off:
            self.saves_skipped += 1
            if not _hooks._quiet():
                _hooks._in_phase(PHASE_CHECKPOINT, _nothing)
            return None
        args, kwargs, path = _replace_arg(args, kwargs, 1, "f", self._scratch_path)
        if path is None:
            self.saves_not_redirected += 1
        else:
            self.saves_redirected += 1
        return original(*args, **kwargs)

    def _scratch_path(self, f):
        key = os.path.abspath(os.fsdecode(os.fspath(f)))
        path = self.scratch_paths.get(key)
        if path is None:
            name = f"{os.getpid()}-{len(self.scratch_paths) + 1}-{os.path.basename(key)}"
            path = self.scratch_paths[key] = os.path.join(self.scratch_dir, name)
        return path

    def load(self, original, args, kwargs):
        def redirected(f):
            return self.scratch_paths.get(os.path.abspath(os.fsdecode(os.fspath(f))), f)

        if self.scratch_paths:
            args, kwargs, _ = _replace_arg(args, kwargs, 0, "f", redirected)
        return original(*args, **kwargs)

    # -- eval forward cache --------------------------------------------------------------------

    def eval_call(self, original, module, args, kwargs):
        """An outermost no-grad module call: a copy of a cached output, or the real call."""
        tensor_type = self.tensor_type
        try:
            key = (_signature(args, tensor_type), _signature(kwargs, tensor_type))
        except Exception:  # _Uncacheable, or an argument whose hash/repr raises
            key = None
        entries = self.eval_cache.get(module) if key is not None else None
        if entries is not None:
            box = entries.get(key)
            if box is not None:
                self.eval_forwards_cached += 1
                return _hooks._in_phase(PHASE_EVAL_FORWARD, _fresh_copy, box.template,
                                        tensor_type)
        output = original(module, *args, **kwargs)
        self.eval_forwards_run += 1
        if key is not None and (entries is None or len(entries) < EVAL_SIGNATURES_PER_MODULE):
            try:
                template, size = _output_template(output, tensor_type)
            except Exception:  # _Uncacheable, or a tensor that cannot be cloned
                return output
            if self.eval_cached_bytes + size <= EVAL_CACHE_MAX_BYTES:
                self.eval_cached_bytes += size
                # Boxed: an output of None is cached too.
                self.eval_cache.setdefault(module, {})[key] = _Box(template)
        return output

    # -- loader settings -----------------------------------------------------------------------

    def loader_arguments(self, signature, bound):
        """Applies LOADER_SET to a DataLoader.__init__ call bound to `signature`, reconciled so
        that the DataLoader accepts it. Returns True when any setting was applied."""
        params = signature.parameters
        given = bound.arguments

        def value(name):
            return given[name] if name in given else params[name].default

        applied = False
        for name, setting in self.loader_set.items():
            if name not in params:
                self._note(self.loader_set_errors, f"{name}: this DataLoader has no such argument")
            elif name == "batch_size" and value("batch_sampler") is not None:
                self._note(self.loader_set_errors, "batch_size not applied: the job passes a "
                                                   "batch_sampler")
            else:
                given[name] = setting
                applied = True
        if "num_workers" in params and value("num_workers") == 0:
            # What DataLoader rejects without workers (torch 1.13 and 2.x alike).
            for name, default in (("persistent_workers", False),
                                  ("prefetch_factor", _default(params, "prefetch_factor")),
                                  ("multiprocessing_context", None)):
                if name in params and value(name) != default:
                    if name in self.loader_set:
                        self._note(self.loader_set_errors, f"{name} not applied: num_workers=0")
                    given[name] = default
        return applied


class _Box:
    """A cached output (its template may be None)."""

    __slots__ = ("template",)

    def __init__(self, template):
        self.template = template


def _default(params, name):
    return params[name].default if name in params else None


def _nothing():
    return None


def _len_or_none(loader):
    try:
        return len(loader)
    except TypeError:  # an IterableDataset without __len__
        return None


def _replace_arg(args, kwargs, index, keyword, replace):
    """(args, kwargs, new value or None): the path argument at `index` / `keyword` replaced by
    replace(path) when it is a str or os.PathLike (file objects are left alone)."""
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


# ----------------------------------------------------------------------------------------------
# Install: patches on top of the hooks' own
# ----------------------------------------------------------------------------------------------

def install(torch, experiment):
    """Puts the experiment's patches in place (after the phases'; undone first)."""
    experiment.tensor_type = torch.Tensor
    import importlib
    dl = importlib.import_module("torch.utils.data.dataloader")
    if experiment.synthetic_batches is not None:
        _hooks.patch(dl.DataLoader, "__iter__", lambda original: _wrap_iter(original, experiment))
    elif experiment.stop_after_steps is not None:
        _hooks.patch(dl.DataLoader, "__iter__", lambda original: _wrap_track(original, experiment))
    if experiment.side_work_off or experiment.scratch_dir is not None:
        _patch_save_load(torch, experiment)
    if experiment.side_work_off:
        _hooks.patch(torch.nn.Module, "__call__", lambda original: _wrap_call(original, torch,
                                                                              experiment))
    if experiment.loader_set is not None:
        _hooks.patch(dl.DataLoader, "__init__", lambda original: _wrap_init(original,
                                                                            experiment))


def _patch_save_load(torch, experiment):
    for name, method in (("save", experiment.save), ("load", experiment.load)):
        current = getattr(torch, name)
        _hooks.patch(torch, name, lambda original, method=method: _wrap_io(original, method))
        if getattr(torch.serialization, name, None) is current:
            _hooks.patch(torch.serialization, name, lambda _original, name=name:
                         getattr(torch, name))


def _in_worker():
    return _hooks.state.get_worker_info() is not None


def _wrap_io(original, method):
    import functools

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if _hooks.state.off or _in_worker():
            return original(*args, **kwargs)
        return method(original, args, kwargs)
    return wrapper


def _wrap_iter(original, experiment):
    import functools

    @functools.wraps(original)
    def __iter__(self):
        if _hooks.state.off or _in_worker():
            return original(self)
        return experiment.loader_iter(self, original)
    return __iter__


def _wrap_track(original, experiment):
    import functools

    @functools.wraps(original)
    def __iter__(self):
        it = original(self)
        experiment.track(it)
        return it
    return __iter__


def _wrap_call(original, torch, experiment):
    import functools
    state = _hooks.state
    is_grad_enabled = torch.is_grad_enabled

    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        # First, as in _hooks.wrap_module_call: dynamo folds is_compiling(), so a traced call
        # never touches thread-locals (no graph break). Then the cheapest tests: this runs for
        # every submodule call.
        if state.is_compiling is not None and state.is_compiling():
            return original(self, *args, **kwargs)
        if state.tls.active is not None or is_grad_enabled():
            return original(self, *args, **kwargs)
        if _hooks._quiet():
            return original(self, *args, **kwargs)
        return experiment.eval_call(original, self, args, kwargs)
    return __call__


def _wrap_init(original, experiment):
    import functools
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        if _hooks.state.off or _in_worker():
            return original(self, *args, **kwargs)
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # the job's own mistake: let DataLoader say it
            return original(self, *args, **kwargs)
        try:
            applied = experiment.loader_arguments(signature, bound)
        except Exception as e:
            experiment._note(experiment.loader_set_errors, f"{type(e).__name__}: {e}")
            return original(self, *args, **kwargs)
        try:
            original(*bound.args, **bound.kwargs)
        except Exception as e:
            experiment._note(experiment.loader_set_errors,
                             f"not applied, DataLoader refused: {type(e).__name__}: {e}")
            return original(self, *args, **kwargs)
        if applied:
            experiment.loader_set_applied += 1
        return None
    return __init__
