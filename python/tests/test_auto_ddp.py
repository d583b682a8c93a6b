"""Tests for comm_wait, DDP's exposed all-reduce wait cut from the end of backward_pass
(python/stallscope/_hooks.py), and the API it records with (stallscope._begin_at/_end_at).

DdpTest runs gloo DDP ranks in subprocesses under the startup shim with test_auto's fake core;
it skips where torch has no torch.distributed or no gloo.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import unittest

from test_auto import SubprocessBase, needs_gloo

# DDP on gloo, one process per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the test);
# rank 1 sleeps SLOW_RANK_SLEEP_S before each forward.
DDP_SCRIPT = textwrap.dedent("""
    import io, json, os, time, warnings
    import torch, torch.distributed as dist, torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: from the test
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    slow_s = float(os.environ.get("SLOW_RANK_SLEEP_S", "0")) if rank == 1 else 0.0
    for step in range(int(os.environ.get("STEPS", "5"))):
        x = torch.randn(16, 32, generator=torch.Generator().manual_seed(10 * step + rank))
        time.sleep(slow_s)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"loss {loss.item():.6f}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.save(model.module, io.BytesIO())  # its parameters carry our gradient hook
        torch.save(model, io.BytesIO())
    print("warnings", json.dumps([str(w.message) for w in caught]))
    print("pid", os.getpid())
    dist.destroy_process_group()
""")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_gloo
class DdpTest(SubprocessBase):
    """comm_wait: DDP's exposed all-reduce wait, cut from the end of backward_pass."""

    def run_ranks(self, world_size, shim=True, **env):
        """Runs DDP_SCRIPT as `world_size` ranks; returns {rank: (pid, losses, warnings)}."""
        script = os.path.join(self.tmp.name, "ddp.py")
        with open(script, "w") as f:
            f.write(DDP_SCRIPT)
        port = str(free_port())
        procs = [subprocess.Popen(
            [sys.executable, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=self.tmp.name, env=self.env(
                shim, RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo", **env))
            for rank in range(world_size)]
        results = {}
        for rank, proc in enumerate(procs):
            out, err = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0, err)
            self.assertNotIn("[stallscope]", err)
            lines = [line.split(" ", 1) for line in out.splitlines()]
            results[rank] = (int(dict(lines)["pid"]),
                             [value for key, value in lines if key == "loss"],
                             json.loads(dict(lines)["warnings"]))
        return results

    def steps(self, pid):
        """Per step of process `pid`: [(kind:name, ts_ns)] of its phase begins and ends."""
        steps, current = [], []
        for event_pid, ts_ns, rec in self.timed_events():
            if event_pid != pid:
                continue
            if rec == ["S"]:
                steps.append(current)
                current = []
            elif rec[0] in ("B", "E"):
                current.append((f"{rec[0]}:{rec[1]}", ts_ns))
        return steps

    def comm_waits_ms(self, pid):
        waits = []
        for step in self.steps(pid):
            times = dict(step)
            waits.append((times["E:comm_wait"] - times["B:comm_wait"]) / 1e6)
        return waits

    def test_one_rank_comm_wait_follows_backward(self):
        plain = self.run_ranks(1, shim=False)
        hooked = self.run_ranks(1)
        self.assertEqual(hooked[0][1], plain[0][1])  # same losses
        self.assertEqual(len(hooked[0][1]), 5)
        self.assertEqual(hooked[0][2], [])  # torch.save of the hooked model does not warn
        self.assertEqual(plain[0][2], [])
        steps = self.steps(hooked[0][0])
        self.assertEqual(len(steps), 5)
        for step in steps:
            self.assertEqual([name for name, _ in step], [
                "B:forward_pass", "E:forward_pass", "B:backward_pass", "E:backward_pass",
                "B:comm_wait", "E:comm_wait", "B:optimizer_step", "E:optimizer_step"])
            times = dict(step)
            self.assertEqual(times["E:backward_pass"], times["B:comm_wait"])
            self.assertLessEqual(times["B:backward_pass"], times["E:backward_pass"])
            self.assertLessEqual(times["B:comm_wait"], times["E:comm_wait"])
        hooks = [n for n in self.notes() if n["event"] == "hooks"]
        self.assertEqual(hooks[0]["mechanisms"]["comm_wait"], "patch")

    def test_slow_rank_shows_as_comm_wait_on_the_other_rank(self):
        ranks = self.run_ranks(2, STEPS="8", SLOW_RANK_SLEEP_S="0.05")
        # Steps 1-2 hold DDP's bucket rebuild (a broadcast in forward): not counted.
        fast = self.comm_waits_ms(ranks[0][0])[2:]
        slow = self.comm_waits_ms(ranks[1][0])[2:]
        self.assertEqual(len(fast), 6)
        fast_mean, slow_mean = sum(fast) / len(fast), sum(slow) / len(slow)
        self.assertGreater(fast_mean, 25, (fast, slow))  # rank 0 waits ~50 ms for rank 1
        self.assertGreater(fast_mean, slow_mean + 25, (fast, slow))


def built_package_dir():
    """The build tree's python/ when it is on PYTHONPATH (CTest puts it there), else None."""
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and os.path.exists(os.path.join(entry, "stallscope", "libstallscope_rec.so")):
            return entry
    return None


@unittest.skipUnless(built_package_dir(), "needs the built package on PYTHONPATH (CTest sets it)")
class RecordAtTest(unittest.TestCase):
    """stallscope._begin_at/_end_at, what auto records comm_wait with, in the real recorder."""

    def test_boundaries_at_given_times(self):
        from ring_file import read_ring
        code = ("import stallscope, time; t = time.monotonic_ns();"
                " stallscope._begin_at('comm_wait', t - 2000); stallscope._end_at('comm_wait', t);"
                " print(stallscope.enabled(), t)")
        with tempfile.TemporaryDirectory() as run_dir:
            env = {k: v for k, v in os.environ.items() if not k.startswith("STALLSCOPE")}
            env.update(PYTHONPATH=built_package_dir(), STALLSCOPE_RUN_DIR=run_dir,
                       STALLSCOPE_AUTO="0")
            result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                    text=True, timeout=60)
            self.assertEqual(result.returncode, 0, result.stderr)
            enabled, t = result.stdout.split()
            self.assertEqual(enabled, "True")
            phases_dir = os.path.join(run_dir, "phases")
            ring = read_ring(os.path.join(phases_dir, os.listdir(phases_dir)[0]))
        records = [(kind, ring["names"][i], ts) for kind, i, _, ts, _ in ring["records"]]
        self.assertEqual(records, [(1, "comm_wait", int(t) - 2000), (2, "comm_wait", int(t))])

    def test_no_op_when_not_recording(self):
        code = "import stallscope; print(stallscope._begin_at('x', 1), stallscope._end_at('x', 2))"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STALLSCOPE")}
        env["PYTHONPATH"] = built_package_dir()
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, timeout=60)
        self.assertEqual((result.stdout, result.stderr), ("None None\n", ""))


if __name__ == "__main__":
    unittest.main()
