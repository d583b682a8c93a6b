#!/usr/bin/env python3
"""Start N ranks of a torch.distributed job on this machine, the way torchrun does.

    python3 examples/launch.py --nproc-per-node 2 examples/train.py --situation ddp
    python3 examples/launch.py --nproc-per-node 2 -m mypackage.train --lr 0.1

Each rank is `<this Python> SCRIPT ARGS` (or `-m MODULE ARGS`) with the env:// rendezvous
variables torchrun sets: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, and OMP_NUM_THREADS=1 unless set (as
torchrun does with more than one process). Ranks share this terminal's stdout/stderr.

Why not torchrun: Debian's torch 1.13 torchrun fails under Python 3.11 before it starts any rank
(torch.distributed.elastic's Std.from_str returns None; AttributeError in to_map). Where
torchrun works, stallscope runs it the same way: `stallscope run -- torchrun ...`.

Exit status: 0 when every rank exits 0; else the first failing rank's code (128+N for signal N),
after the other ranks are stopped (SIGTERM, then SIGKILL after --kill-after seconds). SIGINT,
SIGTERM and SIGHUP are forwarded to every rank. Python 3.8+, standard library only.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    """A TCP port nobody listens on now (the rendezvous binds it a moment later, as torchrun's
    standalone mode does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(base, rank, nproc, port):
    env = dict(base)
    env.update({
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nproc),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(nproc),
    })
    if nproc > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def exit_code(returncode):
    return 128 - returncode if returncode < 0 else returncode


def stop(procs, kill_after):
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + kill_after
    for p in procs:
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.poll() is None:
            p.kill()
            p.wait()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1,
                        help="ranks to start (default 1)")
    parser.add_argument("--master-port", "--master_port", type=int, default=0,
                        help="rendezvous port (default: a free one)")
    parser.add_argument("--kill-after", type=float, default=10.0,
                        help="seconds between SIGTERM and SIGKILL when a rank fails")
    parser.add_argument("-m", dest="module", action="store_true",
                        help="run the target as a module (python -m)")
    parser.add_argument("target", help="script (or module with -m)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the script")
    opts = parser.parse_args(argv)
    if opts.nproc_per_node < 1:
        parser.error("--nproc-per-node must be at least 1")
    port = opts.master_port or free_port()
    command = [sys.executable] + (["-m"] if opts.module else []) + [opts.target] + opts.args
    procs = []
    forwarded = []

    def forward(signum, _frame):
        forwarded.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    for rank in range(opts.nproc_per_node):
        procs.append(subprocess.Popen(command, env=rank_env(os.environ, rank,
                                                            opts.nproc_per_node, port)))
    status = 0
    live = list(procs)
    while live:
        for p in list(live):
            code = p.poll()
            if code is None:
                continue
            live.remove(p)
            if code != 0 and status == 0:
                status = exit_code(code)
                rank = procs.index(p)
                print(f"launch.py: rank {rank} exited with {status}; stopping the other ranks",
                      file=sys.stderr, flush=True)
                stop(live, opts.kill_after)
                live = []
                break
        time.sleep(0.05)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
