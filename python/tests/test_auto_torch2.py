"""Tests for stallscope.auto's torch 2.x global-hook code (python/stallscope/_hooks.py, put in
place by _install.py).

GlobalHookTest runs the global-hook code on every torch: against torch's own global hooks where
it has them (forward hooks with always_call: torch >= 2.1; optimizer step hooks: >= 2.0), else
against torch2_hooks.py's emulation of them on top of the older torch. Torch2Test needs the real
hooks and skips on older torch, so one run of this file under torch 2.x checks the 2.x paths:
    /usr/bin/python3 -m unittest -v test_auto_torch2        (cwd: python/tests)
"""

import contextlib
import gc
import importlib
import unittest
import warnings

from test_auto import (HAS_ALWAYS_CALL, HAS_OPTIMIZER_HOOKS, DataLoader, FakeApi, InProcessBase,
                       TransformDataset, _hooks, auto, needs_torch, nn, raise_from_forward,
                       tiny_run, torch, torch2_hooks)


class WorkloadCase(InProcessBase):
    def run_workload(self, global_hooks):
        """(losses, event names) of workload() under hooks installed afresh."""
        auto.uninstall()
        api = FakeApi()
        self.install(api, global_hooks=global_hooks)
        losses = workload(api)
        auto.uninstall()
        return losses, api.names()


def flaky_sgd(params):
    """An SGD whose first step() raises. Its step calls SGD.step: a step inside a step."""

    class Flaky(torch.optim.SGD):
        failed = False

        def step(self, closure=None):
            if not self.failed:
                self.failed = True
                raise RuntimeError("step failed")
            return super().step(closure)

    return Flaky(params, lr=0.1)


def workload(api):
    """Every case where a global hook and a patch could disagree, in one run. Returns the
    losses. (Module classes are defined here: nn exists only where torch does.)"""

    class Recursive(nn.Module):  # calls itself: one outermost call
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x, depth=2):
            return self.lin(x) if depth == 0 else self(x, depth - 1)

    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("from the job")

    losses, _ = tiny_run(epochs=1)
    gc.collect()  # tiny_run's optimizer, the primary one, is gone: the next to step takes over
    x = torch.ones(1, 2)
    recursive = Recursive()
    losses.append(recursive(x).sum().item())
    with torch.no_grad():
        recursive(x)
    with contextlib.suppress(ValueError):
        Boom()(x)
    torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1)  # 2.x hooks SGD.step too
    param = nn.Parameter(torch.ones(2))
    param.grad = torch.ones(2)
    flaky = flaky_sgd([param])
    with contextlib.suppress(RuntimeError):
        flaky.step()
    flaky.step()
    losses.append(param.sum().item())
    linear = nn.Linear(2, 1)
    lbfgs = torch.optim.LBFGS(linear.parameters(), max_iter=2)

    def closure():  # forward and backward inside the step
        lbfgs.zero_grad()
        loss = linear(x).pow(2).sum()
        loss.backward()
        return loss

    losses.append(lbfgs.step(closure).item())
    for _ in DataLoader(TransformDataset(api), batch_size=4):  # modules in a transform
        pass
    return losses


