"""What the package does in a job under ``stallscope run`` (STALLSCOPE_RUN_DIR set), whoever
imported it: stallscope's sitecustomize at interpreter start, or the job itself (``import
stallscope`` from an installed copy, when the job's Python ignored PYTHONPATH).

1. ``start()``: notes this interpreter in ``$STALLSCOPE_RUN_DIR/python.jsonl`` (note "start":
   version, executable, argv, which recorder backend loaded or why none did, whether the hooks
   are on; stallscope/_notes.py writes it; auto.py adds the "hooks" note).
2. ``watch_imports()``, unless STALLSCOPE_AUTO is off (stallscope/_env.py): a post-import hook
   (stallscope/_imports.py) that calls back when the job imports torch, so ``auto.install()``
   patches it, and marks this package as the API whose step() auto watches. torch is never
   imported here: a job without torch pays one meta-path lookup per import, no more.

Nothing here may break the job: errors are swallowed and reported once on stderr with a
``[stallscope]`` prefix.
"""

import os
import sys

from . import _env, _notes
from ._imports import PostImportFinder
from ._protocol import (ENV_AUTO, ENV_RUN_DIR, KEY_ARGV, KEY_AUTO, KEY_EXECUTABLE, KEY_FLAGS,
                        KEY_IGNORE_ENVIRONMENT, KEY_IMPLEMENTATION, KEY_ISOLATED, KEY_NO_SITE,
                        KEY_PPID, KEY_PREFIX, KEY_PYTHON, KEY_SHIM, KEY_VENV, NOTE_START)

_TORCH = "torch"  # the module watched for


def interpreter():
    """This interpreter, for the start note."""
    impl = sys.implementation
    version = ".".join(str(v) for v in sys.version_info[:3])
    return {
        KEY_PPID: os.getppid(),
        KEY_PYTHON: version,
        KEY_IMPLEMENTATION: impl.name,
        KEY_EXECUTABLE: sys.executable,
        KEY_PREFIX: sys.prefix,
        KEY_VENV: sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        KEY_ARGV: list(getattr(sys, "orig_argv", None) or getattr(sys, "argv", None) or []),
        KEY_FLAGS: {
            KEY_IGNORE_ENVIRONMENT: bool(sys.flags.ignore_environment),
            KEY_ISOLATED: bool(getattr(sys.flags, "isolated", 0)),
            KEY_NO_SITE: bool(sys.flags.no_site),
        },
    }


def watch_imports(package):
    """Hooks torch (now if already imported, else when it is) and marks `package` as the API
    whose step() auto watches. Idempotent per process."""
    # Imported here, not at the top: a job under --no-auto never loads the hooks.
    from . import auto
    auto.track_user_steps(package)
    if any(isinstance(f, PostImportFinder) for f in sys.meta_path):
        return

    def on_torch(_module):
        auto.install(package)

    if _TORCH in sys.modules:
        on_torch(sys.modules[_TORCH])
    else:
        sys.meta_path.insert(0, PostImportFinder({_TORCH: on_torch}))


_started = False


def shim_ran():
    """True when stallscope's sitecustomize ran in this interpreter (PYTHONPATH was honoured)."""
    return bool(getattr(sys.modules.get("sitecustomize"), "_STALLSCOPE_SHIM", False))


def start(package):
    """Once per interpreter, under `stallscope run`: notes this interpreter (and the package's
    recorder status) and, unless STALLSCOPE_AUTO is off, watches for torch."""
    global _started
    if _started or not os.environ.get(ENV_RUN_DIR):
        return
    _started = True
    fields = interpreter()
    fields[KEY_SHIM] = shim_ran()
    status = getattr(package, "_recorder_status", None)
    if callable(status):
        try:
            fields.update(status())
        except Exception as e:
            _notes.report_startup_error("recorder status", e)
    hooks_on = fields[KEY_AUTO] = _env.flag(ENV_AUTO, True, say=_notes.say_once)
    _notes.note(NOTE_START, fields)
    if hooks_on:
        try:
            watch_imports(package)
        except Exception as e:
            _notes.report_startup_error("installing import hooks", e)
