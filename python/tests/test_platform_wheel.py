"""Tests of the platform wheel (`make wheel`: python/make_wheel.py --bundle, issue 30) as a user
installs it: a fresh venv of this interpreter, `python -m pip install --no-index WHEEL`, then the
`stallscope` command from the venv's PATH with nothing else installed: --version, `top --once`,
`python -m stallscope`, `run` of a phase-marking job (and of a PyTorch job where this interpreter
has torch: Debian's, through --system-site-packages), `pip check`, and an uninstall that leaves
nothing behind. And the wheel file: its name and tag against the bundle's measured glibc floor,
its contents (the package, the bundle's bin/ and lib/, the script; no tests, no build paths),
valid RECORD hashes.

The wheel comes from the environment (`make test-dist` sets it; CTest runs this file under every
local interpreter, label `dist`); without it every test is skipped:
    STALLSCOPE_PLATFORM_WHEEL=build/dist/stallscope-0.1.0-py3-none-manylinux_2_34_x86_64.whl \\
      python3 -m unittest -v test_platform_wheel                           (cwd: python/tests)
"""
import csv
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import textwrap
import unittest
import zipfile

from _venv import VenvTestCase, clean_env, make_venv, pip_install, record_hash

WHEEL = os.environ.get("STALLSCOPE_PLATFORM_WHEEL") or None
SOURCE_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                           os.pardir, os.pardir))
HAS_TORCH = importlib.util.find_spec("torch") is not None

#: A job that marks its phases (no torch): 20 steps of data_loading (in load(), line 5) and
#: forward_pass.
PHASE_JOB = textwrap.dedent(
    """
    import time, stallscope
    print("package", stallscope.__file__, flush=True)
    def load():
        time.sleep(0.03)
    for _ in range(20):
        with stallscope.phase("data_loading"):
            load()
        with stallscope.phase("forward_pass"):
            time.sleep(0.002)
        stallscope.step()
    """)
PHASE_JOB_STEPS = 20
PHASE_JOB_LOAD_LINE = 5


@unittest.skipIf(WHEEL is None, "STALLSCOPE_PLATFORM_WHEEL is not set (make test-dist sets it)")
class PlatformWheelFileTest(unittest.TestCase):
    """The wheel file itself."""

    @classmethod
    def setUpClass(cls):
        with open(WHEEL, "rb") as f:
            cls.zip = zipfile.ZipFile(io.BytesIO(f.read()))
        cls.names = cls.zip.namelist()
        m = re.match(r"stallscope-([^-]+)-py3-none-manylinux_2_(\d+)_([a-z0-9_]+)\.whl$",
                     os.path.basename(WHEEL))
        if m is None:
            raise AssertionError(f"{WHEEL}: not a stallscope platform wheel name")
        cls.version, cls.glibc_minor, cls.machine = m.group(1), int(m.group(2)), m.group(3)

    @classmethod
    def tearDownClass(cls):
        cls.zip.close()

    def test_tag_is_the_bundles_measured_glibc_floor(self):
        wheel_meta = self.zip.read(f"stallscope-{self.version}.dist-info/WHEEL").decode()
        self.assertIn(f"Tag: py3-none-manylinux_2_{self.glibc_minor}_{self.machine}\n", wheel_meta)
        self.assertIn("Root-Is-Purelib: false\n", wheel_meta)
        version = self.zip.read("stallscope/_bundle/VERSION").decode()
        self.assertIn(f"glibc >= 2.{self.glibc_minor},", version)
        self.assertTrue(version.startswith(f"stallscope {self.version} "), version)

    def test_contents(self):
        names = set(self.names)
        for name in ("stallscope/__init__.py", "stallscope/__main__.py",
                     "stallscope/libstallscope_rec.so", "stallscope/_bundle/bin/stallscope",
                     "stallscope/_bundle/bin/stallscope-full",
                     "stallscope/_bundle/bin/stallscope-gpu-check",
                     "stallscope/_bundle/bin/stallscope-nvml-cost",
                     "stallscope/_bundle/lib/stallscope/python/sitecustomize.py",
                     "stallscope/_bundle/lib/stallscope/python/stallscope/__init__.py",
                     "stallscope/_bundle/lib/stallscope/demo-gpu/libnvidia-ml.so.1",
                     "stallscope/_bundle/lib/stallscope/demo-gpu/scenario.json",
                     f"stallscope-{self.version}.data/scripts/stallscope"):
            self.assertIn(name, names)
        for name in self.names:
            self.assertTrue(name.startswith(("stallscope/", f"stallscope-{self.version}.")), name)
            self.assertNotRegex(name, r"(^|/)(tests?|__pycache__)/|_test\.|\.whl$|\.o$|/_core",
                                "a test, a cache, a build product or a wheel in a wheel")
        for name in ("stallscope/_bundle/bin/stallscope", "stallscope/_bundle/bin/stallscope-full",
                     f"stallscope-{self.version}.data/scripts/stallscope"):
            self.assertEqual((self.zip.getinfo(name).external_attr >> 16) & 0o111, 0o111, name)

    def test_no_build_paths(self):
        # The binaries are stripped; nothing in the wheel may name the tree it was built in
        # (a user's traceback or error pointing into /work/... would be a leak and a lie).
        needle = SOURCE_DIR.encode()
        for name in self.names:
            self.assertNotIn(needle, self.zip.read(name), name)

    def test_record_hashes(self):
        record_name = f"stallscope-{self.version}.dist-info/RECORD"
        rows = list(csv.reader(io.StringIO(self.zip.read(record_name).decode())))
        listed = {row[0] for row in rows}
        self.assertEqual(listed, set(self.names))
        for path, digest, size in rows:
            if path == record_name:
                self.assertEqual((digest, size), ("", ""))
                continue
            data = self.zip.read(path)
            self.assertEqual(digest, record_hash(data), path)
            self.assertEqual(int(size), len(data), path)


