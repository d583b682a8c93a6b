"""Tests for the experiment controls (python/stallscope/_experiment.py): the STALLSCOPE_*
environment variables read when stallscope.auto installs.

Run with the interpreter that has torch:  /usr/bin/python3 -m unittest -v test_experiment
(cwd: python/tests). In-process tests install the hooks on a FakeApi with the variables set;
stopping ends the process, so it is tested in subprocesses (and in-process with os._exit
replaced, under torch 2.x's global hooks, emulated where this torch lacks them).
"""

import collections
import contextlib
import io
import os
import tempfile
import textwrap
import unittest
import sys
import unittest.mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run from anywhere

from test_auto import (HAS_ALWAYS_CALL, HAS_OPTIMIZER_HOOKS, DataLoader, Dataset,  # noqa: E402
                       InProcessBase, SubprocessBase, _hooks, auto, needs_torch, nn, torch,
                       torch2_hooks)
# test_auto puts python/ on sys.path
from stallscope import _exp_copies, _exp_side_work, _exp_stop, _experiment  # noqa: E402

Pair = collections.namedtuple("Pair", "x y")


class CountingDataset(Dataset):
    """n items of (x: float[3], label: int64, index); counts __getitem__ calls."""

    def __init__(self, n=40, kind="tuple"):
        self.n, self.kind, self.calls = n, kind, 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.calls += 1
        x, y = torch.full((3,), float(i)), torch.tensor(i % 3)
        if self.kind == "dict":
            return {"x": x, "y": y, "name": f"item{i}"}
        if self.kind == "namedtuple":
            return Pair(x, y)
        return x, y, i


class Stream(torch.utils.data.IterableDataset if torch is not None else object):
    def __iter__(self):
        return iter(torch.arange(8.0).view(8, 1))


class Counted(nn.Module if nn is not None else object):
    """A model whose forward counts its runs."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.runs = 0

    def forward(self, x, scale=1.0, extra=None):
        self.runs += 1
        return self.lin(x) * scale, {"mean": x.mean()}


class ExperimentBase(InProcessBase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def install_with(self, global_hooks=True, **env):
        """Installs with STALLSCOPE_<KEY>=value for each keyword; returns the experiment."""
        values = {f"STALLSCOPE_{k.upper()}": str(v) for k, v in env.items()}
        clean = {k: v for k, v in os.environ.items() if k not in _experiment.ENV_ALL}
        with unittest.mock.patch.dict(os.environ, {**clean, **values}, clear=True):
            self.install(global_hooks=global_hooks)
        return _hooks.state.experiment

    def experiment_info(self):
        auto._at_exit()
        infos = self.api.infos("experiment")
        self.assertEqual(len(infos), 1, infos)
        return infos[0]


class EnvTest(unittest.TestCase):
    """What the variables say, read before any torch is needed: runs in every interpreter."""

    def from_env(self, **env):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            experiment = _experiment.from_env(
                {f"STALLSCOPE_{k.upper()}": v for k, v in env.items()}, lambda: None)
        return experiment, err.getvalue()

    def test_nothing_set_is_no_experiment(self):
        self.assertEqual(self.from_env(), (None, ""))
        self.assertEqual(self.from_env(side_work_off="0"), (None, ""))

    def test_side_work_off_is_a_flag(self):
        """Read by the package's one flag reader (stallscope/_env.py): every spelling."""
        for value in ("0", "false", "No", " OFF ", "", "  "):
            with self.subTest(value=value):
                self.assertEqual(self.from_env(side_work_off=value), (None, ""))
        for value in ("1", "true", "Yes", " ON\n"):
            with self.subTest(value=value):
                experiment, said = self.from_env(side_work_off=value)
                self.assertTrue(experiment.side_work_off)
                self.assertIn("torch.save skipped", said)

    def test_bad_values_are_said_and_ignored(self):
        for name, value, why in [("stop_after_steps", "0", ">= 1"),
                                 ("synthetic_data", "x", ""),
                                 ("side_work_off", "maybe", "not a flag"),
                                 ("scratch_dir", "/nonexistent/dir", "not an existing directory"),
                                 ("loader_set", '{"num_workers": -1}', "integer >= 0"),
                                 ("loader_set", '{"bogus": 1}', "unknown key"),
                                 ("loader_set", "[1]", "not a JSON object")]:
            experiment, said = self.from_env(**{name: value})
            self.assertIsNone(experiment, name)
            self.assertIn(f"STALLSCOPE_{name.upper()}={value!r} ignored", said)
            self.assertIn(why, said)
            self.assertEqual(said.count("\n"), 1, said)

    def test_good_values_make_an_experiment_and_say_its_plan(self):
        experiment, said = self.from_env(stop_after_steps="30", loader_set='{"num_workers": 2}')
        self.assertEqual(experiment.stop_after_steps, 30)
        self.assertEqual(experiment.loader_set, {"num_workers": 2})
        self.assertIn("experiment: will stop the process after 30 steps", said)
        self.assertIn('DataLoader settings replaced: {"num_workers": 2}', said)


