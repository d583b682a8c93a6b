"""stallscope's startup shim. `stallscope run` puts this directory first on PYTHONPATH, so
Python's `site` imports this file at interpreter start in the job and in every Python process
it starts (DataLoader workers, torchrun children).

It does two things:
1. Always: runs the sitecustomize this file shadows (the next one on sys.path, e.g. Debian's
   /usr/lib/python3.X/sitecustomize.py), so the job starts exactly as it would without us.
2. Only when STALLSCOPE_RUN_DIR is set and the flag STALLSCOPE_AUTO is not off (`--no-auto` sets
   it to 0; stallscope/_env.py reads it, the package's one flag reader, loaded by its path so
   that --no-auto never imports the package): imports the stallscope package and calls
   stallscope._startup.start(), which notes this interpreter in $STALLSCOPE_RUN_DIR/python.jsonl
   (version, executable, whether the recorder loaded) and installs a post-import hook: when the
   job imports torch, stallscope.auto.install() patches it. torch is never imported here.

Nothing here may break the job: every error is swallowed and reported once on stderr with a
`[stallscope]` prefix.
"""

_STALLSCOPE_SHIM = True  # stallscope._startup.shim_ran(): this interpreter ran the shim

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


def _auto_on():
    """The flag STALLSCOPE_AUTO (default on), read by stallscope/_env.py next to this file."""
    import importlib.util

    path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "stallscope", "_env.py")
    spec = importlib.util.spec_from_file_location("_stallscope_env", path)
    env = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(env)
    return env.flag("STALLSCOPE_AUTO", True)


def _start():
    import stallscope
    from stallscope import _startup
    _startup.start(stallscope)


try:
    _chained_sitecustomize = _chain_next_sitecustomize()
except Exception as _e:
    _chained_sitecustomize = None
    _report("chaining sitecustomize", _e)

if _os.environ.get("STALLSCOPE_RUN_DIR"):
    try:
        if _auto_on():
            _start()
    except Exception as _e:
        _report("starting stallscope", _e)
