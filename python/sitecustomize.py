"""stallscope's startup shim. `stallscope run` puts this directory first on PYTHONPATH, so
Python's `site` imports this file at interpreter start in the job and in every Python process
it starts (DataLoader workers, torchrun children).

It does two things:
1. Always: runs the sitecustomize this file shadows (the next one on sys.path, e.g. Debian's
   /usr/lib/python3.X/sitecustomize.py), so the job starts exactly as it would without us.
2. Only when STALLSCOPE_RUN_DIR is set and STALLSCOPE_AUTO is not "0" (`--no-auto`): installs a
   post-import hook. When the job imports torch, stallscope.auto.install() patches it; when it
   imports stallscope, auto.track_user_steps() notes whether the job marks its own steps. torch
   is never imported here: a job without torch pays one meta-path lookup per import, no more.

Nothing here may break the job: every error is swallowed and reported once on stderr with a
`[stallscope]` prefix.
"""

import os as _os
import sys as _sys

_reported = False


def _report(where, exc):
    global _reported
    if _reported:
        return
    _reported = True
    try:
        _sys.stderr.write(f"[stallscope] startup hook error in {where}: "
                          f"{type(exc).__name__}: {exc}\n")
    except Exception:
        pass


def _real(path):
    try:
        return _os.path.realpath(path or _os.curdir)
    except Exception:
        return None


def _chain_next_sitecustomize():
    """Finds the sitecustomize that ours shadows (the next one on sys.path after our directory)
    and executes it as `site` would have, including site's message on error."""
    import importlib.machinery
    import importlib.util

    here_file = _real(__file__)
    here = _os.path.dirname(here_file)
    entries = [_real(p) for p in _sys.path]
    after = _sys.path
    if here in entries:
        after = _sys.path[entries.index(here) + 1:]
    after = [p for p in after if _real(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is None or spec.loader is None or _real(spec.origin) == here_file:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # what site.execsitecustomize does
        if _sys.flags.verbose:
            _sys.excepthook(*_sys.exc_info())
        else:
            _sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                              f"{err.__class__.__name__}: {err}\n")
    return module


class _PostImportFinder:
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
            for finder in _sys.meta_path:
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
            _report(f"import hook for {fullname}", e)
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
                _sys.meta_path.remove(self)
            except ValueError:
                pass
        if callback is not None:
            try:
                callback(module)
            except Exception as e:
                _report(f"hook after importing {fullname}", e)


def _on_torch(_module):
    from stallscope import auto
    auto.install()


def _on_stallscope(module):
    from stallscope import auto
    auto.track_user_steps(module)


def _install_import_hooks():
    callbacks = {"torch": _on_torch, "stallscope": _on_stallscope}
    for name in list(callbacks):
        if name in _sys.modules:  # imported before site ran (unusual): hook it right away
            try:
                callbacks.pop(name)(_sys.modules[name])
            except Exception as e:
                _report(f"hook for {name}", e)
    if callbacks:
        _sys.meta_path.insert(0, _PostImportFinder(callbacks))


try:
    _chained_sitecustomize = _chain_next_sitecustomize()
except Exception as _e:
    _chained_sitecustomize = None
    _report("chaining sitecustomize", _e)

if _os.environ.get("STALLSCOPE_RUN_DIR") and _os.environ.get("STALLSCOPE_AUTO", "1") != "0":
    try:
        _install_import_hooks()
    except Exception as _e:
        _report("installing import hooks", _e)
