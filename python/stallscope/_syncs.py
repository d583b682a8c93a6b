"""Host synchronisations by kind and call site, for stallscope.auto.

Each counted call adds 1 to counter "host_sync.<kind>" and, the first time a call site is seen
(up to MAX_SITES per process), writes an info "sync_site" line naming it, so the report's fix
can name the line. At exit an info "sync_sites" line gives each site's count.

  kind          what                                                       blocks the host until
  item, cpu,    Tensor.item/.cpu/.tolist/.numpy (any device: on the CPU    the GPU has run all the
  tolist,       they are the same per-step logging pattern, and the        work queued before it
  numpy         verdict counts them on CPU jobs too)
  synchronize   torch.cuda.synchronize()                                   the device is idle
  empty_cache   torch.cuda.empty_cache()                                   (frees the cache: syncs)
  copy_h2d,     Tensor.to / .cuda with non_blocking=False, crossing        the copy is done, after
  copy_d2h      host <-> device                                            the stream's work

A call torch makes itself (Module.to moving parameters, an optimizer's bookkeeping) is not the
loop's doing and is not counted: the direct caller must be outside torch. The site is the first
frame outside torch and stallscope; when that frame is in an installed library (a trainer's
logging), the site also names the first frame of the job's own code.
"""

import functools
import os
import sys

from ._protocol import (HOST_SYNC_PREFIX, INFO_SYNC_SITE, INFO_SYNC_SITES, KEY_COUNT, KEY_FILE,
                        KEY_FUNCTION, KEY_KIND, KEY_LINE, KEY_SITES, KEY_USER_FILE, KEY_USER_LINE,
                        SYNC_COPY_D2H, SYNC_COPY_H2D, SYNC_CPU, SYNC_EMPTY_CACHE, SYNC_ITEM,
                        SYNC_NUMPY, SYNC_SYNCHRONIZE, SYNC_TOLIST)

PREFIX = HOST_SYNC_PREFIX
TENSOR_METHODS = (SYNC_ITEM, SYNC_CPU, SYNC_TOLIST, SYNC_NUMPY)  # a kind is the method's name
CUDA_FUNCTIONS = (SYNC_SYNCHRONIZE, SYNC_EMPTY_CACHE)  # likewise, torch.cuda's functions
MAX_SITES = 32
_LIBRARY_DIRS = ("site-packages", "dist-packages")


class SyncCounter:
    """Counts host syncs. `count(name, n)` and `info(kind, dict)` are the stallscope API's;
    `may_count()` says whether the calling thread's state allows counting now (auto's rules:
    not turned off, not inside data_loading/optimizer_step/checkpointing, not in a worker)."""

    def __init__(self, torch, count, info, may_count):
        self._count = count
        self._info = info
        self._may_count = may_count
        self._skip = tuple(os.path.dirname(m.__file__) + os.sep
                           for m in (torch, sys.modules[__package__])
                           if getattr(m, "__file__", None))
        self._sites = {}  # (kind, file, line) -> count

    def hit(self, kind, depth):
        """Counts one sync of `kind`; `depth` = frames from here to the wrapper's caller."""
        if not self._may_count():
            return
        caller = sys._getframe(depth + 1)
        if caller.f_code.co_filename.startswith(self._skip):
            return  # torch's own call
        self._count(PREFIX + kind, 1)
        key = (kind, caller.f_code.co_filename, caller.f_lineno)
        seen = self._sites.get(key)
        if seen is not None:
            self._sites[key] = seen + 1
        elif len(self._sites) < MAX_SITES:
            self._sites[key] = 1
            self._info(INFO_SYNC_SITE, self._describe(kind, caller))

    def finish(self):
        """At exit: every site with its count."""
        if self._sites:
            self._info(INFO_SYNC_SITES, {KEY_SITES: [
                {KEY_KIND: k, KEY_FILE: f, KEY_LINE: n, KEY_COUNT: c}
                for (k, f, n), c in sorted(self._sites.items(), key=lambda kv: -kv[1])]})

    def after_fork_in_child(self):
        self._sites = {}

    def _describe(self, kind, frame):
        site = {KEY_KIND: kind, KEY_FILE: frame.f_code.co_filename, KEY_LINE: frame.f_lineno,
                KEY_FUNCTION: frame.f_code.co_name}
        if any(d in frame.f_code.co_filename for d in _LIBRARY_DIRS):
            user = frame.f_back
            while user is not None and (user.f_code.co_filename.startswith(self._skip) or any(
                    d in user.f_code.co_filename for d in _LIBRARY_DIRS)):
                user = user.f_back
            if user is not None:
                site[KEY_USER_FILE] = user.f_code.co_filename
                site[KEY_USER_LINE] = user.f_lineno
        return site


def patch_all(torch, patch, hit, compiling):
    """Wraps every counted call with auto's `patch(owner, attr, make_wrapper)`."""
    for method in TENSOR_METHODS:
        patch(torch.Tensor, method, counting(method, hit))
    copy = copying(hit, compiling)
    patch(torch.Tensor, "to", copy)
    patch(torch.Tensor, "cuda", copy)
    for fn in CUDA_FUNCTIONS:
        if callable(getattr(torch.cuda, fn, None)):
            patch(torch.cuda, fn, counting(fn, hit))


def counting(kind, hit):
    """A wrapper maker: `hit(kind)`, then the original (Tensor.item, torch.cuda.synchronize)."""
    def make(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            hit(kind)
            return original(*args, **kwargs)
        return wrapper
    return make


def copying(hit, compiling):
    """A wrapper maker for Tensor.to / .cuda: `hit("copy_h2d" | "copy_d2h")` when the result
    crossed host <-> GPU with non_blocking=False. `compiling()` true: straight through (first,
    so torch.compile folds it and traces the original alone)."""
    def make(original):
        @functools.wraps(original)
        def wrapper(self, *args, **kwargs):
            if compiling():
                return original(self, *args, **kwargs)
            result = original(self, *args, **kwargs)
            kind = copy_kind(self, result)
            if kind is not None and not non_blocking(args, kwargs):
                hit(kind)
            return result
        return wrapper
    return make


def non_blocking(args, kwargs):
    """The non_blocking argument of Tensor.to / .cuda: a keyword, else the first positional
    bool (to(device, dtype, non_blocking, copy), to(dtype, non_blocking, copy),
    to(other, non_blocking, copy), cuda(device, non_blocking))."""
    value = kwargs.get("non_blocking")
    if value is not None:
        return bool(value)
    for a in args:
        if isinstance(a, bool):
            return a
    return False


def copy_kind(source, result):
    """"copy_h2d" / "copy_d2h" when `result` is `source` moved across host <-> GPU, else None."""
    if result is source:
        return None
    src_cuda = source.is_cuda
    if src_cuda == getattr(result, "is_cuda", src_cuda):
        return None
    return SYNC_COPY_D2H if src_cuda else SYNC_COPY_H2D
