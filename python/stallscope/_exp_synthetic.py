"""STALLSCOPE_SYNTHETIC_DATA=K (K >= 1), an experiment control (stallscope/_experiment.py): each
DataLoader with a len() yields its first K real batches, then copies of them round-robin
(stallscope/_exp_copies.py); an epoch keeps len(loader) batches; later epochs start no iterator,
so no worker either. The real batches' __next__ is recorded by the hooks, the copies' here, both
as data_loading. A loader without len(), or whose batch cannot be copied, is left alone (said in
synthetic_not_applied). Its keys of the "experiment" info: synthetic_batches_cached,
synthetic_batches_served (copies handed out), synthetic_not_applied ("; "-joined reasons, ""
when every loader was served)."""

import functools
import weakref

from . import _exp_base, _exp_copies, _hooks
from ._exp_base import add_message, len_or_none
from ._protocol import (ENV_SYNTHETIC_DATA, KEY_SYNTHETIC_BATCHES_CACHED,
                        KEY_SYNTHETIC_BATCHES_SERVED, KEY_SYNTHETIC_NOT_APPLIED, PHASE_DATA)

ENV = ENV_SYNTHETIC_DATA


def parse(text):
    return _exp_base.int_at_least(text, 1)


class SyntheticData(_exp_base.Control):
    def __init__(self, experiment, batches):
        super().__init__(experiment)
        self.keep = batches  # K: real batches kept per loader
        self.loaders = weakref.WeakKeyDictionary()  # DataLoader -> _LoaderCache or None
        self.batches_cached = self.batches_served = 0
        self.not_applied = []

    def plan(self):
        return [f"DataLoaders serve copies of their first {self.keep} batches"]

    def info(self):
        return {KEY_SYNTHETIC_BATCHES_CACHED: self.batches_cached,
                KEY_SYNTHETIC_BATCHES_SERVED: self.batches_served,
                KEY_SYNTHETIC_NOT_APPLIED: "; ".join(self.not_applied)}

    def install(self, torch):
        import importlib
        dl = importlib.import_module("torch.utils.data.dataloader")
        _hooks.patch(dl.DataLoader, "__iter__", self._wrap_iter)

    def _wrap_iter(self, original):
        control = self

        @functools.wraps(original)
        def __iter__(self):
            if _exp_base.passes_through():
                return original(self)
            return control.loader_iter(self, original)
        return __iter__

    def loader_iter(self, loader, original):
        """DataLoader.__iter__ under STALLSCOPE_SYNTHETIC_DATA (`original`: the hooks' one)."""
        try:
            if loader not in self.loaders:
                self.loaders[loader] = self._new_cache(loader)
            cache = self.loaders[loader]
        except TypeError:  # a DataLoader subclass with __slots__: no weak reference
            cache = None
        length = len_or_none(loader)
        if cache is None or cache.broken or length is None:
            it = original(loader)
            self.experiment.track(it)
            return it
        if cache.exhausted or len(cache.batches) >= self.keep:
            if _hooks.quiet():
                return _SyntheticIter(self, cache, None, length)
            return _hooks.in_phase(PHASE_DATA, _SyntheticIter, self, cache, None, length)
        real = original(loader)
        self.experiment.track(real)
        return _SyntheticIter(self, cache, iter(real), length)

    def _new_cache(self, loader):
        if len_or_none(loader) is None:
            add_message(self.not_applied,
                        f"{type(loader.dataset).__name__}: the DataLoader has no len()")
            return None
        return _LoaderCache(bool(getattr(loader, "pin_memory", False)))


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

    __slots__ = ("_control", "_cache", "_real", "_served", "_length", "__weakref__")

    def __init__(self, control, cache, real, length):
        self._control, self._cache, self._real = control, cache, real
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
        if _hooks.quiet():
            return self._serve()
        return _hooks.in_phase(PHASE_DATA, self._serve)

    def _next_real(self):
        control, cache = self._control, self._cache
        k = control.keep
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
            kept = _exp_copies.template(batch, control.experiment.tensor_type, cache.check_pinned)
        except Exception as e:  # the loader is left alone from here on
            cache.broken = True
            add_message(control.not_applied,
                        f"a batch could not be copied: {type(e).__name__}: {e}")
            return batch
        cache.batches.append(kept)
        control.batches_cached += 1
        self._served += 1
        if len(cache.batches) >= k:
            self._drop_real()
        return batch

    def _serve(self):
        batches = self._cache.batches
        kept = batches[self._served % len(batches)]
        self._served += 1
        self._control.batches_served += 1
        return _exp_copies.fresh_copy(kept, self._control.experiment.tensor_type)

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