@needs_torch
class ParseTest(ExperimentBase):
    def test_no_variable_changes_nothing(self):
        self.assertIsNone(self.install_with())
        self.assertFalse(hasattr(DataLoader.__init__, "_stallscope_auto"))
        self.assertFalse(hasattr(torch.save, "__wrapped__")
                         and hasattr(torch.save.__wrapped__, "_stallscope_auto"))
        auto._at_exit()
        self.assertEqual(self.api.infos("experiment"), [])

    def test_bad_values_turn_their_control_off_with_one_line(self):
        cases = [
            ({"stop_after_steps": "0"}, "STALLSCOPE_STOP_AFTER_STEPS='0' ignored: must be >= 1"),
            ({"stop_after_steps": "x"}, "STALLSCOPE_STOP_AFTER_STEPS='x' ignored: invalid"),
            ({"synthetic_data": "-2"}, "STALLSCOPE_SYNTHETIC_DATA='-2' ignored: must be >= 1"),
            ({"side_work_off": "maybe"}, "STALLSCOPE_SIDE_WORK_OFF='maybe' ignored: not a flag"),
            ({"scratch_dir": "/nonexistent/x"}, "ignored: not an existing directory"),
            ({"loader_set": "{num_workers: 2}"}, "STALLSCOPE_LOADER_SET='{num_workers: 2}' "
                                                 "ignored: Expecting property name"),
            ({"loader_set": "[1]"}, "ignored: not a JSON object"),
            ({"loader_set": '{"workers": 2}'}, "ignored: unknown key 'workers'"),
            ({"loader_set": '{"num_workers": true}'}, "num_workers must be an integer >= 0"),
            ({"loader_set": '{"batch_size": 0}'}, "batch_size must be an integer >= 1"),
            ({"loader_set": '{"pin_memory": 1}'}, "pin_memory must be true or false"),
        ]
        for env, line in cases:
            with self.subTest(env=env):
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    experiment = self.install_with(**env)
                self.assertIsNone(experiment)
                self.assertEqual(err.getvalue().count("[stallscope] experiment: "), 1,
                                 err.getvalue())
                self.assertIn(line, err.getvalue())
                auto.uninstall()

    def test_side_work_off_0_is_off_and_one_line_per_control(self):
        self.assertIsNone(self.install_with(side_work_off="0"))
        auto.uninstall()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            experiment = self.install_with(stop_after_steps=3, synthetic_data=2,
                                           side_work_off=1, scratch_dir=self.tmp.name,
                                           loader_set='{"num_workers": 0}')
        self.assertIsNotNone(experiment)
        lines = err.getvalue().splitlines()
        self.assertEqual(len(lines), 5, lines)
        self.assertTrue(all(line.startswith("[stallscope] experiment: ") for line in lines))
        info = experiment.info()
        self.assertEqual(list(info), [
            "stop_after_steps", "steps", "stopped", "synthetic_batches_cached",
            "synthetic_batches_served", "synthetic_not_applied", "saves_skipped",
            "eval_forwards_cached", "eval_forwards_run", "saves_redirected",
            "saves_not_redirected", "loader_set", "loader_set_applied", "loader_set_errors"])