@needs_torch
class GlobalHookTest(WorkloadCase):
    """torch's global hooks, emulated where this torch lacks them (torch2_hooks): on torch 1.13
    both, on 2.0 the forward hooks, on >= 2.1 none (these tests then check the real hooks)."""

    def setUp(self):
        super().setUp()
        torch2_hooks.emulate_missing(self)

    def test_global_hooks_are_chosen(self):
        self.install()
        got = auto.mechanisms()
        self.assertEqual(got["forward_pass"], "global hook")
        self.assertEqual(got["optimizer_step"], "global hook")
        self.assertFalse(hasattr(nn.Module.__call__, "_stallscope_auto"))

    def test_same_phase_sequence_as_patches(self):
        plain = workload(FakeApi())
        patched = self.run_workload(global_hooks=False)
        hooked = self.run_workload(global_hooks=True)
        self.assertEqual(hooked[1], patched[1])
        self.assertEqual(hooked[0], patched[0])
        self.assertEqual(hooked[0], plain)
        # and the sequence is the intended one, not the same mistake twice
        names = hooked[1]
        # tiny_run, Recursive, Boom, and LBFGS' closure called twice in its step
        self.assertEqual(names.count("B:forward_pass"), 3 + 1 + 1 + 2)
        self.assertEqual(names.count("B:eval_forward"), 1)
        # Flaky twice; LBFGS' step before its first closure call, and after each backward
        self.assertEqual(names.count("B:optimizer_step"), 3 + 2 + 3)
        # Flaky's failed step ends no step, LBFGS' steps none: Flaky is the primary optimizer
        self.assertEqual(names.count("S"), 3 + 1)
        self.assertEqual(names.count("B:backward_pass"), 3 + 2)

    def test_forward_that_raises_leaves_no_phase_open(self):
        self.install()
        raise_from_forward(self)
        self.assertIsNone(_hooks.state.tls.active)
        self.api.events.clear()
        tiny_run(epochs=1, checkpoint=False)
        self.assertEqual(self.api.names()[:13], [
            "B:data_loading", "E:data_loading", "I:dataloader", "B:data_loading",
            "E:data_loading", "B:forward_pass", "E:forward_pass", "B:backward_pass",
            "E:backward_pass", "B:optimizer_step", "E:optimizer_step", "I:backends", "S"])

    def test_interrupted_forward_is_closed_by_the_next_hook(self):
        # KeyboardInterrupt is no Exception: torch runs no forward hook, always_call or not.
        self.install()

        class Interrupted(nn.Module):
            def forward(self, x):
                raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            Interrupted()(torch.zeros(1))
        self.assertEqual(_hooks.state.tls.active, "forward_pass")
        torch.ones(1, requires_grad=True).sum().backward()
        self.assertEqual(self.api.names()[-4:], [
            "B:forward_pass", "E:forward_pass", "B:backward_pass", "E:backward_pass"])

    def test_reentered_module_is_one_phase(self):
        self.install()

        class Recursive(nn.Module):
            def __init__(self, fail=False):
                super().__init__()
                self.lin = nn.Linear(2, 2)
                self.fail = fail

            def forward(self, x, depth=2):
                if depth == 0 and self.fail:
                    raise ValueError("innermost")
                return self.lin(x) if depth == 0 else self(x, depth - 1)

        Recursive()(torch.zeros(1, 2))
        with self.assertRaises(ValueError):
            Recursive(fail=True)(torch.zeros(1, 2))
        self.assertEqual(self.api.names(), ["I:torch", "B:forward_pass", "E:forward_pass",
                                            "B:forward_pass", "E:forward_pass"])
        self.assertIsNone(_hooks.state.tls.active)

    def test_step_that_raises_is_closed_by_the_next_step(self):
        self.install()
        param = nn.Parameter(torch.ones(1))
        param.grad = torch.ones(1)
        opt = flaky_sgd([param])
        with self.assertRaisesRegex(RuntimeError, "step failed"):
            opt.step()
        self.assertEqual(_hooks.state.tls.active, "optimizer_step")  # torch ran no post hook
        opt.step()
        self.assertEqual(self.api.names()[1:], [
            "B:optimizer_step", "E:optimizer_step",  # closed by the next pre hook
            "B:optimizer_step", "E:optimizer_step", "I:backends", "S"])
        self.assertIsNone(_hooks.state.tls.active)

    def test_stale_step_does_not_silence_the_next_forward(self):
        self.install()
        param = nn.Parameter(torch.ones(1))
        param.grad = torch.ones(1)
        with self.assertRaises(RuntimeError):
            flaky_sgd([param]).step()
        nn.Linear(1, 1)(torch.ones(1, 1))
        self.assertEqual(self.api.names()[1:], [
            "B:optimizer_step", "E:optimizer_step", "B:forward_pass", "E:forward_pass"])

    def test_nothing_recorded_while_compiling(self):
        self.install()
        _hooks.state.is_compiling = lambda: True
        model = nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        names = self.api.names()
        self.assertNotIn("B:forward_pass", names)
        self.assertNotIn("B:optimizer_step", names)
        self.assertNotIn("S", names)
        self.assertIn("B:backward_pass", names)  # not a compiled region's business

    def test_nothing_recorded_where_worker_info_is_set(self):
        self.install()
        _hooks.state.get_worker_info = lambda: object()
        model = nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.zeros(1, 2)).sum().backward()
        opt.step()
        self.assertEqual(self.api.events, [])

    def test_uninstall_removes_the_global_hooks(self):
        from torch.nn.modules import module as module_mod
        self.install()
        self.assertIn(auto._forward_pre_hook, module_mod._global_forward_pre_hooks.values())
        auto.uninstall()
        self.assertNotIn(auto._forward_pre_hook, module_mod._global_forward_pre_hooks.values())
        self.assertNotIn(auto._forward_hook, module_mod._global_forward_hooks.values())
        model = nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 1)).sum().backward()
        opt.step()
        self.assertEqual(self.api.events, [])