@unittest.skipIf(WHEEL is None, "STALLSCOPE_PLATFORM_WHEEL is not set (make test-dist sets it)")
class ReadmeWheelLinesTest(unittest.TestCase):
    """README's wheel lines work as copied, from the repository root (issue 41: the pip line
    named the wheel without its build/dist/ folder)."""

    def test_readme_names_the_wheel_make_wheel_wrote(self):
        rel = os.path.relpath(WHEEL, SOURCE_DIR)
        if rel != os.path.join("build", "dist", os.path.basename(WHEEL)):
            self.skipTest(f"{WHEEL}: not the default build's (BUILD=build)")
        with open(os.path.join(SOURCE_DIR, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        made = re.findall(r"^make wheel +# → (\S+\.whl)", readme, re.M)
        installed = re.findall(r"^python -m pip install --no-index (\S+\.whl)$", readme, re.M)
        self.assertEqual(made, [rel], "README's `make wheel` line")
        self.assertEqual(installed, [rel], "README's `pip install` line")


@unittest.skipIf(WHEEL is None, "STALLSCOPE_PLATFORM_WHEEL is not set (make test-dist sets it)")
class PlatformWheelInstallTest(VenvTestCase):
    """Installed offline into a fresh venv of this interpreter, as a user would."""

    DIR_PREFIX = "stallscope-platform-wheel-"

    @classmethod
    def _install(cls):
        cls.venv = os.path.join(cls.dir, "venv")
        cls.bin = os.path.join(cls.venv, "bin")
        cls.python = os.path.join(cls.bin, "python")
        cls.home = os.path.join(cls.dir, "home")
        os.makedirs(cls.home)
        # Debian's python3 has torch as a system package: the venv sees it, as a user's venv
        # sees a torch they installed.
        make_venv(cls.venv, cls.home, system_site_packages=HAS_TORCH)
        cls.before = cls.tree()
        pip_install(cls.python, WHEEL, cls.home)

    @classmethod
    def call(cls, argv, timeout=120, **env_extra):
        env = clean_env(HOME=cls.home, PATH=cls.bin + os.pathsep + os.environ.get("PATH", ""),
                        PIP_NO_INPUT="1", PIP_ROOT_USER_ACTION="ignore", **env_extra)
        proc = subprocess.run(argv, cwd=cls.dir, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout,
                              check=False)
        if proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stdout}"
                                 f"{proc.stderr}")
        return proc

    @classmethod
    def tree(cls):
        """Every file and directory in the venv, but Python's bytecode caches (pip removes the
        ones of the files it installed; the interpreter's own may come and go)."""
        out = set()
        for root, dirs, files in os.walk(cls.venv):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in dirs + files:
                out.add(os.path.relpath(os.path.join(root, name), cls.venv))
        return out

    def test_a_command_on_the_path_and_python_m(self):
        exe = shutil.which("stallscope", path=self.bin)
        self.assertEqual(exe, os.path.join(self.bin, "stallscope"))
        with open(exe, "rb") as f:
            self.assertEqual(f.readline().strip(), b"#!" + self.python.encode(),
                             "pip writes the venv's interpreter into the script")
        version = self.call(["stallscope", "--version"]).stdout
        wheel_version = os.path.basename(WHEEL).split("-")[1]
        self.assertEqual(version.split()[:2], ["stallscope", wheel_version], version)
        self.assertEqual(self.call([self.python, "-m", "stallscope", "--version"]).stdout, version)
        # pip check: nothing about stallscope. With --system-site-packages (Debian's python3)
        # pip also checks Debian's own packages, which may miss optional dependencies.
        proc = subprocess.run([self.python, "-m", "pip", "check"], env=clean_env(HOME=self.home),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=120, check=False)
        self.assertEqual([line for line in proc.stdout.splitlines() if "stallscope" in line], [])
        if not HAS_TORCH:
            self.assertEqual(proc.returncode, 0, proc.stdout)

    def test_top_once(self):
        out = self.call(["stallscope", "top", "--once"]).stdout
        self.assertIn("CPU", out)

    def test_top_demo_shows_the_demo_gpus_the_wheel_carries(self):
        # Issue 41: the fake NVML as a clearly named demo device, loaded only when asked.
        proc = self.call(["stallscope", "top", "--once", "--json", "--demo"])
        sample = json.loads(proc.stdout)
        names = [g["gpu_name"] for g in sample["header"]["gpus"]]
        self.assertEqual(names, ["DEMO GPU 0 (fake NVML)", "DEMO GPU 1 (fake NVML)"])
        self.assertIn(os.path.join("stallscope", "_bundle", "lib", "stallscope", "demo-gpu)"),
                      proc.stderr)
        plain = json.loads(self.call(["stallscope", "top", "--once", "--json"]).stdout)
        self.assertNotIn("DEMO", json.dumps(plain["header"]["gpus"]))

    def test_run_records_the_phases_of_a_job(self):
        job = os.path.join(self.dir, "phase_job.py")
        with open(job, "w") as f:
            f.write(PHASE_JOB)
        run_dir = os.path.join(self.dir, "run")
        proc = self.call(["stallscope", "run", "--out", run_dir, "-i", "200ms", "--quiet", "--",
                          self.python, job])
        # The job imports the package the wheel carries for `run` (the bundle's own layout).
        self.assertIn(os.path.join("stallscope", "_bundle", "lib", "stallscope", "python",
                                   "stallscope", "__init__.py"), proc.stdout)
        with open(os.path.join(run_dir, "report.json")) as f:
            report = json.load(f)
        self.assertEqual(report["steps"]["count"] + report["life"]["warmup_steps"],
                         PHASE_JOB_STEPS)
        self.assertIn("data_loading", {p["name"] for p in report["phases"]})
        self.assertEqual(report["python"][0]["backend"], "native", report["python"][0])
        # The Python stacks of this interpreter, sampled from outside (src/pystack): during
        # data_loading the main thread was in load(), at its sleep.
        stacks = report["stacks"]
        self.assertIsNotNone(stacks, "no stacks.jsonl")
        self.assertEqual(stacks["unreadable"], [])
        loading = [g for g in stacks["phases"] if g["name"] == "data_loading"]
        self.assertTrue(loading, stacks)
        top = loading[0]["lines"][0]
        self.assertEqual((top["where"], top["function"], top["text"]),
                         ("phase_job.py:%d" % PHASE_JOB_LOAD_LINE, "load", "time.sleep(0.03)"),
                         loading[0])
        self.assertGreater(top["share"], 0.8, loading[0])

    @unittest.skipUnless(HAS_TORCH, "this interpreter has no torch")
    def test_run_of_a_torch_job(self):
        run_dir = os.path.join(self.dir, "torch_run")
        self.call(["stallscope", "run", "--out", run_dir, "-i", "200ms", "--quiet", "--",
                   self.python, os.path.join(SOURCE_DIR, "examples", "train.py"),
                   "--situation", "compute", "--steps", "12", "--print-every", "1000",
                   "--data-dir", os.path.join(self.dir, "data"),
                   "--out-dir", os.path.join(self.dir, "out")], timeout=300)
        with open(os.path.join(run_dir, "report.json")) as f:
            report = json.load(f)
        phases = {p["name"] for p in report["phases"]}
        for phase in ("data_loading", "forward_pass", "backward_pass", "optimizer_step"):
            self.assertIn(phase, phases)
        self.assertEqual(report["job"]["exit_code"], 0)

    def test_z_uninstall_leaves_nothing(self):  # last: the others need the install
        self.call([self.python, "-m", "pip", "uninstall", "-y", "--disable-pip-version-check",
                   "stallscope"])
        self.assertEqual(sorted(self.tree() - self.before), [])
        self.assertIsNone(shutil.which("stallscope", path=self.bin))


if __name__ == "__main__":
    unittest.main()