@needs_torch
class SyntheticDataTest(ExperimentBase):
    def run_epochs(self, loader, epochs=2):
        return [[batch for batch in loader] for _ in range(epochs)]

    def test_first_k_batches_then_copies_epoch_length_kept(self):
        self.install_with(synthetic_data=3)
        data = CountingDataset(40)
        loader = DataLoader(data, batch_size=4)
        epochs = self.run_epochs(loader)
        self.assertEqual(data.calls, 12)  # 3 batches of 4 items, then never again
        self.assertEqual([len(e) for e in epochs], [10, 10])
        first = epochs[0]
        # each epoch's i-th batch is a copy of cached batch i % 3
        for i, batch in [*enumerate(first)][3:] + [*enumerate(epochs[1])]:
            source = first[i % 3]
            self.assertEqual(batch[0].shape, source[0].shape)
            self.assertEqual(batch[0].dtype, source[0].dtype)
            self.assertTrue(torch.equal(batch[0], source[0]))
            self.assertTrue(torch.equal(batch[1], source[1]))
            self.assertIsNot(batch[0], source[0])
            self.assertEqual(batch[0].data_ptr() == source[0].data_ptr(), False)
        # copies: the job changing one in place leaves the next untouched
        epochs[1][0][0].add_(100)
        again = next(iter(loader))
        self.assertTrue(torch.equal(again[0], first[0][0]))
        names = self.api.names()
        self.assertEqual(names.count("B:data_loading"), names.count("E:data_loading"))
        # per epoch: __iter__ + 10 batches (the end of an epoch loads nothing); then 1 + 1
        self.assertEqual(names.count("B:data_loading"), 2 * 11 + 2)
        self.assertEqual(names.count("I:dataloader"), 1)
        info = self.experiment_info()
        self.assertEqual(info["synthetic_batches_cached"], 3)
        self.assertEqual(info["synthetic_batches_served"], 7 + 10 + 1)
        self.assertEqual(info["synthetic_not_applied"], "")

    def test_structured_batches_are_copied(self):
        self.install_with(synthetic_data=1)
        for kind in ("dict", "namedtuple"):
            with self.subTest(kind=kind):
                first, second = self.run_epochs(DataLoader(CountingDataset(8, kind), 4))[0]
                self.assertIs(type(second), type(first))
                if kind == "dict":
                    self.assertEqual(second["name"], first["name"])
                    self.assertTrue(torch.equal(second["x"], first["x"]))
                    self.assertIsNot(second["x"], first["x"])
                else:
                    self.assertTrue(torch.equal(second.x, first.x))
                    self.assertIsNot(second.y, first.y)

    def test_shorter_epoch_than_k_and_len_of_the_iterator(self):
        self.install_with(synthetic_data=5)
        data = CountingDataset(6)
        loader = DataLoader(data, batch_size=4)  # 2 batches, the last of 2 items
        epochs = self.run_epochs(loader, 3)
        self.assertEqual([len(e) for e in epochs], [2, 2, 2])
        self.assertEqual(data.calls, 6)
        self.assertEqual(len(iter(loader)), 2)
        self.assertEqual(epochs[2][1][0].shape, (2, 3))

    def test_workers_start_once(self):
        import torch.utils.data.dataloader as dl
        starts = []
        original_init = dl._MultiProcessingDataLoaderIter.__init__

        def counting_init(it, loader):
            starts.append(loader)
            original_init(it, loader)

        self.install_with(synthetic_data=2)
        loader = DataLoader(CountingDataset(32), batch_size=4, num_workers=2)
        with unittest.mock.patch.object(dl._MultiProcessingDataLoaderIter, "__init__",
                                        counting_init):
            epochs = self.run_epochs(loader, 3)
        self.assertEqual(len(starts), 1)
        self.assertEqual([len(e) for e in epochs], [8, 8, 8])
        self.assertTrue(torch.equal(epochs[2][5][0], epochs[0][1][0]))

    @unittest.skipUnless(torch is not None and torch.cuda.is_available(), "needs CUDA to pin")
    def test_pinned_batches_give_pinned_copies(self):
        self.install_with(synthetic_data=1)
        first, second = self.run_epochs(DataLoader(CountingDataset(8), 4, pin_memory=True))[0]
        self.assertTrue(first[0].is_pinned())
        self.assertTrue(second[0].is_pinned())

    def test_batch_that_cannot_be_copied_leaves_the_loader_alone(self):
        self.install_with(synthetic_data=1)
        loader = DataLoader(CountingDataset(8), batch_size=4)
        with unittest.mock.patch.object(_exp_copies, "template",
                                        side_effect=RuntimeError("no copy")):
            epochs = self.run_epochs(loader)
        self.assertEqual([[b[2].tolist() for b in e] for e in epochs],
                         [[[0, 1, 2, 3], [4, 5, 6, 7]]] * 2)  # the real batches
        self.assertEqual(self.experiment_info()["synthetic_not_applied"],
                         "a batch could not be copied: RuntimeError: no copy")

    def test_loader_without_len_is_left_alone(self):
        self.install_with(synthetic_data=1)
        batches = self.run_epochs(DataLoader(Stream(), batch_size=4))
        self.assertEqual([len(e) for e in batches], [2, 2])
        self.assertTrue(torch.equal(batches[0][1], torch.arange(4.0, 8.0).view(4, 1)))
        info = self.experiment_info()
        self.assertEqual(info["synthetic_batches_served"], 0)
        self.assertEqual(info["synthetic_not_applied"], "Stream: the DataLoader has no len()")


