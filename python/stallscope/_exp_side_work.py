"""STALLSCOPE_SIDE_WORK_OFF (a flag, stallscope/_env.py: 1/true/yes/on; 0/false/no/off or
unset: the control is off), an experiment control (stallscope/_experiment.py): torch.save does
nothing and returns None (still a checkpointing phase), and a repeated eval forward (same module,
same argument signature) returns a copy of the first one's output without running. Its keys of
the "experiment" info: saves_skipped, eval_forwards_cached (served from the cache),
eval_forwards_run (outermost no-grad calls that ran for real).

The eval cache is a patch of nn.Module.__call__ on every torch, also where forward is measured
by global hooks, because a hook cannot skip forward; it costs one extra Python call per module
call while on. Bounds: EVAL_SIGNATURES_PER_MODULE per module object, EVAL_CACHE_MAX_BYTES of
cached tensors in all; past them, and for outputs other than tensors / None / numbers / str in
tuple, list, dict or namedtuple (stallscope/_exp_copies.py), the call runs for real. Not sound
for a model whose no-grad output depends on the values of its inputs, which is the point: the
experiment removes that work.
"""

import functools
import weakref

from . import _env, _exp_base, _exp_copies, _hooks
from ._protocol import (ENV_SIDE_WORK_OFF, KEY_EVAL_FORWARDS_CACHED, KEY_EVAL_FORWARDS_RUN,
                        KEY_SAVES_SKIPPED, PHASE_CHECKPOINT, PHASE_EVAL_FORWARD)

ENV = ENV_SIDE_WORK_OFF
EVAL_SIGNATURES_PER_MODULE = 8
EVAL_CACHE_MAX_BYTES = 256 << 20


def parse(text):
    """True (on), False (off) or None (blank); ValueError for text that is not a flag."""
    return _env.parse_flag(text)


class SideWorkOff(_exp_base.Control):
    def __init__(self, experiment):
        super().__init__(experiment)
        self.saves_skipped = 0
        self.eval_cache = weakref.WeakKeyDictionary()  # module -> {signature: _Box}
        self.eval_cached_bytes = 0
        self.eval_forwards_cached = self.eval_forwards_run = 0

    def plan(self):
        return ["torch.save skipped; repeated eval forwards served from a cache"]

    def info(self):
        return {KEY_SAVES_SKIPPED: self.saves_skipped,
                KEY_EVAL_FORWARDS_CACHED: self.eval_forwards_cached,
                KEY_EVAL_FORWARDS_RUN: self.eval_forwards_run}

    def install(self, torch):
        # After STALLSCOPE_SCRATCH_DIR's patch (stallscope/_experiment.py installs in that
        # order): a skipped save never reaches it, so side work off wins.
        _exp_base.patch_serialization(
            torch, "save", lambda original: _exp_base.wrap_io(original, self.save))
        _hooks.patch(torch.nn.Module, "__call__",
                     lambda original: self._wrap_call(original, torch))

    def save(self, original, args, kwargs):
        """torch.save: skipped, and recorded as the checkpointing phase it would have been."""
        self.saves_skipped += 1
        if not _hooks.quiet():
            _hooks.in_phase(PHASE_CHECKPOINT, _nothing)
        return None

    def _wrap_call(self, original, torch):
        control = self
        state = _hooks.state
        is_grad_enabled = torch.is_grad_enabled

        @functools.wraps(original)
        def __call__(self, *args, **kwargs):
            # First, as in _hooks.wrap_module_call: dynamo folds is_compiling(), so a traced
            # call never touches thread-locals (no graph break). Then the cheapest tests: this
            # runs for every submodule call.
            if state.is_compiling is not None and state.is_compiling():
                return original(self, *args, **kwargs)
            if state.tls.active is not None or is_grad_enabled():
                return original(self, *args, **kwargs)
            if _hooks.quiet():
                return original(self, *args, **kwargs)
            return control.eval_call(original, self, args, kwargs)
        return __call__

    def eval_call(self, original, module, args, kwargs):
        """An outermost no-grad module call: a copy of a cached output, or the real call."""
        tensor_type = self.experiment.tensor_type
        try:
            key = (_exp_copies.signature(args, tensor_type),
                   _exp_copies.signature(kwargs, tensor_type))
        except Exception:  # Uncacheable, or an argument whose hash/repr raises
            key = None
        entries = self.eval_cache.get(module) if key is not None else None
        if entries is not None:
            box = entries.get(key)
            if box is not None:
                self.eval_forwards_cached += 1
                return _hooks.in_phase(PHASE_EVAL_FORWARD, _exp_copies.fresh_copy, box.template,
                                       tensor_type)
        output = original(module, *args, **kwargs)
        self.eval_forwards_run += 1
        if key is not None and (entries is None or len(entries) < EVAL_SIGNATURES_PER_MODULE):
            try:
                kept, size = _exp_copies.output_template(output, tensor_type)
            except Exception:  # Uncacheable, or a tensor that cannot be cloned
                return output
            if self.eval_cached_bytes + size <= EVAL_CACHE_MAX_BYTES:
                self.eval_cached_bytes += size
                # Boxed: an output of None is cached too.
                self.eval_cache.setdefault(module, {})[key] = _Box(kept)
        return output


class _Box:
    """A cached output (its template may be None)."""

    __slots__ = ("template",)

    def __init__(self, template):
        self.template = template


def _nothing():
    return None
