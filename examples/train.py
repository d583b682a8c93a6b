#!/usr/bin/env python3
"""A small, real PyTorch training job with knobs that make it slow in known ways.

stallscope wraps it from the outside (`stallscope run -- python3 examples/train.py ...`); this file
imports nothing from stallscope. Each `--situation` preset recreates one bottleneck from the
diagnosis playbooks (seed 000 §1-4; seed 001 T1, T3-T8):

  compute           forward/backward dominate; data is an in-memory tensor bank
  data_cpu          expensive per-sample CPU transform in __getitem__, num_workers=0
  data_cpu_workers  the same transform with num_workers=2
  data_io           one file per sample, read with the page cache bypassed (O_DIRECT)
  periodic          torch.save checkpoints and a no-grad sampling loop every N steps
  logging           per-step .item() calls and heavy numpy metrics on CPU copies
  oversub           16 intra-op threads in the trainer and in each worker on a small box
  ddp               torch.distributed DDP (gloo on CPU, nccl on GPUs), ranks balanced
  ddp_straggler     the same, but rank 1's input pipeline does 4x the transform work

Multi-rank: start the ranks with a launcher that sets the env:// variables (MASTER_ADDR,
MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE), e.g. examples/launch.py or torchrun:

  python3 examples/launch.py --nproc-per-node 2 examples/train.py --situation ddp_straggler

Explicit flags override a preset. See examples/README.md for the measured numbers.

Start-up shapes (off by default; any preset): --setup-s S sleeps S seconds after the model and
loader are built, before the loop (a long set-up); --first-batch-s S makes the first batch S
seconds slower inside data loading (the first item served, once per run); --warmup-steps N with
--warmup-s S makes each of the first N training forwards S seconds slower (a compile or cuDNN
autotuning in the first steps).
"""

import argparse
import fcntl
import functools
import json
import mmap
import multiprocessing
import os
import platform
import random
import shutil
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

NUM_CLASSES = 10
IMAGE_RES = 64  # every sample reaches the model as 3 x 64 x 64 float32
PAGE_BYTES = 4096  # O_DIRECT needs block-aligned offsets, sizes and buffers

# Preset values were tuned on a 2-core VM with Debian's CPU-only torch 1.13 so that each run takes
# roughly 10-20 s and the intended phase clearly dominates (examples/README.md has the timings).
SITUATIONS = {
    "compute": dict(model="cnn", size=16, batch_size=32, threads=2, steps=150),
    "data_cpu": dict(model="mlp", size=128, batch_size=32, transform_ms=4.0, steps=80),
    "data_cpu_workers": dict(model="mlp", size=128, batch_size=32, transform_ms=4.0,
                             num_workers=2, steps=80),
    "data_io": dict(model="mlp", size=128, batch_size=32, dataset="files", io_mode="direct",
                    file_res=512, dataset_size=512, steps=200),
    "periodic": dict(model="mlp", size=512, batch_size=32, checkpoint_every=30,
                     checkpoint_extra_mb=128, sample_every=25, sample_iters=20, steps=150),
    "logging": dict(model="mlp", size=512, batch_size=32, log_every_step=True, steps=150),
    "oversub": dict(model="cnn", size=16, batch_size=32, threads=16, worker_threads=16,
                    num_workers=2, transform_ms=1.0, steps=30),
    # Two ranks share the 2-core VM: one intra-op thread each, a transform heavy enough that the
    # slow rank's loading dominates its step.
    "ddp": dict(model="mlp", size=256, batch_size=32, transform_ms=1.0, steps=40),
    "ddp_straggler": dict(model="mlp", size=256, batch_size=32, transform_ms=1.0,
                          slow_rank=1, slow_factor=4.0, steps=40),
    # Main-rank side work: rank 0 alone samples every 10 steps; the other ranks wait for it at
    # their next all-reduce (in backward).
    "ddp_main_rank": dict(model="mlp", size=256, batch_size=32, transform_ms=1.0,
                          sample_every=10, sample_iters=40, side_work_rank=0, steps=60),
    # Communication-bound DDP: a wide model (~4.7 M parameters, 19 MB of gradients per step) on a
    # small batch with cheap loading: both ranks wait alike in the gradients' all-reduce.
    "ddp_comm": dict(model="mlp", size=2048, batch_size=4, optimizer="sgd", steps=60),
}


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------

