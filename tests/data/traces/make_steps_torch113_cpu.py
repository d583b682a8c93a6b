#!/usr/bin/python3
"""Writes steps_torch113_cpu.json: a real CPU-only PyTorch-profiler trace (Debian's torch 1.13).

Fixture for src/trace/step_breakdown_test.cc: a DataLoader(num_workers=0) whose __getitem__ sleeps
2 ms per sample, a Linear model, and a profiler schedule with p.step() per iteration, so the trace
has ProfilerStep#N ranges, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" ranges
and aten ops nested inside both.

Run with the system interpreter (the python3 first on PATH may have no torch):
    /usr/bin/python3 tests/data/traces/make_steps_torch113_cpu.py [out.json]
"""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SleepyDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.002)  # 2 ms of "loading" per sample
        return torch.full((16,), float(i)), torch.tensor(float(i))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "steps_torch113_cpu.json")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SleepyDataset(), batch_size=2, num_workers=0)
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=schedule,
        on_trace_ready=lambda p: p.export_chrome_trace(out),
    ) as p:
        for step, (x, y) in enumerate(loader):
            if step >= 6:
                break
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            loss.backward()
            opt.step()
            p.step()
    print(out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
