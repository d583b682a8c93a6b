"""What the package says, and to whom: one `[stallscope]` line on stderr (say, say_once), and
one JSON note per event in ``$STALLSCOPE_RUN_DIR/python.jsonl`` (note), which the run report
reads to say which Pythons ran and, when a job records no phases, why. None of them ever raises:
nothing of ours may break the job.

A leaf: it imports only stallscope/_protocol.py (names, no code), so every other module may use
it without an import cycle.
"""

import json
import os
import sys
import time

from ._protocol import ENV_RUN_DIR, KEY_EVENT, KEY_PID, KEY_TS_NS, NOTES_FILE

_said = set()  # the keys say_once has said in this process


def say(text):
    """One `[stallscope]` line on stderr. Never raises."""
    try:
        sys.stderr.write(f"[stallscope] {text}\n")
        sys.stderr.flush()
    except Exception:
        pass


def say_once(text, key=None):
    """say(text), the first time `key` (default: the text itself) is said in this process.
    Returns True when it said it."""
    key = text if key is None else key
    if key in _said:
        return False
    _said.add(key)
    say(text)
    return True


def report_startup_error(where, exc):
    """Says once per process that the start-up (notes, import hooks) failed. Never raises."""
    say_once(f"startup hook error in {where}: {type(exc).__name__}: {exc}", key="startup")


def note(event, fields):
    """Appends one line, {ts_ns, pid, event, **fields}, to $STALLSCOPE_RUN_DIR/python.jsonl:
    one write on an O_APPEND descriptor, so lines of concurrent processes never interleave.
    Nothing outside `stallscope run`. Never raises."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return
    try:
        line = {KEY_TS_NS: time.monotonic_ns(), KEY_PID: os.getpid(), KEY_EVENT: event}
        line.update(fields)
        data = json.dumps(line, default=str, ensure_ascii=False, separators=(",", ":"))
        fd = os.open(os.path.join(run_dir, NOTES_FILE),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.write(fd, (data + "\n").encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
    except Exception as e:
        report_startup_error(f"writing {NOTES_FILE}", e)


def main_process():
    """False in a multiprocessing child (a spawn/forkserver DataLoader worker re-installs the
    hooks): such a child does not repeat what the main process said at install."""
    try:
        import multiprocessing
        return multiprocessing.current_process().name == "MainProcess"
    except Exception:
        return True