def class_prototypes(seed, res):
    """One smooth random pattern per class, so the labels are learnable (loss goes down)."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(size=(NUM_CLASSES, 3, 8, 8)).astype(np.float32)
    reps = res // 8
    return np.repeat(np.repeat(coarse, reps, axis=2), reps, axis=3)


def make_images(seed, n, res):
    """n uint8 images (n, 3, res, res) and their labels, deterministic in seed. Content is made
    at 64 x 64 and upsampled (plus fine noise), so striding back down to 64 keeps the signal."""
    rng = np.random.default_rng(seed + 1)
    protos = class_prototypes(seed, IMAGE_RES)
    labels = rng.integers(0, NUM_CLASSES, size=n).astype(np.int64)
    images = np.empty((n, 3, res, res), dtype=np.uint8)
    up = res // IMAGE_RES
    for i in range(n):
        img = 128 + 40 * protos[labels[i]] + rng.normal(0, 30, size=(3, IMAGE_RES, IMAGE_RES))
        img = np.clip(img, 0, 247).astype(np.uint8)
        if up > 1:
            img = np.repeat(np.repeat(img, up, axis=1), up, axis=2)
            img += rng.integers(0, 8, size=img.shape, dtype=np.uint8)
        images[i] = img
    return images, labels


def gaussian_kernel5():
    k1 = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
    k2 = torch.outer(k1, k1)
    k2 = k2 / k2.sum()
    return k2.expand(3, 1, 5, 5).contiguous()  # depthwise: one 5x5 filter per channel


def augment(x, reps, seed, kernel):
    """The expensive CPU transform: `reps` rounds of flip, 5x5 blur, colour jitter, noise, shift.

    Plain torch ops on one 3x64x64 sample, the way torchvision-style augmentation pipelines spend
    their time. Deterministic in `seed`, so results do not depend on which worker ran it. The
    coin flips use Python's random, not tensor.item(): a transform is not a host sync.
    """
    gen = torch.Generator().manual_seed(seed)
    coins = random.Random(seed)
    with torch.no_grad():
        for _ in range(reps):
            if coins.random() < 0.5:
                x = x.flip(-1)
            x = F.conv2d(x.unsqueeze(0), kernel, padding=2, groups=3).squeeze(0)
            scale = 1.0 + 0.2 * (torch.rand(3, 1, 1, generator=gen) - 0.5)
            x = x * scale + 0.02 * torch.randn(x.shape, generator=gen)
            x = torch.roll(x, shifts=(coins.randint(-2, 2), coins.randint(-2, 2)), dims=(1, 2))
        return (x - x.mean()) / (x.std() + 1e-5)


def measure_round_ms():
    """What one augment() round costs here on one thread, in ms (the median of 5 trials)."""
    kernel = gaussian_kernel5()
    x = torch.rand(3, IMAGE_RES, IMAGE_RES)
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # workers run with 1 thread (DataLoader's default), so measure that
    try:
        augment(x, 5, 0, kernel)  # warm-up
        trials = []
        for _ in range(5):
            t = time.perf_counter()
            augment(x, 20, 0, kernel)
            trials.append((time.perf_counter() - t) / 20)
    finally:
        torch.set_num_threads(saved_threads)
    return sorted(trials)[len(trials) // 2] * 1e3


def calibration_key():
    """What a stored round cost holds for: this machine, this torch, this image size."""
    return {"version": 1, "host": platform.node(), "torch": torch.__version__,
            "image_res": IMAGE_RES}


def round_cost_ms(path, recalibrate=False):
    """(ms per augment() round, True when measured now): stored in `path` the first time and
    read back after, so that two runs of one command do the same work per sample (a cost
    measured at every start varied 9-18 rounds for 4 ms, by the machine's load at that moment).
    Measured again with `recalibrate`, or when the file holds another machine's or torch's
    number, or is unreadable. Processes started together (the ranks of a job) take a lock:
    the first measures, the others read its number."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        key = calibration_key()
        if not recalibrate:
            try:
                with open(path) as f:
                    stored = json.load(f)
                if (isinstance(stored, dict) and all(stored.get(k) == v for k, v in key.items())
                        and isinstance(stored.get("round_ms"), (int, float))
                        and stored["round_ms"] > 0):
                    return float(stored["round_ms"]), False
            except (OSError, ValueError):
                pass
        ms = measure_round_ms()
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(dict(key, round_ms=ms, measured=time.strftime("%Y-%m-%dT%H:%M:%S%z")), f)
            f.write("\n")
        os.replace(tmp, path)
        return ms, True


def transform_rounds(args):
    """augment() rounds per sample: --transform-reps as given, else --transform-ms at the round
    cost stored for this machine (round_cost_ms). Prints where the count came from."""
    if args.transform_reps or args.transform_ms <= 0:
        return args.transform_reps
    path = args.calibration or os.path.join(args.data_dir, "transform-calibration.json")
    ms, measured = round_cost_ms(path, args.recalibrate)
    reps = max(1, round(args.transform_ms / ms))
    print(f"transform: {reps} rounds a sample for --transform-ms {args.transform_ms:g} at "
          f"{ms:.3f} ms a round, {'measured now' if measured else 'as measured before'} "
          f"({path}; --recalibrate measures again)", flush=True)
    return reps


class FirstBatchDelay:
    """--first-batch-s: the first item served in the run sleeps `seconds`, inside data loading.
    Only the main process (no workers) or worker 0 sleeps, the worker that makes the first
    batch, and only once per run: it claims a marker file first, so the new workers of a later
    epoch (non-persistent workers) do not sleep again. Each process tries once."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.dir = tempfile.mkdtemp(prefix="train-first-batch-") if seconds > 0 else None
        self._tried_in = None  # pid of the process that has tried

    def __call__(self):
        if self.dir is None or self._tried_in == os.getpid():
            return
        self._tried_in = os.getpid()
        worker = torch.utils.data.get_worker_info()
        if worker is not None and worker.id != 0:
            return
        try:
            os.close(os.open(os.path.join(self.dir, "claimed"), os.O_CREAT | os.O_EXCL))
        except OSError:
            return  # claimed before: a later epoch's worker, or the run is over
        time.sleep(self.seconds)

    def close(self):
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


class BaseImages(Dataset):
    """Shared transform logic: uint8 image -> float 3x64x64 (+ optional expensive augment)."""

    def __init__(self, labels, transform_reps, seed):
        self.labels = labels
        self.transform_reps = transform_reps
        self.seed = seed
        self.kernel = gaussian_kernel5()
        self.first_item = None  # FirstBatchDelay with --first-batch-s

    def __len__(self):
        return len(self.labels)

    def finish(self, idx, img_u8):
        if self.first_item is not None:
            self.first_item()
        x = torch.from_numpy(np.ascontiguousarray(img_u8, dtype=np.float32)) / 255.0
        if self.transform_reps:
            x = augment(x, self.transform_reps, self.seed * 1_000_003 + idx, self.kernel)
        return x, int(self.labels[idx])


class MemoryImages(BaseImages):
    """An in-memory bank of images: loading costs nothing unless a transform is requested, or a
    latency per sample (a remote object store: the loader sleeps, the CPU stays free)."""

    def __init__(self, n, transform_reps, seed, latency_ms=0.0):
        images, labels = make_images(seed, n, IMAGE_RES)
        super().__init__(labels, transform_reps, seed)
        self.images = images
        self.latency_s = latency_ms / 1e3

    def __getitem__(self, idx):
        if self.latency_s:
            time.sleep(self.latency_s)
        return self.finish(idx, self.images[idx])


class FileImages(BaseImages):
    """One raw uint8 file per sample (3 x res x res), decoded by striding down to 64 x 64.

    io_mode:
      direct   O_DIRECT read into a page-aligned mmap buffer: every read goes to the block
               device, so the reader shows the real I/O signature (state D, iowait, read_bytes).
      fadvise  posix_fadvise(POSIX_FADV_DONTNEED) drops the file's cached pages, then a normal read.
      cached   plain buffered read (after the first epoch it is served from the page cache).
    io_latency_ms adds a sleep per file to emulate a slow network filesystem; a sleeping reader is
    in state S, not D, so it does not look like disk I/O to a host sampler.
    """

    def __init__(self, root, n, res, io_mode, io_latency_ms, transform_reps, seed):
        self.root = ensure_file_dataset(root, n, res, seed)
        super().__init__(np.load(os.path.join(self.root, "labels.npy")), transform_reps, seed)
        self.res = res
        self.nbytes = 3 * res * res
        self.file_bytes = -(-self.nbytes // PAGE_BYTES) * PAGE_BYTES
        self.io_latency_s = io_latency_ms / 1e3
        self.io_mode = resolve_io_mode(io_mode, self.path(0))
        self._buf = None  # created lazily in each process; mmap objects do not pickle

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_buf"] = None
        return state

    def path(self, idx):
        return os.path.join(self.root, f"{idx:06d}.raw")

    def read(self, idx):
        path = self.path(idx)
        if self.io_mode == "direct":
            if self._buf is None:
                self._buf = mmap.mmap(-1, self.file_bytes)  # anonymous mmap: page-aligned
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            try:
                got = os.readv(fd, [self._buf])
            finally:
                os.close(fd)
            data = np.frombuffer(self._buf, dtype=np.uint8, count=self.nbytes).copy()
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                if self.io_mode == "fadvise":
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                data = np.frombuffer(os.read(fd, self.file_bytes), dtype=np.uint8)[: self.nbytes]
                got = len(data)
            finally:
                os.close(fd)
        if got < self.nbytes:
            raise IOError(f"{path}: short read ({got} of {self.nbytes} bytes)")
        if self.io_latency_s:
            time.sleep(self.io_latency_s)
        return data.reshape(3, self.res, self.res)

    def __getitem__(self, idx):
        img = self.read(idx)
        stride = self.res // IMAGE_RES
        return self.finish(idx, img[:, ::stride, ::stride])


def ensure_file_dataset(data_dir, n, res, seed):
    """Generate the small-files dataset on first use; a COMPLETE marker guards partial writes."""
    root = os.path.join(data_dir, f"images-r{res}-n{n}-s{seed}")
    marker = os.path.join(root, "COMPLETE")
    if os.path.exists(marker):
        return root
    os.makedirs(root, exist_ok=True)
    print(f"generating {n} files of {3 * res * res} bytes in {root} ...", flush=True)
    nbytes = 3 * res * res
    pad = -(-nbytes // PAGE_BYTES) * PAGE_BYTES - nbytes
    labels = []
    chunk = 32
    for start in range(0, n, chunk):
        count = min(chunk, n - start)
        images, lab = make_images(seed + start, count, res)
        labels.extend(lab.tolist())
        for j in range(count):
            with open(os.path.join(root, f"{start + j:06d}.raw"), "wb") as f:
                f.write(images[j].tobytes())
                f.write(b"\0" * pad)
    np.save(os.path.join(root, "labels.npy"), np.asarray(labels, dtype=np.int64))
    with open(marker, "w") as f:
        json.dump({"n": n, "res": res, "seed": seed}, f)
    return root


def resolve_io_mode(io_mode, probe_path):
    """direct falls back to fadvise where the filesystem refuses O_DIRECT (tmpfs, some overlays)."""
    if io_mode != "direct":
        return io_mode
    try:
        fd = os.open(probe_path, os.O_RDONLY | os.O_DIRECT)
        os.close(fd)
        return "direct"
    except OSError as e:
        print(f"O_DIRECT not supported here ({e.strerror}); using posix_fadvise(DONTNEED)",
              flush=True)
        return "fadvise"


def worker_init(threads, worker_id):
    # DataLoader sets 1 thread in each worker; --worker-threads undoes that (oversubscription).
    if threads:
        torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------
# Model and side work
# ----------------------------------------------------------------------------------------------

def make_model(kind, size):
    if kind == "mlp":
        # Pool 4x first: Debian's torch uses a generic (slow) BLAS; keep the Linear layers modest.
        return nn.Sequential(
            nn.AvgPool2d(4), nn.Flatten(),
            nn.Linear(3 * (IMAGE_RES // 4) ** 2, size), nn.ReLU(),
            nn.Linear(size, size), nn.ReLU(),
            nn.Linear(size, NUM_CLASSES))
    c = size  # convolutions go through oneDNN, which uses all intra-op threads
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(),
        nn.Conv2d(2 * c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * c, 4 * c, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * c, NUM_CLASSES))


def add_warmup_delay(model, steps, seconds):
    """--warmup-steps/--warmup-s: the model's first `steps` training forwards (grad enabled)
    each sleep `seconds` first, inside the forward pass, as a compile or cuDNN autotuning makes
    the first steps slow. A forward pre hook of the model itself (not a global one)."""
    if steps <= 0 or seconds <= 0:
        return
    left = [steps]

    def delay(module, args):
        if left[0] > 0 and torch.is_grad_enabled():
            left[0] -= 1
            time.sleep(seconds)

    model.register_forward_pre_hook(delay)


def sample(model, batch, iters, device):
    """A no-grad generation loop: refine a batch of noise images by repeated forward passes."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        x = torch.randn(batch, 3, IMAGE_RES, IMAGE_RES, device=device)
        for _ in range(iters):
            conf = model(x).softmax(-1).amax(-1)
            x = 0.98 * x + 0.02 * conf.view(-1, 1, 1, 1) * torch.randn_like(x)
    model.train(was_training)
    return x


def heavy_metrics(model, logits, y, loss):
    """Per-step metrics computed the slow way: host syncs plus numpy over CPU copies of weights."""
    out = {"loss": loss.item(), "acc": (logits.argmax(-1) == y).float().mean().item()}
    for name, p in model.named_parameters():
        w = p.detach().cpu().numpy()
        g = p.grad.detach().cpu().numpy() if p.grad is not None else np.zeros_like(w)
        out[name] = {
            "w_pct": np.percentile(np.abs(w), [50, 90, 99]).tolist(),
            "g_pct": np.percentile(np.abs(g), [50, 90, 99]).tolist(),
            "w_hist": np.histogram(w, bins=64)[0].tolist(),
            "g_hist": np.histogram(g, bins=64)[0].tolist(),
            "g_norm": float(np.linalg.norm(g)),
            "update_ratio": float(np.linalg.norm(g) / (np.linalg.norm(w) + 1e-12)),
        }
    return out


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------

def build_parser():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--situation", choices=sorted(SITUATIONS), help="preset; flags override it")
    p.add_argument("--steps", type=int, default=100, help="stop after this many steps (0: no cap)")
    p.add_argument("--epochs", type=int, default=0, help="stop after this many epochs (0: no cap)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--size", type=int, default=128, help="mlp hidden width / cnn base channels")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, ...")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads in the trainer (Debian's torch defaults to 1)")
    # data
    p.add_argument("--dataset", choices=["memory", "files"], default="memory")
    p.add_argument("--dataset-size", type=int, default=1024, help="number of samples")
    p.add_argument("--transform-ms", type=float, default=0.0,
                   help="CPU cost of the per-sample augmentation, made a round count with the "
                        "cost of one round on this machine, measured once and stored "
                        "(--calibration), so every run of a command does the same work")
    p.add_argument("--transform-reps", type=int, default=0,
                   help="fix the augmentation round count instead of converting --transform-ms")
    p.add_argument("--calibration", metavar="FILE", default=None,
                   help="where the cost of one augmentation round is stored (default: "
                        "DATA_DIR/transform-calibration.json)")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure the cost of one augmentation round again and store it")
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--worker-threads", type=int, default=0,
                   help="intra-op threads inside each worker (0: DataLoader default of 1)")
    p.add_argument("--mp-context", default="forkserver",
                   help="DataLoader multiprocessing_context (fork may crash after OpenMP use)")
    p.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--persistent-workers", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--prefetch-factor", type=int, default=None)
    p.add_argument("--data-dir",
                   default=os.path.join(tempfile.gettempdir(), "stallscope-example-data"))
    p.add_argument("--file-res", type=int, default=256, help="stored resolution of each file")
    p.add_argument("--io-mode", choices=["direct", "fadvise", "cached"], default="direct")
    p.add_argument("--io-latency-ms", type=float, default=0.0,
                   help="sleep per sample read, emulating a network filesystem or object store "
                        "(state S, not D)")
    # side work
    p.add_argument("--out-dir",
                   default=os.path.join(tempfile.gettempdir(), "stallscope-example-out"))
    p.add_argument("--checkpoint-every", type=int, default=0, help="torch.save every N steps")
    p.add_argument("--checkpoint-extra-mb", type=int, default=0,
                   help="extra MiB of tensors in each checkpoint, standing in for the weights of "
                        "a model too big to train on a small CPU box")
    p.add_argument("--sample-every", type=int, default=0, help="no-grad sampling every N steps")
    p.add_argument("--sample-iters", type=int, default=40)
    p.add_argument("--sample-batch", type=int, default=64)
    p.add_argument("--log-every-step", action=argparse.BooleanOptionalAction, default=False,
                   help=".item() and numpy metrics on CPU copies every step")
    p.add_argument("--side-work-rank", type=int, default=-1,
                   help="multi-rank: only this rank checkpoints, samples and logs (-1: every "
                        "rank)")
    p.add_argument("--print-every", type=int, default=10)
    # start-up shapes
    p.add_argument("--setup-s", type=float, default=0.0,
                   help="sleep this long after the model and loader are built, before the "
                        "loop (a long pre-loop set-up)")
    p.add_argument("--first-batch-s", type=float, default=0.0,
                   help="the first batch takes this much longer, inside data loading (the first "
                        "item served sleeps; once per run, also with workers)")
    p.add_argument("--warmup-steps", type=int, default=0,
                   help="the first N training forwards each take --warmup-s longer")
    p.add_argument("--warmup-s", type=float, default=0.0,
                   help="extra seconds inside each of the first --warmup-steps forwards "
                        "(compile-like warm-up)")
    # test hooks
    p.add_argument("--slow-rank", type=int, default=-1,
                   help="multi-rank: this rank's transform and I/O latency are --slow-factor "
                        "times longer")
    p.add_argument("--slow-factor", type=float, default=4.0)
    p.add_argument("--dist-backend", default="auto",
                   help="multi-rank: gloo, nccl, or auto (nccl on CUDA, else gloo)")
    p.add_argument("--crash-at-step", type=int, default=-1, help="raise RuntimeError at step N")
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code after training")
    p.add_argument("--profile", metavar="DIR", default=None,
                   help="torch.profiler trace of steps 3..(--profile-steps + 2) to "
                        "DIR/trace.json (read it with `stallscope trace DIR`)")
    p.add_argument("--profile-steps", type=int, default=20)
    return p