@needs_torch
class Torch2Test(WorkloadCase):
    """torch 2.x's real global hooks (no emulation): these skip on older torch."""

    def assert_same_as_patches(self):
        patched = self.run_workload(global_hooks=False)
        hooked = self.run_workload(global_hooks=True)
        self.assertEqual(hooked[1], patched[1])
        self.assertEqual(hooked[0], patched[0])

    @unittest.skipUnless(HAS_OPTIMIZER_HOOKS, "needs torch >= 2.0 (global optimizer hooks)")
    def test_torch20_optimizer_step_uses_global_hooks(self):
        self.install()
        self.assertEqual(auto.mechanisms()["optimizer_step"], "global hook")
        self.assertFalse(hasattr(torch.optim.Optimizer.__init__, "_stallscope_auto"))
        self.assert_same_as_patches()

    @unittest.skipUnless(HAS_ALWAYS_CALL, "needs torch >= 2.1 (forward hooks with always_call)")
    def test_torch21_forward_uses_global_hooks(self):
        self.install()
        self.assertEqual(auto.mechanisms()["forward_pass"], "global hook")
        self.assertFalse(hasattr(nn.Module.__call__, "_stallscope_auto"))
        self.assert_same_as_patches()

    @unittest.skipUnless(HAS_ALWAYS_CALL and hasattr(torch, "compile"), "needs torch >= 2.1")
    def test_torch21_compiled_model_is_one_forward_without_graph_break(self):
        dynamo = importlib.import_module("torch._dynamo")
        for global_hooks in (True, False):
            with self.subTest(global_hooks=global_hooks):
                auto.uninstall()
                dynamo.reset()
                api = FakeApi()
                self.install(api, global_hooks=global_hooks)
                model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
                # fullgraph: a graph break inside our hooks is an error
                compiled = torch.compile(model, backend="eager", fullgraph=True)
                for _ in range(3):
                    compiled(torch.randn(2, 4)).sum().backward()
                names = api.names()
                self.assertEqual(names.count("B:forward_pass"), 3, names)
                self.assertEqual(names.count("B:backward_pass"), 3, names)

    @unittest.skipUnless(HAS_ALWAYS_CALL and hasattr(torch, "compile"), "needs torch >= 2.1")
    def test_torch_compile_prints_no_warning_because_of_us(self):
        """Issue 26: torch 2.11 warned "Using `torch.compile(module)` when there are global
        hooks on modules" into the job; the job's own global hooks still get it."""
        dynamo = importlib.import_module("torch._dynamo")
        module_mod = importlib.import_module("torch.nn.modules.module")
        dynamo.reset()
        self.install()
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        compiled = torch.compile(model, backend="eager")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                compiled(torch.randn(2, 4)).sum().backward()
        self.assertEqual([str(w.message) for w in caught if "global hooks" in str(w.message)],
                         [])
        self.assertEqual(self.api.names().count("B:forward_pass"), 3)
        if not torch2_hooks.has_global_hook_check():
            return  # a torch without the warning
        handle = module_mod.register_module_forward_pre_hook(lambda module, args: None)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                compiled(torch.randn(2, 4))
        finally:
            handle.remove()
        self.assertTrue(any("global hooks" in str(w.message) for w in caught),
                        [str(w.message) for w in caught])


