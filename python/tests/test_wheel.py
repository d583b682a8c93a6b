"""Tests of the installable wheel (python/make_wheel.py, `make wheel`): its contents, that it is
reproducible, and that it installs offline into a fresh venv where the package behaves as it does
from the build tree: a no-op outside `stallscope run`, standalone summaries with
STALLSCOPE_PROFILE=1, and a recorder under `stallscope run` even when the job's Python ignores
PYTHONPATH (-I), so that stallscope's shim does not run.

Run from the build tree with any CPython >= 3.8 (CTest runs it under every interpreter it finds,
with STALLSCOPE_BIN set to the stallscope binary; without it the `run` cases are skipped):
    PYTHONPATH=build/python STALLSCOPE_BIN=build/stallscope python3 -m unittest -v test_wheel
                                                                            (cwd: python/tests)
The wheel is built from the package this interpreter imports (build/python/stallscope).
"""

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
import zipfile

import stallscope
from _venv import VenvTestCase, clean_env, make_venv, pip_install, record_hash

PACKAGE_DIR = os.path.dirname(os.path.abspath(stallscope.__file__))
MAKE_WHEEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "make_wheel.py")
MAKE_WHEEL = os.path.normpath(MAKE_WHEEL)
STALLSCOPE_BIN = os.environ.get("STALLSCOPE_BIN") or None
LIBRARY = "libstallscope_rec.so"
DIST_INFO = f"stallscope-{stallscope.__version__}.dist-info"

#: A small job: a decorated phase, a `with` phase, counters, steps and a mark. Its output must be
#: the same with and without stallscope: JOB_STDOUT and JOB_STDERR are what it prints with the
#: stallscope calls removed.
JOB = textwrap.dedent(
    """
    import sys
    import stallscope

    @stallscope.phase("compute")
    def compute(i):
        return i * i

    total = 0
    for i in range(12):
        with stallscope.phase("data"):
            batch = list(range(i))
        total += compute(i) + sum(batch)
        stallscope.count("items", len(batch))
        stallscope.step()
    stallscope.mark("done", total=total)
    print("total", total)
    print("job done", file=sys.stderr)
    """)
JOB_STEPS = 12
JOB_STDOUT = "total %d\n" % sum(i * i + sum(range(i)) for i in range(JOB_STEPS))
JOB_STDERR = "job done\n"

#: What the installed package says about itself, as one JSON line.
PROBE = textwrap.dedent(
    """
    import json, os, sysconfig
    import stallscope
    try:
        from importlib.metadata import version
        dist_version = version("stallscope")
    except Exception as e:
        dist_version = repr(e)
    print(json.dumps({
        "file": os.path.realpath(stallscope.__file__),
        "version": stallscope.__version__,
        "dist_version": dist_version,
        "backend": stallscope.backend(),
        "enabled": stallscope.enabled(),
        "package_files": sorted(os.listdir(os.path.dirname(stallscope.__file__))),
        "site_packages": sorted(set(os.listdir(sysconfig.get_paths()["purelib"]))
                                | set(os.listdir(sysconfig.get_paths()["platlib"]))),
    }))
    """)