def parse_args(argv):
    parser = build_parser()
    first, _ = parser.parse_known_args(argv)
    if first.situation:
        parser.set_defaults(**SITUATIONS[first.situation])
    args = parser.parse_args(argv)
    if args.file_res % IMAGE_RES:
        parser.error(f"--file-res must be a multiple of {IMAGE_RES}")
    return args


class Distributed:
    """The job's place in a torch.distributed run (env:// rendezvous, as torchrun and
    examples/launch.py set it up), or a single process when WORLD_SIZE is unset or 1."""

    def __init__(self, backend):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.backend = None
        if self.world > 1:
            import torch.distributed as dist
            if backend == "auto":
                backend = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend=backend)
            self.backend = backend

    @property
    def active(self):
        return self.backend is not None

    def close(self):
        if self.active:
            import torch.distributed as dist
            dist.destroy_process_group()


def make_loader(args, dataset, dist):
    kw = dict(batch_size=args.batch_size, num_workers=args.num_workers,
              pin_memory=args.pin_memory, drop_last=True)
    if dist.active:
        # Each rank reads its own shard, the same number of batches on every rank.
        from torch.utils.data.distributed import DistributedSampler
        kw["sampler"] = DistributedSampler(dataset, num_replicas=dist.world, rank=dist.rank,
                                           shuffle=True, seed=args.seed, drop_last=True)
    else:
        kw.update(shuffle=True, generator=torch.Generator().manual_seed(args.seed))
    if args.num_workers > 0:
        if args.mp_context == "forkserver":
            # Python 3.11's forkserver never preloads __main__ (its preload list asks for a
            # "main_path" key that spawn no longer provides), so each worker would import torch
            # again: ~1-2 s per worker start. Preloading torch makes a worker start take ms.
            multiprocessing.set_forkserver_preload(["torch", "numpy"])
        kw.update(persistent_workers=args.persistent_workers,
                  multiprocessing_context=args.mp_context,
                  worker_init_fn=functools.partial(worker_init, args.worker_threads))
        if args.prefetch_factor is not None:
            kw["prefetch_factor"] = args.prefetch_factor
    return DataLoader(dataset, **kw)


