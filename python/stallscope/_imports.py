"""A post-import hook: a meta-path finder that calls back once a watched module has been
imported (stallscope/_startup.py watches torch with it, stallscope/_life.py torch._dynamo's
callback module). It never imports a watched module itself: a job that never imports one pays
one meta-path lookup per import, no more. A callback's error is said once on stderr.
"""

import sys

from ._notes import report_startup_error


class PostImportFinder:
    """A meta-path finder that finds nothing itself: for a watched module it asks the other
    finders for the spec, and makes the loader call our callback once the module has executed
    successfully. The loader object and the module's __spec__/__loader__ stay the real ones
    (the wrapper is an instance attribute removed again right after exec)."""

    def __init__(self, callbacks):
        self._callbacks = dict(callbacks)
        self._busy = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self._callbacks or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            if spec is not None and spec.loader is not None:
                self._hook_loader(fullname, spec.loader)
            return spec
        except Exception as e:
            report_startup_error(f"import hook for {fullname}", e)
            return None
        finally:
            self._busy.discard(fullname)

    def _hook_loader(self, fullname, loader):
        original = getattr(loader, "exec_module", None)
        if original is None:
            return
        had_own = "exec_module" in getattr(loader, "__dict__", {})

        def exec_module(module):
            try:
                original(module)
            finally:
                try:
                    if had_own:
                        loader.exec_module = original
                    else:
                        del loader.exec_module
                except Exception:
                    pass
            self._fire(fullname, module)

        loader.exec_module = exec_module

    def _fire(self, fullname, module):
        callback = self._callbacks.pop(fullname, None)
        if not self._callbacks:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
        if callback is not None:
            try:
                callback(module)
            except Exception as e:
                report_startup_error(f"hook after importing {fullname}", e)