@needs_torch
class SideWorkOffTest(ExperimentBase):
    def test_save_writes_nothing_and_is_still_a_phase(self):
        self.install_with(side_work_off=1)
        path = os.path.join(self.tmp.name, "ckpt.pt")
        self.assertIsNone(torch.save({"w": torch.ones(2)}, path))
        torch.serialization.save({"w": torch.ones(2)}, io.BytesIO())
        self.assertFalse(os.path.exists(path))
        self.assertEqual(self.api.names().count("B:checkpointing"), 2)
        self.assertEqual(self.experiment_info()["saves_skipped"], 2)

    def check_eval_cache(self, global_hooks):
        self.install_with(side_work_off=1, global_hooks=global_hooks)
        model = Counted()
        x = torch.randn(4, 3)
        with torch.no_grad():
            out1 = model(x)
            out2 = model(torch.randn(4, 3))  # same signature: served from the cache
            model(x, scale=2.0)  # another signature
            model(torch.randn(5, 3))  # another shape
            model(torch.randn(5, 3))
        self.assertEqual(model.runs, 3)
        self.assertTrue(torch.equal(out1[0], out2[0]))
        self.assertIsNot(out1[0], out2[0])
        self.assertIsNot(out1[1]["mean"], out2[1]["mean"])
        self.assertEqual(out2[0].shape, (4, 2))
        self.assertFalse(out2[0].requires_grad)
        model(x)  # grad enabled: training forwards always run
        model(x)
        self.assertEqual(model.runs, 5)
        names = self.api.names()
        self.assertEqual(names.count("B:eval_forward"), 5)
        self.assertEqual(names.count("E:eval_forward"), 5)
        self.assertEqual(names.count("B:forward_pass"), 2)
        info = self.experiment_info()
        self.assertEqual((info["eval_forwards_cached"], info["eval_forwards_run"]), (2, 3))

    def test_eval_forward_cache_patched_forward(self):
        self.check_eval_cache(global_hooks=False)

    def test_eval_forward_cache_global_hooks(self):
        with contextlib.ExitStack() as stack:
            if not HAS_ALWAYS_CALL:
                stack.enter_context(torch2_hooks.forward_hooks_21())
            self.check_eval_cache(global_hooks=True)
            self.assertEqual(auto.mechanisms()["forward_pass"], "global hook")
            auto.uninstall()

    def test_signature_and_size_bounds(self):
        self.install_with(side_work_off=1)
        model = Counted()
        with torch.no_grad():
            for _ in range(2):
                for n in range(1, 11):  # 10 signatures: 8 cached, the last 2 always run
                    model(torch.randn(n, 3))
            model(torch.randn(1, 3), extra=bytearray(b"x"))  # unhashable: runs
            model(torch.randn(1, 3), extra=bytearray(b"x"))
        self.assertEqual(model.runs, 10 + 2 + 2)
        experiment = _hooks.state.experiment
        self.assertEqual(experiment.side_work.eval_forwards_cached, 8)
        with unittest.mock.patch.object(_exp_side_work, "EVAL_CACHE_MAX_BYTES", 0):
            big = Counted()
            with torch.no_grad():
                big(torch.randn(2, 3))
                big(torch.randn(2, 3))
            self.assertEqual(big.runs, 2)

    def test_uncacheable_output_runs(self):
        class Obj(nn.Module):
            runs = 0

            def forward(self, x):
                Obj.runs += 1
                return object()

        self.install_with(side_work_off=1)
        model = Obj()
        with torch.no_grad():
            model(torch.ones(1))
            model(torch.ones(1))
        self.assertEqual(Obj.runs, 2)