def make_wheel(out_dir, *args, package=PACKAGE_DIR):
    """Runs make_wheel.py under this interpreter; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, MAKE_WHEEL, "--package", package, "--out", out_dir] + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
        check=False)


def built_wheel(out_dir):
    """Builds the wheel into out_dir; returns its path (fails the test on error)."""
    proc = make_wheel(out_dir)
    if proc.returncode != 0:
        raise AssertionError(f"make_wheel.py exit {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    wheels = [n for n in os.listdir(out_dir) if n.endswith(".whl")]
    if len(wheels) != 1:
        raise AssertionError(f"expected one wheel in {out_dir}, found {wheels}")
    return os.path.join(out_dir, wheels[0])


class WheelBuildTest(unittest.TestCase):
    """The wheel file itself (no venv needed)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="stallscope-wheel-test-")
        cls.wheel = built_wheel(os.path.join(cls.dir, "dist"))
        with open(cls.wheel, "rb") as f:
            cls.data = f.read()
        cls.zip = zipfile.ZipFile(io.BytesIO(cls.data))

    @classmethod
    def tearDownClass(cls):
        cls.zip.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_name_and_tags(self):
        import platform
        machine = platform.machine().lower().replace("-", "_").replace(".", "_")
        tag = f"py3-none-linux_{machine}"
        self.assertEqual(os.path.basename(self.wheel),
                         f"stallscope-{stallscope.__version__}-{tag}.whl")
        wheel = self.zip.read(f"{DIST_INFO}/WHEEL").decode()
        self.assertEqual(wheel.splitlines(), [
            "Wheel-Version: 1.0", "Generator: stallscope make_wheel.py",
            "Root-Is-Purelib: false", f"Tag: {tag}"])
        metadata = self.zip.read(f"{DIST_INFO}/METADATA").decode().splitlines()
        self.assertEqual(metadata[:3], ["Metadata-Version: 2.1", "Name: stallscope",
                                        f"Version: {stallscope.__version__}"])
        self.assertIn("Requires-Python: >=3.8", metadata)
        self.assertTrue(any(line.startswith("Summary: ") for line in metadata), metadata)

    def test_files_are_the_python_sources_and_the_c_library_only(self):
        sources = sorted(n for n in os.listdir(PACKAGE_DIR) if n.endswith(".py"))
        expected = [f"stallscope/{n}" for n in sources] + [f"stallscope/{LIBRARY}"]
        expected = sorted(expected) + [f"{DIST_INFO}/{n}" for n in ("METADATA", "WHEEL", "RECORD")]
        names = self.zip.namelist()
        self.assertEqual(names, expected, "sorted package files, then the dist-info, RECORD last")
        self.assertFalse([n for n in names if "_core" in n],
                         "the extension is interpreter-specific")
        self.assertFalse([n for n in names if "sitecustomize" in n],
                         "an installed sitecustomize would hijack the user's environment")
        for info in self.zip.infolist():
            mode = (info.external_attr >> 16) & 0o777
            self.assertEqual(mode, 0o755 if info.filename.endswith(".so") else 0o644, info.filename)
            self.assertEqual(info.date_time, (1980, 1, 1, 0, 0, 0), info.filename)
        for name in sources:
            with open(os.path.join(PACKAGE_DIR, name), "rb") as f:
                self.assertEqual(self.zip.read(f"stallscope/{name}"), f.read(), name)

    def test_library_is_stripped_of_debug_info(self):
        if not (shutil.which("objcopy") or shutil.which("strip")):
            self.skipTest("no objcopy or strip: the library is copied as is")
        lib = self.zip.read(f"stallscope/{LIBRARY}")
        self.assertEqual(lib[:4], b"\x7fELF")
        self.assertNotIn(b".debug_info", lib, "section names of debug info are gone")
        self.assertLessEqual(len(lib), os.path.getsize(os.path.join(PACKAGE_DIR, LIBRARY)))

    def test_record_lists_every_file_with_its_hash_and_size(self):
        rows = list(csv.reader(io.StringIO(self.zip.read(f"{DIST_INFO}/RECORD").decode())))
        self.assertEqual(sorted(r[0] for r in rows), sorted(self.zip.namelist()))
        for name, digest, size in rows:
            if name == f"{DIST_INFO}/RECORD":
                self.assertEqual((digest, size), ("", ""))
                continue
            data = self.zip.read(name)
            self.assertEqual((digest, size), (record_hash(data), str(len(data))), name)

    def test_rebuild_is_byte_identical_and_leaves_an_identical_wheel_alone(self):
        other = os.path.join(self.dir, "again")
        with open(built_wheel(other), "rb") as f:
            self.assertEqual(f.read(), self.data, "same inputs, same bytes")
        proc = make_wheel(os.path.dirname(self.wheel))  # no --force: nothing would change
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("unchanged", proc.stdout)

    def test_a_different_existing_wheel_is_replaced_only_with_force(self):
        out = os.path.join(self.dir, "owned")
        os.makedirs(out)
        target = os.path.join(out, os.path.basename(self.wheel))
        with open(target, "wb") as f:
            f.write(b"the user's file")
        proc = make_wheel(out)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn(target, proc.stderr)
        self.assertIn("--force", proc.stderr)
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"the user's file")
        proc = make_wheel(out, "--force")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(target, "rb") as f:
            self.assertEqual(f.read(), self.data)
        self.assertEqual(os.listdir(out), [os.path.basename(self.wheel)], "no temp files left")

    def test_missing_package_or_library_is_a_one_line_error(self):
        missing = os.path.join(self.dir, "no-such-dir")
        proc = make_wheel(os.path.join(self.dir, "out1"), package=missing)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn(f"{missing}: no such package directory", proc.stderr)

        bare = os.path.join(self.dir, "bare", "stallscope")
        os.makedirs(bare)
        shutil.copy(os.path.join(PACKAGE_DIR, "__init__.py"), bare)
        proc = make_wheel(os.path.join(self.dir, "out2"), package=bare)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertIn(bare, proc.stderr)
        self.assertIn(LIBRARY, proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out1")))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out2")))