def start_profiler(args, device):
    """torch.profiler over a window of steps (skip 1, warm up 1, record --profile-steps)."""
    if not args.profile:
        return None
    import torch.profiler as tp
    os.makedirs(args.profile, exist_ok=True)
    activities = [tp.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(tp.ProfilerActivity.CUDA)
    path = os.path.join(args.profile, "trace.json")
    prof = tp.profile(activities=activities,
                      schedule=tp.schedule(wait=1, warmup=1, active=args.profile_steps, repeat=1),
                      on_trace_ready=lambda p: p.export_chrome_trace(path))
    prof.start()
    return prof


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(args.threads)
    dist = Distributed(args.dist_backend)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda" and dist.active:
        device = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(device)

    reps = transform_rounds(args)
    latency_ms = args.io_latency_ms
    if dist.rank == args.slow_rank:  # the straggler: more of whatever its loading costs
        reps = max(1, round(reps * args.slow_factor)) if reps else 0
        latency_ms *= args.slow_factor
    if args.dataset == "files":
        dataset = FileImages(args.data_dir, args.dataset_size, args.file_res, args.io_mode,
                             latency_ms, reps, args.seed)
        io_note = f" io={dataset.io_mode} latency={latency_ms}ms"
    else:
        dataset = MemoryImages(args.dataset_size, reps, args.seed, latency_ms)
        io_note = f" latency={latency_ms}ms" if latency_ms else ""
    first_batch = FirstBatchDelay(args.first_batch_s)
    dataset.first_item = first_batch
    loader = make_loader(args, dataset, dist)
    model = make_model(args.model, args.size).to(device)
    add_warmup_delay(model, args.warmup_steps, args.warmup_s)
    if dist.active:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = (torch.optim.SGD(model.parameters(), lr=args.lr) if args.optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=args.lr))
    os.makedirs(args.out_dir, exist_ok=True)
    ckpt_path = os.path.join(args.out_dir, "checkpoint.pt")
    log_file = None
    if args.log_every_step:
        log_file = open(os.path.join(args.out_dir, "metrics.jsonl"), "w")
    ckpt_extra = torch.zeros(args.checkpoint_extra_mb * 2**18) if args.checkpoint_extra_mb else None
    n_params = sum(p.numel() for p in model.parameters())
    print(f"situation={args.situation or 'custom'} model={args.model}/{args.size} "
          f"params={n_params} batch={args.batch_size} workers={args.num_workers} "
          f"threads={args.threads} transform_reps={reps} dataset={args.dataset}{io_note} "
          f"device={device}{rank_note(dist)}", flush=True)

    if args.setup_s > 0:
        time.sleep(args.setup_s)  # --setup-s: the rest of a long set-up
    try:
        return train(args, dist, device, loader, model, opt, ckpt_path, ckpt_extra, log_file)
    finally:
        first_batch.close()