@needs_torch
class CompileWarningTest(InProcessBase):
    """torch.compile(module) with stallscope's global forward hooks prints no warning into the
    job (issue 26, item 6), but the job's own global hooks still get it; one forward_pass per
    call of the OptimizedModule. torch 2.11's check and OptimizedModule are emulated where
    this torch lacks them (torch2_hooks.compile_module_warning); Torch2Test checks the real one."""

    def setUp(self):
        super().setUp()
        stack = torch2_hooks.emulate_missing(self, optimizer=False)
        self.optimized_module = stack.enter_context(torch2_hooks.compile_module_warning())
        self.module_mod = importlib.import_module("torch.nn.modules.module")

    def call(self, module, times=3):
        """Calls `module` `times` times; returns the warnings it raised."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(times):
                module(torch.ones(2, 4)).sum().backward()
        return [str(w.message) for w in caught]

    def model(self):
        return self.optimized_module(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)))

    def test_no_warning_because_of_our_hooks(self):
        self.install()
        self.assertEqual(auto.mechanisms()["forward_pass"], "global hook")
        self.assertEqual(self.call(self.model()), [])
        self.assertEqual(self.api.names().count("B:forward_pass"), 3)  # not 6
        self.assertFalse(self.module_mod._has_any_global_hook())

    def test_the_jobs_own_global_hook_still_warns(self):
        self.install()
        handle = self.module_mod.register_module_forward_pre_hook(lambda module, args: None)
        try:
            self.assertTrue(self.module_mod._has_any_global_hook())
            self.assertEqual(self.call(self.model(), times=1), [torch2_hooks.COMPILE_WARNING])
        finally:
            handle.remove()
        self.assertEqual(self.call(self.model(), times=1), [])

    def test_without_stallscope_the_warning_is_torchs(self):
        original = self.module_mod._has_any_global_hook
        self.install()
        self.assertIsNot(self.module_mod._has_any_global_hook, original)
        auto.uninstall()
        self.assertIs(self.module_mod._has_any_global_hook, original)  # put back
        handle = self.module_mod.register_module_forward_hook(lambda m, a, o: None)
        try:
            self.assertEqual(self.call(self.model(), times=1), [torch2_hooks.COMPILE_WARNING])
        finally:
            handle.remove()

    def test_patches_register_no_global_hook(self):
        original = self.module_mod._has_any_global_hook
        self.install(global_hooks=False)
        self.assertIs(self.module_mod._has_any_global_hook, original)
        self.assertEqual(self.call(self.model()), [])
        self.assertEqual(self.api.names().count("B:forward_pass"), 3)


class DetectionTest(unittest.TestCase):
    """Global hooks are chosen by what torch's functions accept, not by its version string."""

    def test_always_call_is_found_in_the_signature(self):
        def torch21(hook, *, always_call=False):
            pass

        def torch20(hook):
            pass

        self.assertTrue(auto._accepts_keyword(torch21, "always_call"))
        self.assertFalse(auto._accepts_keyword(torch20, "always_call"))
        self.assertFalse(auto._accepts_keyword(None, "always_call"))


if __name__ == "__main__":
    unittest.main()
