"""A training loop without torch for GPU-verdict end-to-end tests: it marks its phases with the
stallscope API (explicit markers, as a user would) and sleeps or spins for set times, while the
fake NVML plays the GPU side (tests/fakes/nvml). Options:

  --steps N             steps to run (default 40)
  --data-busy           spin the CPU while loading (a CPU transform) instead of sleeping
  --data-ms X           time in data_loading per step (sleep: the GPU would be idle)
  --compute-ms X        time in forward_pass+backward_pass per step (sleep: the GPU "computes")
  --ranks N             start N processes with RANK/LOCAL_RANK/WORLD_SIZE set (default 1)
  --slow-rank R         this rank's compute takes --slow-factor times longer (straggler)
  --slow-factor F       default 1.5
"""
import argparse
import os
import subprocess
import sys
import time

import stallscope


def loop(args, rank):
    factor = args.slow_factor if rank == args.slow_rank else 1.0
    for _ in range(args.steps):
        with stallscope.phase("data_loading"):
            if args.data_busy:
                end = time.perf_counter() + args.data_ms / 1000
                while time.perf_counter() < end:
                    pass
            else:
                time.sleep(args.data_ms / 1000)
        with stallscope.phase("forward_pass"):
            time.sleep(args.compute_ms * factor / 2000)
        with stallscope.phase("backward_pass"):
            time.sleep(args.compute_ms * factor / 2000)
        stallscope.step()
    print(f"fake_job done steps={args.steps} rank={rank}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--data-ms", type=float, default=5)
    p.add_argument("--compute-ms", type=float, default=20)
    p.add_argument("--data-busy", action="store_true")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-factor", type=float, default=1.5)
    args = p.parse_args()
    if args.ranks > 1 and "RANK" not in os.environ:
        procs = []
        for r in range(args.ranks):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.ranks))
            procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
        sys.exit(max(p.wait() for p in procs))
    loop(args, int(os.environ.get("RANK", "0")))


if __name__ == "__main__":
    main()
