#!/usr/bin/env python3
"""Start N ranks of a torch.distributed job on this machine, the way torchrun does.

    python3 examples/launch.py --nproc-per-node 2 examples/train.py --situation ddp
    python3 examples/launch.py --nproc-per-node 2 -m mypackage.train --lr 0.1
    # two nodes of 2 ranks (world size 4), each started on its node (here both on localhost):
    python3 examples/launch.py --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-port 29500 ...
    python3 examples/launch.py --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-port 29500 ...

Each rank is `<this Python> SCRIPT ARGS` (or `-m MODULE ARGS`) with the env:// rendezvous
variables torchrun sets: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, and OMP_NUM_THREADS=1 unless set (as
torchrun does with more than one process). Ranks share this terminal's stdout/stderr. With
--nnodes N, node K starts global ranks K*nproc .. K*nproc+nproc-1 of WORLD_SIZE N*nproc (as
torchrun's static rendezvous does); every node needs the same --master-addr/--master-port
(node 0 hosts the rendezvous, so a port must be given).

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


def rank_env(base, local_rank, nproc, port, nnodes=1, node_rank=0, addr="127.0.0.1"):
    env = dict(base)
    rank = node_rank * nproc + local_rank
    env.update({
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nnodes * nproc),
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": str(node_rank),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(nnodes * nproc),
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
    parser.add_argument("--nnodes", type=int, default=1, help="nodes of the job (default 1)")
    parser.add_argument("--node-rank", "--node_rank", type=int, default=0,
                        help="this node's rank, 0 .. nnodes-1 (default 0)")
    parser.add_argument("--master-addr", "--master_addr", default="127.0.0.1",
                        help="node 0's address (default 127.0.0.1)")
    parser.add_argument("--master-port", "--master_port", type=int, default=0,
                        help="rendezvous port (default: a free one; required with --nnodes > 1)")
    parser.add_argument("--kill-after", type=float, default=10.0,
                        help="seconds between SIGTERM and SIGKILL when a rank fails")
    parser.add_argument("-m", dest="module", action="store_true",
                        help="run the target as a module (python -m)")
    parser.add_argument("target", help="script (or module with -m)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the script")
    opts = parser.parse_args(argv)
    if opts.nproc_per_node < 1:
        parser.error("--nproc-per-node must be at least 1")
    if opts.nnodes < 1 or not 0 <= opts.node_rank < opts.nnodes:
        parser.error("--node-rank must be in 0 .. --nnodes - 1")
    if opts.nnodes > 1 and not opts.master_port:
        parser.error("--master-port is required with --nnodes > 1 (every node must use it)")
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
        procs.append(subprocess.Popen(command, env=rank_env(
            os.environ, rank, opts.nproc_per_node, port, opts.nnodes, opts.node_rank,
            opts.master_addr)))
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
                print(f"launch.py: local rank {rank} exited with {status}; stopping the other ranks",
                      file=sys.stderr, flush=True)
                stop(live, opts.kill_after)
                live = []
                break
        time.sleep(0.05)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
