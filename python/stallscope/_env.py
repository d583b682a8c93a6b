"""The one reader of the package's STALLSCOPE_* flags (and its environment numbers).

A flag's value, case-insensitive and with surrounding whitespace stripped:

  1, true, yes, on      on
  0, false, no, off     off
  unset or blank        the flag's default
  anything else         the flag's default too, and said once per process and variable on
                        stderr: "[stallscope] STALLSCOPE_X='maybe' ignored: not a flag ...; on
                        (its default)" (an experiment control says it its own way,
                        stallscope/_experiment.py)

So an unrecognised value never turns on what is off by default, nor off what is on. The flags
(stallscope/_protocol.py ENV_FLAGS): STALLSCOPE_AUTO (default on), STALLSCOPE_GPU_TIME (on),
STALLSCOPE_PROFILE (off), STALLSCOPE_SIDE_WORK_OFF (off).

Imports nothing: python/sitecustomize.py loads this file by its path to read STALLSCOPE_AUTO
before deciding whether to import the package at all.
"""

import os

FLAG_ON = ("1", "true", "yes", "on")
FLAG_OFF = ("0", "false", "no", "off")
NOT_A_FLAG = "not a flag (on: " + ", ".join(FLAG_ON) + "; off: " + ", ".join(FLAG_OFF) + ")"


def parse_flag(text):
    """True or False for a flag's text; None when it is None or blank. Raises ValueError
    (NOT_A_FLAG) for any other text."""
    if text is None:
        return None
    word = text.strip().lower()
    if not word:
        return None
    if word in FLAG_ON:
        return True
    if word in FLAG_OFF:
        return False
    raise ValueError(NOT_A_FLAG)


def flag(name, default, environ=None, say=None):
    """Flag `name` of `environ` (os.environ): parse_flag's value, else `default`. An unrecognised
    value is passed to say(text) when given (the package passes _notes.say_once)."""
    text = (os.environ if environ is None else environ).get(name)
    try:
        value = parse_flag(text)
    except ValueError as e:
        if say is not None:
            say(f"{name}={text!r} ignored: {e}; {'on' if default else 'off'} (its default)")
        return default
    return default if value is None else value


def positive_int(name, default, environ=None):
    """Environment number `name` when it is an integer >= 1, else `default`."""
    try:
        value = int((os.environ if environ is None else environ).get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def optional_int(name, environ=None):
    """Environment number `name` as an int, or None when unset or not an integer."""
    try:
        return int((os.environ if environ is None else environ)[name])
    except (KeyError, ValueError):
        return None
