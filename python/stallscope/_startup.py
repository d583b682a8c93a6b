"""What the package does in a job under ``stallscope run`` (STALLSCOPE_RUN_DIR set), whoever
imported it: stallscope's sitecustomize at interpreter start, or the job itself (``import
stallscope`` from an installed copy, when the job's Python ignored PYTHONPATH).

1. ``note()``: one JSON line per event in ``$STALLSCOPE_RUN_DIR/python.jsonl`` (one ``write`` on
   an O_APPEND descriptor, so lines of concurrent processes never interleave). Events: ``start``
   (this interpreter: version, executable, argv, which recorder backend loaded or why none did)
   and ``hooks`` (auto.py: torch version and how each phase is measured, or why not). The report
   reads them to say which Pythons ran and, when a job records no phases, why.
2. ``watch_imports()``: a post-import hook that calls back when the job imports torch (so
   ``auto.install()`` patches it) and when it imports this package (so ``auto`` sees whether the
   job marks its own steps). torch is never imported here: a job without torch pays one
   meta-path lookup per import, no more.

Nothing here may break the job: errors are swallowed and reported once on stderr with a
``[stallscope]`` prefix.
"""

import json
import os
import sys
import time

NOTES_FILE = "python.jsonl"
_RUN_DIR_ENV = "STALLSCOPE_RUN_DIR"

_reported = False


def report(where, exc):
    """Says once on stderr that something of ours failed. Never raises."""
    global _reported
    if _reported:
        return
    _reported = True
    try:
        sys.stderr.write(f"[stallscope] startup hook error in {where}: "
                         f"{type(exc).__name__}: {exc}\n")
    except Exception:
        pass


def note(event, **fields):
    """Appends one line to $STALLSCOPE_RUN_DIR/python.jsonl. Never raises."""
    run_dir = os.environ.get(_RUN_DIR_ENV)
    if not run_dir:
        return
    try:
        line = {"ts_ns": time.monotonic_ns(), "pid": os.getpid(), "event": event}
        line.update(fields)
        data = json.dumps(line, default=str, ensure_ascii=False, separators=(",", ":"))
        fd = os.open(os.path.join(run_dir, NOTES_FILE),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.write(fd, (data + "\n").encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
    except Exception as e:
        report("writing python.jsonl", e)


def interpreter():
    """This interpreter, for the start note."""
    impl = sys.implementation
    version = ".".join(str(v) for v in sys.version_info[:3])
    return {
        "ppid": os.getppid(),
        "python": version,
        "implementation": impl.name,
        "executable": sys.executable,
        "prefix": sys.prefix,
        "venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        "argv": list(getattr(sys, "orig_argv", None) or getattr(sys, "argv", None) or []),
        "flags": {
            "ignore_environment": bool(sys.flags.ignore_environment),
            "isolated": bool(getattr(sys.flags, "isolated", 0)),
            "no_site": bool(sys.flags.no_site),
        },
    }


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
            report(f"import hook for {fullname}", e)
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
                report(f"hook after importing {fullname}", e)


def _on_torch(_module):
    from . import auto
    auto.install()


def watch_imports(package):
    """Hooks torch (now if already imported, else when it is) and marks `package` as the API
    whose step() auto watches. Idempotent per process."""
    from . import auto
    auto.track_user_steps(package)
    if any(isinstance(f, PostImportFinder) for f in sys.meta_path):
        return
    if "torch" in sys.modules:
        _on_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, PostImportFinder({"torch": _on_torch}))


_started = False


def shim_ran():
    """True when stallscope's sitecustomize ran in this interpreter (PYTHONPATH was honoured)."""
    return bool(getattr(sys.modules.get("sitecustomize"), "_STALLSCOPE_SHIM", False))


def start(package):
    """Once per interpreter, under `stallscope run`: notes this interpreter (and the package's
    recorder status) and, unless STALLSCOPE_AUTO=0, watches for torch."""
    global _started
    if _started or not os.environ.get(_RUN_DIR_ENV):
        return
    _started = True
    fields = interpreter()
    fields["shim"] = shim_ran()
    status = getattr(package, "_recorder_status", None)
    if callable(status):
        try:
            fields.update(status())
        except Exception as e:
            report("recorder status", e)
    fields["auto"] = os.environ.get("STALLSCOPE_AUTO", "1") != "0"
    note("start", **fields)
    if fields["auto"]:
        try:
            watch_imports(package)
        except Exception as e:
            report("installing import hooks", e)