@needs_torch
class ScratchDirTest(ExperimentBase):
    def test_save_redirected_and_load_finds_it(self):
        scratch = os.path.join(self.tmp.name, "scratch")
        os.mkdir(scratch)
        self.install_with(scratch_dir=scratch)
        user = os.path.join(self.tmp.name, "ckpt.pt")
        from pathlib import Path
        torch.save({"w": torch.ones(2)}, user)
        torch.save({"w": torch.full((2,), 3.0)}, f=Path(user))  # the same file again
        torch.save({"w": torch.zeros(1)}, os.path.join(self.tmp.name, "other.pt"))
        torch.save({"w": torch.zeros(1)}, io.BytesIO())
        self.assertFalse(os.path.exists(user))
        self.assertEqual(sorted(os.listdir(scratch)),
                         [f"{os.getpid()}-1-ckpt.pt", f"{os.getpid()}-2-other.pt"])
        self.assertTrue(torch.equal(torch.load(user)["w"], torch.full((2,), 3.0)))
        self.assertTrue(torch.equal(torch.serialization.load(f=Path(user))["w"],
                                    torch.full((2,), 3.0)))
        self.assertEqual(self.api.names().count("B:checkpointing"), 4)
        info = self.experiment_info()
        self.assertEqual((info["saves_redirected"], info["saves_not_redirected"]), (3, 1))

    def test_side_work_off_wins(self):
        self.install_with(scratch_dir=self.tmp.name, side_work_off=1)
        torch.save({"w": torch.ones(2)}, os.path.join(self.tmp.name, "ckpt.pt"))
        self.assertEqual(os.listdir(self.tmp.name), [])
        info = self.experiment_info()
        self.assertEqual((info["saves_skipped"], info["saves_redirected"]), (1, 0))


@needs_torch
class LoaderSetTest(ExperimentBase):
    def test_settings_replace_the_jobs(self):
        self.install_with(loader_set='{"num_workers": 2, "batch_size": 8, "pin_memory": false}')
        loader = DataLoader(CountingDataset(16), 4, True)  # positional batch_size, shuffle
        self.assertEqual((loader.num_workers, loader.batch_size), (2, 8))
        self.assertEqual(type(loader.sampler).__name__, "RandomSampler")
        self.assertEqual(len([b for b in loader]), 2)
        info = self.experiment_info()
        self.assertEqual(info["loader_set"], {"num_workers": 2, "batch_size": 8,
                                              "pin_memory": False})
        self.assertEqual((info["loader_set_applied"], info["loader_set_errors"]), (1, ""))
        self.assertEqual(self.api.infos("dataloader")[0]["num_workers"], 2)

    def test_no_workers_is_reconciled(self):
        self.install_with(loader_set='{"num_workers": 0, "prefetch_factor": 4}')
        loader = DataLoader(CountingDataset(8), batch_size=4, num_workers=2,
                            persistent_workers=True, prefetch_factor=3,
                            multiprocessing_context="spawn")
        self.assertEqual(loader.num_workers, 0)
        self.assertFalse(loader.persistent_workers)
        self.assertEqual(len(list(loader)), 2)
        self.assertEqual(self.experiment_info()["loader_set_errors"],
                         "prefetch_factor not applied: num_workers=0")

    def test_batch_size_with_a_batch_sampler_is_not_applied(self):
        self.install_with(loader_set='{"batch_size": 8}')
        sampler = torch.utils.data.BatchSampler(range(8), batch_size=2, drop_last=False)
        loader = DataLoader(CountingDataset(8), batch_sampler=sampler)
        self.assertEqual(len(list(loader)), 4)
        info = self.experiment_info()
        self.assertEqual(info["loader_set_applied"], 0)
        self.assertEqual(info["loader_set_errors"],
                         "batch_size not applied: the job passes a batch_sampler")

    def test_jobs_own_errors_pass_through(self):
        self.install_with(loader_set='{"num_workers": 1}')
        with self.assertRaises(TypeError):
            DataLoader(CountingDataset(8), batch_size=4, no_such_argument=1)
        with self.assertRaisesRegex(ValueError, "timeout option should be non-negative"):
            DataLoader(CountingDataset(8), timeout=-1)


