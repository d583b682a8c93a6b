"""Tests of the stallscope phase API (python/stallscope/__init__.py and its recorder backends).

Run from the build tree with any CPython >= 3.8 (CTest runs it under every interpreter it finds,
once per backend):
    PYTHONPATH=build/python python3 -m unittest -v test_phase            (cwd: python/tests)
    STALLSCOPE_BACKEND=native PYTHONPATH=build/python python3 -m unittest -v test_phase

The recording mode is fixed at import from the environment, so each case runs its script in a
fresh interpreter (this one) with the environment it needs. Rings are read back with
ring_file.py, a pure-Python reader written from the format table in src/phase/README.md.
"""

import glob
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import stallscope
from ring_file import events, read_ring

#: The backend the package must pick in this interpreter: the one STALLSCOPE_BACKEND forces, else
#: the compiled extension where it was built for this interpreter, else ctypes.
FORCED_BACKEND = os.environ.get("STALLSCOPE_BACKEND", "").strip().lower()
if FORCED_BACKEND in ("", "auto"):
    FORCED_BACKEND = None


def run_py(code, env_extra=None, check=True):
    """Runs `code` as a script in a fresh /usr/bin/python3 with the package on PYTHONPATH (a
    file, not -c: multiprocessing's spawn re-imports the main module)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STALLSCOPE_") or k == "STALLSCOPE_BACKEND"}
    env["STALLSCOPE_AUTO"] = "0"  # the auto-instrumentation shim has its own tests
    env.update(env_extra or {})
    with tempfile.TemporaryDirectory(prefix="stallscope-script-") as script_dir:
        script = os.path.join(script_dir, "script.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(code))
        proc = subprocess.run(
            [sys.executable, script],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def expected_backend():
    if FORCED_BACKEND:
        return FORCED_BACKEND
    package_dir = os.path.dirname(stallscope.__file__)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(os.path.join(package_dir, "_core" + suffix)):
            return "core"
    return "native"


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="stallscope-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def rings(self):
        return sorted(glob.glob(os.path.join(self.dir, "phases", "*.ring")))


class NoopTest(TempDirTest):
    def test_api_is_a_noop_outside_run(self):
        proc = run_py(
            """
            import os, stallscope
            assert not stallscope.enabled()
            with stallscope.phase("a"):
                with stallscope.phase("b"):
                    pass
            @stallscope.phase("c")
            def f(x):
                return x + 1
            assert f(1) == 2 and f.__name__ == "f"
            assert stallscope.step() is None
            assert stallscope.mark("m", epoch=1) is None
            assert stallscope.count("n") is None
            assert stallscope.info("loader", {"a": 1}) is None
            assert stallscope.phase("a") is stallscope.phase("a")
            print("ok")
            """,
            {"TMPDIR": self.dir},
        )
        self.assertEqual(proc.stdout.strip(), "ok")
        self.assertEqual(proc.stderr, "")
        self.assertEqual(os.listdir(self.dir), [], "no files outside run")

    def test_in_process_noop(self):
        self.assertFalse(stallscope.enabled())
        with stallscope.phase("x"):
            pass
        self.assertIsNone(stallscope.step())

    def test_missing_recorder_imports_and_warns_once_when_enabled(self):
        pkg = os.path.join(self.dir, "pkg", "stallscope")
        os.makedirs(pkg)
        for src in glob.glob(os.path.join(os.path.dirname(stallscope.__file__), "*.py")):
            shutil.copy(src, pkg)
        code = """
            import warnings
            warnings.simplefilter("always")
            import stallscope
            with stallscope.phase("x"):
                pass
            @stallscope.phase("y")
            def f():
                return 3
            assert f() == 3
            stallscope.step(); stallscope.mark("m"); stallscope.count("c")
            assert not stallscope.enabled()
            print("ok")
            """
        env = {"PYTHONPATH": os.path.join(self.dir, "pkg"), "STALLSCOPE_BACKEND": "auto"}
        quiet = run_py(code, env)
        self.assertEqual(quiet.stderr, "")
        loud = run_py(code, {**env, "STALLSCOPE_RUN_DIR": self.dir})
        self.assertEqual(loud.stdout.strip(), "ok")
        self.assertEqual(loud.stderr.count("RuntimeWarning"), 1, loud.stderr)
        self.assertIn("the recorder could not load", loud.stderr)
        self.assertIn("libstallscope_rec.so", loud.stderr, "says why the C library did not load")

    def test_unknown_backend_is_named_in_the_warning(self):
        proc = run_py("import stallscope; assert not stallscope.enabled()",
                      {"STALLSCOPE_RUN_DIR": self.dir, "STALLSCOPE_BACKEND": "fortran"})
        self.assertIn("STALLSCOPE_BACKEND='fortran' is not one of auto, core, native", proc.stderr)


class RecordingTest(TempDirTest):
    def test_the_expected_backend_records(self):
        proc = run_py("import stallscope; print(stallscope.backend(), stallscope.enabled())",
                      {"STALLSCOPE_RUN_DIR": self.dir})
        self.assertEqual(proc.stdout.split(), [expected_backend(), "True"], proc.stderr)

    def test_start_note_names_this_interpreter_and_its_recorder(self):
        run_py("import stallscope", {"STALLSCOPE_RUN_DIR": self.dir})
        with open(os.path.join(self.dir, "python.jsonl")) as f:
            notes = [json.loads(line) for line in f]
        self.assertEqual(len(notes), 1, notes)
        note = notes[0]
        self.assertEqual(note["event"], "start")
        self.assertEqual(note["python"], ".".join(map(str, sys.version_info[:3])))
        self.assertEqual(note["executable"], sys.executable)
        self.assertEqual((note["backend"], note["backend_error"], note["recording"]),
                         (expected_backend(), None, True))
        self.assertTrue(note["shim"], "build/python (on PYTHONPATH) holds the shim")

    def test_job_output_is_unchanged_by_recording(self):
        code = """
            import sys, stallscope
            total = 0
            for i in range(50):
                with stallscope.phase("work"):
                    total += i * i
                stallscope.step()
            print("total", total)
            print("to stderr", file=sys.stderr)
            sys.exit(4)
            """
        bare = run_py(code, check=False)
        recorded = run_py(code, {"STALLSCOPE_RUN_DIR": self.dir}, check=False)
        self.assertEqual((recorded.returncode, recorded.stdout, recorded.stderr),
                         (bare.returncode, bare.stdout, bare.stderr))
        self.assertEqual(bare.returncode, 4)
        self.assertEqual(len(read_ring(self.rings()[0])["records"]), 150)

    def test_context_manager_decorator_nesting_and_events(self):
        run_py(
            """
            import stallscope
            assert stallscope.enabled()
            @stallscope.phase("sampling")
            def sample():
                with stallscope.phase("inner"):
                    return 7
            with stallscope.phase("outer"):
                assert sample() == 7
            try:
                with stallscope.phase("failing"):
                    raise KeyError("boom")
            except KeyError:
                pass
            else:
                raise AssertionError("the exception must propagate")
            stallscope.count("host_syncs", 3)
            stallscope.mark("eval_start", epoch=3, note="x")
            stallscope.info("dataloader", {"num_workers": 4, "fn": print})
            assert stallscope.step() == 1
            print(repr(stallscope.phase("outer")))
            """,
            {"STALLSCOPE_RUN_DIR": self.dir, "RANK": "2", "WORLD_SIZE": "4"},
        )
        rings = self.rings()
        self.assertEqual(len(rings), 1)
        ring = read_ring(rings[0])
        self.assertEqual((ring["rank"], ring["world_size"], ring["lost"]), (2, 4, 0))
        self.assertEqual(
            events(ring),
            [
                ("B", "outer", 0),
                ("B", "sampling", 0),
                ("B", "inner", 0),
                ("E", "inner", 0),
                ("E", "sampling", 0),
                ("E", "outer", 0),
                ("B", "failing", 0),
                ("E", "failing", 0),
                ("C", "host_syncs", 3),
                ("M", "eval_start", 0),
                ("S", "", 1),
            ],
        )
        with open(rings[0][: -len(".ring")] + ".meta.jsonl") as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual([(l["kind"], l["name"], l["rank"]) for l in lines],
                         [("mark", "eval_start", 2), ("info", "dataloader", 2)])
        self.assertEqual(lines[0]["data"], {"epoch": 3, "note": "x"})
        self.assertEqual(lines[1]["data"]["num_workers"], 4)
        self.assertIn("print", lines[1]["data"]["fn"])

    def test_threads_record_with_their_own_tid(self):
        run_py(
            """
            import threading, stallscope
            def work():
                for _ in range(100):
                    with stallscope.phase("w"):
                        pass
            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads: t.start()
            for t in threads: t.join()
            """,
            {"STALLSCOPE_RUN_DIR": self.dir},
        )
        ring = read_ring(self.rings()[0])
        self.assertEqual(len(ring["records"]), 800)
        self.assertEqual(len({tid for _k, _i, tid, _ts, _a in ring["records"]}), 4)

    def test_forked_and_spawned_children_get_their_own_rings(self):
        run_py(
            """
            import multiprocessing as mp, os, stallscope

            def spawned():
                import stallscope
                with stallscope.phase("spawned_work"):
                    pass

            if __name__ == "__main__":
                with stallscope.phase("parent_work"):
                    pass
                pid = os.fork()
                if pid == 0:
                    with stallscope.phase("forked_work"):
                        pass
                    os._exit(0)
                os.waitpid(pid, 0)
                ctx = mp.get_context("spawn")
                p = ctx.Process(target=spawned)
                p.start(); p.join()
                assert p.exitcode == 0
                with stallscope.phase("parent_work"):
                    pass
            """,
            {"STALLSCOPE_RUN_DIR": self.dir},
        )
        by_pid = {}
        for path in self.rings():
            ring = read_ring(path)
            self.assertEqual(os.path.basename(path), f"{ring['pid']}.ring")
            by_pid[ring["pid"]] = {name for _k, name, _a in events(ring)}
        self.assertEqual(sorted(by_pid.values(), key=sorted),
                         sorted([{"parent_work"}, {"forked_work"}, {"spawned_work"}], key=sorted))

    @unittest.skipUnless(importlib.util.find_spec("torch"), "needs torch")
    def test_dataloader_workers_each_get_a_ring(self):
        run_py(
            """
            import torch, stallscope
            from torch.utils.data import DataLoader, Dataset

            class Items(Dataset):
                def __len__(self):
                    return 8
                def __getitem__(self, i):
                    with stallscope.phase("decode"):
                        return torch.tensor([i])

            if __name__ == "__main__":
                for ctx in ("fork", "spawn"):
                    loader = DataLoader(Items(), batch_size=2, num_workers=2,
                                        multiprocessing_context=ctx)
                    for batch in loader:
                        with stallscope.phase("train_step"):
                            pass
                        stallscope.step()
            """,
            {"STALLSCOPE_RUN_DIR": self.dir},
        )
        names = [{name for _k, name, _a in events(read_ring(p))} for p in self.rings()]
        self.assertEqual(len(names), 5, names)  # the job, 2 forked and 2 spawned workers
        self.assertEqual(sum(1 for n in names if n == {"decode"}), 4, names)
        self.assertEqual(sum(1 for n in names if "train_step" in n), 1, names)

    def test_names_that_are_not_unicode_never_break_the_job(self):
        # Issue 27 B07: os.fsdecode of a file name that is not UTF-8 holds a lone surrogate,
        # which has no UTF-8 form. Both backends record it as Python's backslashreplace writes
        # it (the six characters "\\udcff"), in names, mark and info kinds and their data.
        proc = run_py(
            r"""
            import os, stallscope
            name = os.fsdecode(b"shard_\xff.tar")
            with stallscope.phase(f"load {name}"):
                pass
            stallscope.mark(f"opened {name}", path=name)
            stallscope.info(f"file {name}", {"path": name})
            stallscope.step()
            print("survived")
            """,
            {"STALLSCOPE_RUN_DIR": self.dir},
        )
        self.assertEqual(proc.stdout.strip(), "survived", proc.stderr)
        rings = self.rings()
        self.assertEqual(len(rings), 1)
        self.assertEqual(events(read_ring(rings[0]))[:2],
                         [("B", "load shard_\\udcff.tar", 0), ("E", "load shard_\\udcff.tar", 0)])
        with open(rings[0][: -len(".ring")] + ".meta.jsonl", encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual([(l["kind"], l["name"]) for l in lines],
                         [("mark", "opened shard_\\udcff.tar"), ("info", "file shard_\\udcff.tar")])
        self.assertEqual(lines[0]["data"], {"path": "shard_\\udcff.tar"})
        self.assertEqual(lines[1]["data"], {"path": "shard_\\udcff.tar"})

    def test_unwritable_run_dir_never_breaks_the_job(self):
        proc = run_py(
            """
            import stallscope
            for _ in range(3):
                with stallscope.phase("x"):
                    pass
                stallscope.step()
                stallscope.mark("m", a=1)
            assert not stallscope.enabled()
            print("survived")
            """,
            {"STALLSCOPE_RUN_DIR": "/dev/null/run"},
        )
        self.assertEqual(proc.stdout.strip(), "survived")
        self.assertEqual(proc.stderr.count("RuntimeWarning"), 1, proc.stderr)
        self.assertIn("/dev/null/run/phases", proc.stderr)


class ProfileTest(TempDirTest):
    def test_profile_prints_periodic_summaries(self):
        proc = run_py(
            """
            import time, stallscope
            assert stallscope.enabled()
            for i in range(12):
                with stallscope.phase("data_loading"):
                    time.sleep(0.002)
                with stallscope.phase("forward_pass"):
                    time.sleep(0.001)
                stallscope.count("host_syncs", 2)
                stallscope.step()
            """,
            {"STALLSCOPE_PROFILE": "1", "STALLSCOPE_PROFILE_EVERY": "5", "TMPDIR": self.dir},
        )
        lines = [l for l in proc.stderr.splitlines() if l.startswith("[stallscope]")]
        self.assertEqual(len(lines), 3, proc.stderr)  # steps 1-5, 6-10, and 11-12 at exit
        self.assertTrue(lines[0].startswith("[stallscope] steps 1-5 ("), lines[0])
        self.assertTrue(lines[1].startswith("[stallscope] steps 6-10 ("), lines[1])
        self.assertTrue(lines[2].startswith("[stallscope] steps 11-12 ("), lines[2])
        first = lines[0].split(": ", 1)[1].split(" | ")
        # Phases are ordered by time; on a loaded machine the two sleeps may swap places.
        by_name = {item.split(" ", 1)[0]: item for item in first}
        self.assertIn("(n=5, mean ", by_name["data_loading"], first)
        self.assertIn("forward_pass", by_name, first)
        self.assertEqual(first[-1], "host_syncs 10")
        self.assertEqual(os.listdir(self.dir), [], "the private ring is removed at exit")

    def test_format_summary(self):
        from stallscope import _profile

        line = _profile.format_summary(
            101, 200, 2_000_000_000,
            [("data_loading", 100, 820_000_000, 9_000_000), ("forward_pass", 100, 600_000_000, 0)],
            [("host_syncs", 300, 300, 0)],
            unmatched=0, lost=5)
        self.assertEqual(
            line,
            "[stallscope] steps 101-200 (2 s, 50 steps/s): data_loading 41.0% (n=100, mean 8.2 ms)"
            " | forward_pass 30.0% (n=100, mean 6 ms) | host_syncs 300 | lost 5 records")
        self.assertEqual(_profile.format_ns(850), "850 ns")
        self.assertEqual(_profile.format_ns(12_345), "12.3 us")
        self.assertEqual(_profile.format_ns(1_234_000_000), "1.23 s")


if __name__ == "__main__":
    unittest.main()
