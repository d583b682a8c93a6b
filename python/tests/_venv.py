"""What the wheel tests (test_wheel.py, test_platform_wheel.py) share: an environment that
points nowhere else, RECORD's hash, and a fresh venv of this interpreter with a wheel installed
offline, as a user installs it. Not a test module (no test_ prefix): CTest runs none of it."""

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest


def clean_env(**extra):
    """This environment without anything that would point Python or pip elsewhere (PYTHON*,
    PIP_*, VIRTUAL_ENV) or switch stallscope on (STALLSCOPE_*)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PIP_", "STALLSCOPE_", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def record_hash(data):
    """RECORD's hash field: sha256, urlsafe base64 without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def require_venv_support():
    """SkipTest unless this interpreter can make a venv with pip."""
    for module in ("venv", "ensurepip"):
        if importlib.util.find_spec(module) is None:
            raise unittest.SkipTest(f"{sys.executable} has no {module} module, so `-m venv` "
                                    "cannot make a venv with pip (Debian: python3-venv)")


def make_venv(venv, home, system_site_packages=False):
    """A fresh venv of this interpreter at `venv` (SkipTest when venv fails); its python."""
    argv = [sys.executable, "-m", "venv", venv]
    if system_site_packages:
        argv.append("--system-site-packages")
    proc = subprocess.run(argv, env=clean_env(HOME=home), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=180,
                          check=False)
    if proc.returncode != 0:
        why = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise unittest.SkipTest(f"`{sys.executable} -m venv` failed: {why}")
    return os.path.join(venv, "bin", "python")


def pip_install(python, wheel, home):
    """`pip install --no-index` of `wheel` into the venv of `python` (AssertionError on failure)."""
    proc = subprocess.run(
        [python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir",
         "--disable-pip-version-check", wheel],
        env=clean_env(HOME=home, PIP_NO_INPUT="1", PIP_ROOT_USER_ACTION="ignore"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=180,
        check=False)
    if proc.returncode != 0:
        raise AssertionError(f"pip install exit {proc.returncode}:\n{proc.stdout}")


class VenvTestCase(unittest.TestCase):
    """A class-wide temporary `cls.dir` (prefix DIR_PREFIX) filled by the subclass's
    `_install()` once; removed when the install fails and after the class's tests."""

    DIR_PREFIX = "stallscope-venv-"

    @classmethod
    def setUpClass(cls):
        require_venv_support()
        cls.dir = tempfile.mkdtemp(prefix=cls.DIR_PREFIX)
        try:
            cls._install()
        except BaseException:
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