class InstalledWheelTest(VenvTestCase):
    """The wheel installed offline (pip --no-index) into a fresh venv of this interpreter."""

    DIR_PREFIX = "stallscope-venv-test-"

    @classmethod
    def _install(cls):
        cls.wheel = built_wheel(os.path.join(cls.dir, "dist"))
        cls.venv = os.path.join(cls.dir, "venv")
        home = os.path.join(cls.dir, "home")
        os.makedirs(home)
        cls.python = make_venv(cls.venv, home)
        pip_install(cls.python, cls.wheel, home)
        cls.job = os.path.join(cls.dir, "job.py")
        with open(cls.job, "w") as f:
            f.write(JOB)
        cls.probe = os.path.join(cls.dir, "probe.py")
        with open(cls.probe, "w") as f:
            f.write(PROBE)

    def setUp(self):
        # Per test: an empty working directory, TMPDIR and HOME, to see what the job leaves.
        self.work = tempfile.mkdtemp(prefix="case-", dir=self.dir)
        self.addCleanup(shutil.rmtree, self.work, True)
        self.cwd, self.tmp, self.home = (os.path.join(self.work, n) for n in ("cwd", "tmp", "home"))
        for d in (self.cwd, self.tmp, self.home):
            os.makedirs(d)

    def run_in_venv(self, argv, **env_extra):
        return subprocess.run(
            argv, cwd=self.cwd, env=clean_env(TMPDIR=self.tmp, HOME=self.home, **env_extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=120,
            check=False)

    def probe_package(self, **env_extra):
        proc = self.run_in_venv([self.python, self.probe], **env_extra)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout)

    def assert_left_no_files(self):
        for d in (self.cwd, self.tmp, self.home):
            self.assertEqual(os.listdir(d), [], f"the job left files in {d}")

    def test_installed_copy_is_imported_without_the_extension_or_a_shim(self):
        info = self.probe_package()
        site = os.path.realpath(self.venv)
        self.assertTrue(info["file"].startswith(site + os.sep), info["file"])
        self.assertEqual((info["version"], info["dist_version"]),
                         (stallscope.__version__, stallscope.__version__))
        self.assertIn(LIBRARY, info["package_files"])
        self.assertFalse([n for n in info["package_files"] if n.startswith("_core")], info)
        self.assertIn("stallscope", info["site_packages"])
        self.assertNotIn("sitecustomize.py", info["site_packages"],
                         "an installed sitecustomize would hijack the venv")
        self.assertEqual((info["backend"], info["enabled"]), (None, False))

    def test_outside_run_the_job_is_unchanged_and_leaves_no_files(self):
        proc = self.run_in_venv([self.python, self.job])
        self.assertEqual((proc.returncode, proc.stdout, proc.stderr), (0, JOB_STDOUT, JOB_STDERR))
        self.assert_left_no_files()

    def test_profile_prints_periodic_summaries_with_the_c_library(self):
        env = {"STALLSCOPE_PROFILE": "1", "STALLSCOPE_PROFILE_EVERY": "5"}
        info = self.probe_package(**env)
        self.assertEqual((info["backend"], info["enabled"]), ("native", True))
        proc = self.run_in_venv([self.python, self.job], **env)
        self.assertEqual((proc.returncode, proc.stdout), (0, JOB_STDOUT), proc.stderr)
        lines = proc.stderr.splitlines()
        summaries = [l for l in lines if l.startswith("[stallscope] ")]
        self.assertEqual([l for l in lines if l not in summaries], JOB_STDERR.splitlines())
        self.assertEqual(len(summaries), 3, proc.stderr)  # steps 1-5, 6-10, and 11-12 at exit
        self.assertTrue(summaries[0].startswith("[stallscope] steps 1-5 ("), summaries[0])
        self.assertTrue(summaries[1].startswith("[stallscope] steps 6-10 ("), summaries[1])
        self.assertTrue(summaries[2].startswith("[stallscope] steps 11-12 ("), summaries[2])
        self.assertIn("data ", summaries[0])
        self.assertIn("compute ", summaries[0])
        self.assert_left_no_files()  # the private ring is removed at exit

    def stallscope_run(self, out, *python_flags):
        if STALLSCOPE_BIN is None:
            self.skipTest("STALLSCOPE_BIN (the stallscope binary) is not set")
        proc = self.run_in_venv(
            [STALLSCOPE_BIN, "run", "--quiet", "--out", out, "--", self.python]
            + list(python_flags) + [self.job])
        self.assertEqual((proc.returncode, proc.stdout), (0, JOB_STDOUT), proc.stderr)
        with open(os.path.join(out, "report.json")) as f:
            report = json.load(f)
        # Every step recorded: the steady ones, each with its phases, and the warm-up before
        # them (steps of microseconds: on a loaded machine a preempted first step is warm-up).
        steady = report["steps"]["count"]
        self.assertEqual(steady + report["life"]["warmup_steps"], JOB_STEPS, report["life"])
        rank0 = {p["name"]: p["count"] for p in report["phases"] if p["rank"] == 0}
        self.assertEqual((rank0.get("data"), rank0.get("compute")), (steady, steady),
                         report["phases"])
        with open(os.path.join(out, "python.jsonl")) as f:
            starts = [n for n in map(json.loads, f) if n["event"] == "start"]
        self.assertEqual(len(starts), 1, starts)
        return starts[0]

    def test_under_run_the_job_records_its_phases(self):
        start = self.stallscope_run(os.path.join(self.work, "run"))
        self.assertTrue(start["shim"], "stallscope run's own shim (on PYTHONPATH) ran")
        self.assertTrue(start["recording"], start)

    def test_under_run_an_isolated_python_records_through_the_installed_copy(self):
        # -I: PYTHONPATH ignored, so stallscope's shim does not run; the job's own
        # `import stallscope` finds the venv's copy, which records (STALLSCOPE_RUN_DIR is set).
        start = self.stallscope_run(os.path.join(self.work, "run"), "-I")
        self.assertFalse(start["shim"], start)
        self.assertEqual((start["backend"], start["recording"]), ("native", True), start)
        self.assertTrue(start["venv"], start)
        self.assertTrue(start["flags"]["isolated"], start)


if __name__ == "__main__":
    unittest.main()