def train(args, dist, device, loader, model, opt, ckpt_path, ckpt_extra, log_file):
    """The training loop; returns the exit code."""
    non_blocking = args.pin_memory and device.type == "cuda"
    prof = start_profiler(args, device)
    step, epoch, done = 0, 0, False
    t_start = time.perf_counter()
    t_last, step_last = t_start, 0
    while not done:
        if dist.active:
            loader.sampler.set_epoch(epoch)
        for x, y in loader:
            if step == args.crash_at_step:
                raise RuntimeError(f"crash requested at step {step} (--crash-at-step)")
            x = x.to(device, non_blocking=non_blocking)
            y = y.to(device, non_blocking=non_blocking)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if prof is not None:
                prof.step()
            side_work = args.side_work_rank < 0 or dist.rank == args.side_work_rank
            if log_file is not None and side_work:
                log_file.write(json.dumps({"step": step, **heavy_metrics(model, logits, y, loss)}))
                log_file.write("\n")
            if side_work and args.checkpoint_every and step % args.checkpoint_every == 0:
                torch.save({"step": step, "model": model.state_dict(),
                            "optimizer": opt.state_dict(), "extra": ckpt_extra}, ckpt_path)
            if side_work and args.sample_every and step % args.sample_every == 0:
                sample(model, args.sample_batch, args.sample_iters, device)
            if args.print_every and step % args.print_every == 0:
                now = time.perf_counter()
                print(f"step {step} epoch {epoch} loss {loss.item():.4f} "
                      f"{(step - step_last) / (now - t_last):.2f} steps/s", flush=True)
                t_last, step_last = now, step
            if args.steps and step >= args.steps:
                done = True
                break
        epoch += 1
        if args.epochs and epoch >= args.epochs:
            done = True
    elapsed = time.perf_counter() - t_start
    if prof is not None:
        prof.stop()
    if log_file is not None:
        log_file.close()
    print(f"done situation={args.situation or 'custom'} steps={step} epochs={epoch} "
          f"elapsed_s={elapsed:.2f} steps/s={step / elapsed:.2f} "
          f"samples/s={step * args.batch_size / elapsed:.1f}{rank_note(dist)}", flush=True)
    dist.close()
    return args.exit_code


def rank_note(dist):
    return f" rank={dist.rank}/{dist.world}" if dist.active else ""


if __name__ == "__main__":
    sys.exit(main())
