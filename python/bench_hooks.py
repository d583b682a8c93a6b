#!/usr/bin/env python3
"""What the zero-code hooks add to a training step, measured in one process (issue 9: `run`'s
overhead in a form this machine's wall-clock noise cannot hide).

    PYTHONPATH=build/python /usr/bin/python3 python/bench_hooks.py [--layers 12] [--rounds 40]

A model of --layers tiny Linear layers in an nn.Sequential (so a forward is 1 + layers module
calls, and the hooks' cost is not lost in the math), one training step = forward, backward,
optimizer step. The same loop runs with the hooks installed (recording into a temporary run
directory through the package's real recorder) and uninstalled, in alternating rounds of 200
steps, many times; the best round of each kind is compared, so a noisy moment costs one round,
not the result. Prints the cost per step, per module call, and the number of phase records per
step. Needs torch.

GPU timing (issue 10: target <= 3 us per phase boundary): `--device cuda` runs the model on the
GPU and adds a third kind of round, hooks with GPU timing off (STALLSCOPE_GPU_TIME=0); the
difference to hooks with it on, over the 6 timed boundaries of a step (forward, backward,
optimizer: begin and end), is its cost per boundary, CUDA's event record and query included.
`--fake-cuda` does the same on a machine without CUDA, with torch.cuda's events replaced by
no-op Python objects: the bookkeeping alone, a lower bound.
"""

import argparse
import os
import sys
import tempfile
import time


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--steps", type=int, default=200, help="steps per round")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--device", default="cpu", help="cpu or cuda")
    gpu.add_argument("--fake-cuda", action="store_true", help="no-op CUDA events (no GPU needed)")
    args = p.parse_args(argv)
    run_dir = tempfile.mkdtemp(prefix="stallscope-bench-hooks-")
    os.environ["STALLSCOPE_RUN_DIR"] = run_dir
    os.environ["STALLSCOPE_AUTO"] = "0"  # no shim install at import: this script installs
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [x for x in sys.path if os.path.abspath(x or ".") != here]
    import torch
    import stallscope
    from stallscope import auto

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.fake_cuda:
        sys.path.insert(0, os.path.join(here, "tests"))
        import fake_cuda
        fake_cuda.install(torch, gpu_ms=0.001)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(args.layers)])
    model = model.to(args.device)
    x = torch.randn(4, 8, device=args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    gpu_rounds = args.fake_cuda or args.device.startswith("cuda")

    def round_ns():
        # A new optimizer each round: on torch < 2.0 the hooks wrap an optimizer class's step
        # when an instance is created after install().
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        t0 = time.perf_counter_ns()
        for _ in range(args.steps):
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sync()
        return (time.perf_counter_ns() - t0) / args.steps

    modes = ("hooks", "bare") + (("hooks_no_gpu_time",) if gpu_rounds else ())
    best = {mode: float("inf") for mode in modes}
    round_ns()  # warm-up
    for _ in range(args.rounds):
        for mode in modes:
            auto.uninstall()
            if mode != "bare":
                os.environ["STALLSCOPE_GPU_TIME"] = "0" if mode == "hooks_no_gpu_time" else "1"
                auto.install(stallscope)
            best[mode] = min(best[mode], round_ns())
    os.environ["STALLSCOPE_GPU_TIME"] = "1"
    auto.uninstall()
    auto.install(stallscope)
    mechanisms = auto.mechanisms()
    auto.uninstall()
    # records per hooked step, from the ring's write index around one more hooked round
    auto.install(stallscope)
    before = _records(run_dir)
    round_ns()
    writer_records = (_records(run_dir) - before) / args.steps
    auto.uninstall()
    extra = best["hooks"] - best["bare"]
    calls = args.layers + 1
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, backend "
          f"{stallscope.backend()}; forward: {mechanisms.get('forward_pass')}, "
          f"optimizer_step: {mechanisms.get('optimizer_step')}")
    print(f"step without hooks {best['bare'] / 1e3:.1f} us, with hooks "
          f"{best['hooks'] / 1e3:.1f} us: +{extra / 1e3:.2f} us per step "
          f"({extra / best['bare'] * 100:.1f}% of this deliberately tiny step), "
          f"{writer_records:.1f} phase records per step, {calls} module calls per forward")
    if gpu_rounds:
        per_boundary = (best["hooks"] - best["hooks_no_gpu_time"]) / 6
        print(f"GPU timing ({mechanisms.get('gpu_time')}"
              f"{', fake no-op events' if args.fake_cuda else ''}): +{per_boundary / 1e3:.2f} us "
              f"per phase boundary (hooks without it {best['hooks_no_gpu_time'] / 1e3:.1f} us "
              f"per step; target <= 3 us)")
    return 0


def _records(run_dir):
    """Records claimed so far in the run's rings (write_index at offset 128, src/phase/README.md)."""
    import glob
    import struct
    total = 0
    for ring in glob.glob(os.path.join(run_dir, "phases", "*.ring")):
        with open(ring, "rb") as f:
            f.seek(128)
            total += struct.unpack("<Q", f.read(8))[0]
    return total


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