@needs_torch
class StopInProcessTest(ExperimentBase):
    """Stopping under both step mechanisms, with os._exit replaced."""

    class Exited(BaseException):
        pass

    def run_until_exit(self, global_hooks, user_steps=False):
        exits = []

        def fake_exit(code):
            exits.append(code)
            raise self.Exited()

        self.install_with(stop_after_steps=3, global_hooks=global_hooks)
        model = nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with unittest.mock.patch.object(_exp_stop.os, "_exit", fake_exit), \
                contextlib.redirect_stderr(io.StringIO()) as err:
            with self.assertRaises(self.Exited):
                for _ in range(10):
                    model(torch.ones(1, 2)).sum().backward()
                    opt.step()
                    if user_steps:
                        self.api.step()  # auto.track_user_steps' wrapper
        self.assertEqual(exits, [0])
        self.assertIn("[stallscope] experiment: stopping after 3 steps", err.getvalue())
        infos = self.api.infos("experiment")
        self.assertEqual(infos, [{"stop_after_steps": 3, "steps": 3, "stopped": True}])
        return self.api.names().count("S")

    def test_patched_optimizer_step(self):
        self.assertEqual(self.run_until_exit(global_hooks=False), 3)

    def test_global_step_hooks(self):
        with contextlib.ExitStack() as stack:
            if not HAS_OPTIMIZER_HOOKS:
                stack.enter_context(torch2_hooks.optimizer_hooks_20())
            self.assertEqual(self.run_until_exit(global_hooks=True), 3)
            self.assertEqual(auto.mechanisms()["optimizer_step"], "global hook")
            auto.uninstall()

    def test_user_marked_steps(self):
        # The first optimizer step is automatic (no user step yet), then the job's own.
        self.assertEqual(self.run_until_exit(global_hooks=False, user_steps=True), 3)


STOP_SCRIPT = textwrap.dedent("""
    import sys, torch, torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset
    user_steps = sys.argv[1] == "user"
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=4, num_workers=2, persistent_workers=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if user_steps:
        import stallscope
    step = 0
    for epoch in range(5):
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            if user_steps:
                stallscope.step()
            else:
                opt.zero_grad(); loss.backward(); opt.step()
            step += 1
            print(f"step {step}")
    print("finished")
    sys.exit(3)
""")


class StopSubprocessTest(SubprocessBase):
    def setUp(self):
        super().setUp()
        # The fake core also writes info data (test_auto's writes the kind only).
        path = os.path.join(self.fake_core_dir, "stallscope", "__init__.py")
        with open(path) as f:
            core = f.read()
        with open(path, "w") as f:
            f.write(core.replace('_emit("I", kind)', '_emit("I", kind, data)'))

    def run_stop(self, mode, n):
        script = os.path.join(self.tmp.name, "stop.py")
        with open(script, "w") as f:
            f.write(STOP_SCRIPT)
        return self.run_py(f"import runpy, sys; sys.argv = ['stop.py', {mode!r}];"
                           f" runpy.run_path({script!r}, run_name='__main__')",
                           STALLSCOPE_STOP_AFTER_STEPS=str(n))

    @needs_torch
    def test_stops_after_n_steps(self):
        for mode in ("auto", "user"):
            with self.subTest(mode=mode):
                open(os.path.join(self.run_dir, "events.jsonl"), "w").close()
                result = self.run_stop(mode, 7)
                self.assertEqual(result.returncode, 0, result.stderr)
                # the 7th step ends in opt.step(), before its print; the 6 prints were flushed
                self.assertEqual(result.stdout.split("\n")[-2], "step 6")
                self.assertIn("[stallscope] experiment: stopping after 7 steps", result.stderr)
                events = self.events()
                self.assertEqual([e[0] for e in events].count("S"), 7)
                infos = [e[2] for e in events if e[:2] == ["I", "experiment"]]
                self.assertEqual(infos, [{"stop_after_steps": 7, "steps": 7, "stopped": True}])

    @needs_torch
    def test_fewer_steps_than_n_exit_as_usual_with_the_info(self):
        result = self.run_stop("auto", 1000)
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertTrue(result.stdout.endswith("finished\n"))
        infos = [e[2] for e in self.events() if e[:2] == ["I", "experiment"]]
        self.assertEqual(infos, [{"stop_after_steps": 1000, "steps": 80, "stopped": False}])


if __name__ == "__main__":
    unittest.main()
