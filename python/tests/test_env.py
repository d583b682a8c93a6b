"""Tests for the package's one reader of its STALLSCOPE_* flags (python/stallscope/_env.py) and
for each flag read through it: STALLSCOPE_AUTO (python/sitecustomize.py and
stallscope/_startup.py), STALLSCOPE_GPU_TIME (_cuda.py), STALLSCOPE_PROFILE (__init__.py);
STALLSCOPE_SIDE_WORK_OFF's are in test_experiment.py. No torch needed: runs in every interpreter.

    PYTHONPATH=build/python python3 -m unittest -v test_env            (cwd: python/tests)
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import types
import unittest
import unittest.mock

from test_auto import PYTHON_DIR, SubprocessBase, torch  # noqa: E402  (puts python/ on sys.path)
from stallscope import _cuda, _env, _notes, _protocol  # noqa: E402

ON = ["1", "true", "yes", "on", "TRUE", "True", "Yes", "ON", "oN", " 1", "yes ", "\ton\n",
      "  TRUE  "]
OFF = ["0", "false", "no", "off", "FALSE", "False", "No", "OFF", "oFf", " 0", "no ", "\toff\n",
       "  FALSE  "]
BLANK = [None, "", " ", "\t\n"]
NOT_FLAGS = ["2", "-1", "00", "01", "y", "n", "t", "f", "enable", "disabled", "truee", "o n",
             "0x1", "none", "null", "1.0", "yes please", "\u0661"]  # the last: Arabic-Indic one

# Each flag and its default (what an unset, blank or unrecognised value means).
DEFAULTS = {_protocol.ENV_AUTO: True, _protocol.ENV_GPU_TIME: True,
            _protocol.ENV_PROFILE: False, _protocol.ENV_SIDE_WORK_OFF: False}


class ParseFlagTest(unittest.TestCase):
    def test_every_spelling(self):
        for text in ON:
            with self.subTest(text=text):
                self.assertIs(_env.parse_flag(text), True)
        for text in OFF:
            with self.subTest(text=text):
                self.assertIs(_env.parse_flag(text), False)
        for text in BLANK:
            with self.subTest(text=text):
                self.assertIsNone(_env.parse_flag(text))
        for text in NOT_FLAGS:
            with self.subTest(text=text):
                with self.assertRaisesRegex(ValueError, "not a flag"):
                    _env.parse_flag(text)

    def test_the_error_names_every_spelling(self):
        for word in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            self.assertIn(word, _env.NOT_A_FLAG)

    def test_the_flags_are_the_declared_ones(self):
        self.assertEqual(sorted(DEFAULTS), sorted(_protocol.ENV_FLAGS))


class FlagTest(unittest.TestCase):
    def flag(self, name, text, default):
        said = []
        environ = {} if text is None else {name: text}
        return _env.flag(name, default, environ, say=said.append), said

    def test_on_off_and_blank(self):
        for name, default in DEFAULTS.items():
            for texts, want in ((ON, True), (OFF, False), (BLANK, default)):
                for text in texts:
                    with self.subTest(name=name, text=text):
                        self.assertEqual(self.flag(name, text, default), (want, []))

    def test_an_unrecognised_value_is_the_default_and_said(self):
        for name, default in DEFAULTS.items():
            for text in NOT_FLAGS:
                with self.subTest(name=name, text=text):
                    value, said = self.flag(name, text, default)
                    self.assertIs(value, default)
                    self.assertEqual(len(said), 1, said)
                    self.assertTrue(said[0].startswith(f"{name}={text!r} ignored: not a flag"),
                                    said)
                    self.assertTrue(said[0].endswith(
                        "; on (its default)" if default else "; off (its default)"), said)

    def test_without_say_nothing_is_said(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertTrue(_env.flag("X", True, {"X": "maybe"}))
        self.assertEqual(err.getvalue(), "")

    def test_reads_os_environ_by_default(self):
        with unittest.mock.patch.dict(os.environ, {"STALLSCOPE_TEST_FLAG": " Off "}):
            self.assertFalse(_env.flag("STALLSCOPE_TEST_FLAG", True))

    def test_say_once_says_a_value_once(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            for _ in range(3):
                _env.flag("STALLSCOPE_TEST_ONCE", False, {"STALLSCOPE_TEST_ONCE": "2"},
                          say=_notes.say_once)
        self.assertEqual(err.getvalue().count("\n"), 1, err.getvalue())
        self.assertTrue(err.getvalue().startswith("[stallscope] STALLSCOPE_TEST_ONCE='2' ignored"))

    def test_numbers(self):
        for text, want in (("5", 5), (" 7 ", 7), ("0", 100), ("-3", 100), ("x", 100), ("", 100)):
            with self.subTest(text=text):
                self.assertEqual(_env.positive_int("N", 100, {"N": text}), want)
        self.assertEqual(_env.positive_int("N", 100, {}), 100)
        for environ, want in (({"N": "-2"}, -2), ({"N": "3"}, 3), ({"N": "x"}, None), ({}, None)):
            with self.subTest(environ=environ):
                self.assertEqual(_env.optional_int("N", environ), want)


class GpuTimeFlagTest(unittest.TestCase):
    """STALLSCOPE_GPU_TIME, on a stand-in torch that could time the GPU."""

    TORCH = types.SimpleNamespace(version=types.SimpleNamespace(cuda="12.1"),
                                  cuda=types.SimpleNamespace(Event=object,
                                                             is_initialized=lambda: False))
    API = types.SimpleNamespace(_gpu_span=lambda *a: None)

    def why_not(self, text):
        env = {k: v for k, v in os.environ.items() if k != _protocol.ENV_GPU_TIME}
        if text is not None:
            env[_protocol.ENV_GPU_TIME] = text
        err = io.StringIO()
        with unittest.mock.patch.dict(os.environ, env, clear=True), \
                contextlib.redirect_stderr(err):
            return _cuda.why_not(self.TORCH, self.API), err.getvalue()

    def test_off_spellings_turn_it_off(self):
        for text in OFF:
            with self.subTest(text=text):
                self.assertEqual(self.why_not(text),
                                 (f"STALLSCOPE_GPU_TIME={text.strip()}", ""))

    def test_on_blank_and_unrecognised_leave_it_on(self):
        for text in ON + BLANK:
            with self.subTest(text=text):
                self.assertEqual(self.why_not(text), (None, ""))
        reason, said = self.why_not("sometimes")
        self.assertIsNone(reason)
        self.assertIn("[stallscope] STALLSCOPE_GPU_TIME='sometimes' ignored: not a flag", said)


class ProfileFlagTest(unittest.TestCase):
    """STALLSCOPE_PROFILE outside `stallscope run`, in a fresh interpreter with the package the
    environment's PYTHONPATH gives (the build tree's, under CTest)."""

    def enabled(self, text):
        env = {k: v for k, v in os.environ.items() if not k.startswith("STALLSCOPE_")
               or k == _protocol.ENV_BACKEND}
        env[_protocol.ENV_PROFILE] = text
        proc = subprocess.run(
            [sys.executable, "-c", "import stallscope; print(stallscope.enabled())"],
            env=env, capture_output=True, text=True, timeout=60, check=False)
        if "No module named 'stallscope'" in proc.stderr:
            self.skipTest("the package is not on PYTHONPATH (run with PYTHONPATH=build/python)")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout.strip(), proc.stderr

    def test_every_spelling(self):
        if self.enabled("1")[0] != "True":
            self.skipTest("the recorder does not load here (run with PYTHONPATH=build/python)")
        for text in ("yes", " ON ", "True"):
            with self.subTest(text=text):
                self.assertEqual(self.enabled(text), ("True", ""))
        for text in ("no", " OFF ", "False", "0", ""):
            with self.subTest(text=text):
                self.assertEqual(self.enabled(text), ("False", ""))
        out, err = self.enabled("2")  # was on before the one reader: now its default, off
        self.assertEqual(out, "False")
        self.assertIn("[stallscope] STALLSCOPE_PROFILE='2' ignored: not a flag", err)


class AutoFlagTest(SubprocessBase):
    """STALLSCOPE_AUTO in real interpreters with the startup shim (test_auto's stand-in package
    in front of the real one), as `stallscope run` starts them."""

    PROBE = ("import sys; print('stallscope' in sys.modules,"
             " any(type(f).__name__ == 'PostImportFinder' for f in sys.meta_path))")
    TORCH_PROBE = ("import sys, torch; print(hasattr(torch.Tensor.backward, '_stallscope_auto'),"
                   " 'stallscope' in sys.modules,"
                   " any(type(f).__name__ == 'PostImportFinder' for f in sys.meta_path))")

    def test_off_spellings_never_import_the_package(self):
        for text in ("false", "FALSE", " no ", "off", "0"):
            with self.subTest(text=text):
                result = self.run_py(self.PROBE, STALLSCOPE_AUTO=text)
                self.assertEqual((result.stdout.split(), result.stderr), (["False", "False"], ""))

    def test_on_spellings_watch_for_torch(self):
        for text in ("true", " Yes ", "ON", "1", ""):
            with self.subTest(text=text):
                result = self.run_py(self.PROBE, STALLSCOPE_AUTO=text)
                self.assertEqual((result.stdout.split(), result.stderr), (["True", "True"], ""))

    def test_an_unrecognised_value_is_on_and_said_once(self):
        result = self.run_py(self.PROBE, STALLSCOPE_AUTO="maybe")
        self.assertEqual(result.stdout.split(), ["True", "True"])
        self.assertEqual(result.stderr, "[stallscope] STALLSCOPE_AUTO='maybe' ignored: "
                         f"{_env.NOT_A_FLAG}; on (its default)\n")

    @unittest.skipIf(torch is None, "needs torch (use /usr/bin/python3)")
    def test_false_installs_no_hooks(self):
        off = self.run_py(self.TORCH_PROBE, STALLSCOPE_AUTO="false")
        self.assertEqual(off.stdout.split(), ["False", "False", "False"], off.stderr)
        on = self.run_py(self.TORCH_PROBE, STALLSCOPE_AUTO="true")
        self.assertEqual(on.stdout.split(), ["True", "True", "False"], on.stderr)

    def test_a_job_that_imports_the_package_itself_is_noted_without_hooks(self):
        """The job's own `import stallscope` (an installed copy) starts the package: the start
        note says auto is off, and nothing watches for torch."""
        code = ("import sys, stallscope; from stallscope import _startup;"
                " _startup.start(stallscope);"
                " print(any(type(f).__name__ == 'PostImportFinder' for f in sys.meta_path))")
        result = self.run_py(code, STALLSCOPE_AUTO="Off")
        self.assertEqual((result.stdout.split(), result.stderr), (["False"], ""))
        with open(os.path.join(self.run_dir, _protocol.NOTES_FILE)) as f:
            notes = [json.loads(line) for line in f]
        self.assertEqual([(n["event"], n["auto"]) for n in notes], [("start", False)])

    def test_the_shim_reads_the_flag_with_the_packages_reader(self):
        with open(os.path.join(PYTHON_DIR, "sitecustomize.py")) as f:
            shim = f.read()
        self.assertIn('"stallscope", "_env.py"', shim)
        self.assertIn(f'env.flag("{_protocol.ENV_AUTO}", True)', shim)
        self.assertNotIn('!= "0"', shim)


if __name__ == "__main__":
    unittest.main()
