#!/usr/bin/env python3
"""One rank of the GPU check (tests/gpu/check.sh): all_reduce through PyTorch's NCCL.

check.sh starts one process per rank, each with its own NCCL_HOSTID, so NCCL
counts one node per rank and several ranks can share one GPU (NCCL refuses two
ranks of one host on one device). Two modes:

  sweep CSV      every setting in SETTINGS on its own communicator (a new
                 process group: NCCL reads NCCL_ALGO and NCCL_PROTO when a
                 communicator is created), each size timed as nccl-tests
                 times it (warm-up, then the mean of ITERS back to back, the
                 slowest rank's); rank 0 appends dyncc's CSV sweep rows.
  steps JSON     a training-like loop: each step one all_reduce per size,
                 STEPS steps, whatever NCCL_TUNER_PLUGIN / NCCL_PROFILER_PLUGIN
                 / DYNCC_* the environment holds; rank 0 writes each step's
                 time (the slowest rank's) to JSON.

DYNCC_GPU_CHECK_BACKEND=gloo runs either mode on CPUs (no NCCL, no plugin),
which checks this script and check.sh without a GPU.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

# 128 KiB .. 64 MiB, the range the check names.
SIZES = [128 << 10 << i for i in range(10)]
# NCCL's default first: later groups set NCCL_ALGO/NCCL_PROTO, the first must not.
SETTINGS = [(None, None)] + [(a, p) for a in ("Ring", "Tree") for p in ("LL", "LL128", "Simple")]


def env_int(name, default):
    return int(os.environ.get(name, default))


def backend():
    return os.environ.get("DYNCC_GPU_CHECK_BACKEND", "nccl")


def device():
    return torch.device("cuda", 0) if backend() == "nccl" else torch.device("cpu")


def sync():
    if backend() == "nccl":
        torch.cuda.synchronize()


def slowest(seconds, group):
    """The slowest rank's time: a collective ends when its last rank does."""
    t = torch.tensor([seconds], dtype=torch.float64, device=device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def time_size(buf, group, warmup, iters):
    for _ in range(warmup):
        dist.all_reduce(buf, group=group)
    sync()
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf, group=group)
    sync()
    return slowest((time.perf_counter() - t0) / iters, group)


def sweep(path):
    rank, world = dist.get_rank(), dist.get_world_size()
    warmup, iters = env_int("WARMUP", 2), env_int("ITERS", 5)
    bufs = {s: torch.ones(s // 4, dtype=torch.float32, device=device()) for s in SIZES}
    for algo, proto in SETTINGS:
        for k, v in (("NCCL_ALGO", algo), ("NCCL_PROTO", proto)):
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        group = dist.new_group(list(range(world)))
        rows = []
        try:
            for s in SIZES:
                us = time_size(bufs[s], group, warmup, iters) * 1e6
                rows.append(
                    f"allreduce,{s},{(algo or 'default').lower()},{(proto or 'default').lower()},"
                    f"-1,{world},{world},1,0,{us:.2f},{s / us / 1e3:.6f},{us:.2f},{os.environ.get('PLATFORM', 'gpu-check')}"
                )
        except Exception as e:  # a setting this NCCL refuses: say so, keep the others
            print(f"rank {rank}: {algo}/{proto} failed: {e}", file=sys.stderr, flush=True)
            rows = []
        dist.destroy_process_group(group)
        if rank == 0 and rows:
            with open(path, "a") as f:
                f.write("\n".join(rows) + "\n")
            print(f"sweep {world} nodes {algo or 'default'}/{proto or 'default'}: "
                  + " ".join(r.split(",")[9] for r in rows) + " us", flush=True)


def steps(path):
    n = env_int("STEPS", 60)
    bufs = [torch.ones(s // 4, dtype=torch.float32, device=device()) for s in SIZES]
    times = []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        for b in bufs:
            dist.all_reduce(b)
        sync()
        times.append(slowest(time.perf_counter() - t0, None))
    if dist.get_rank() == 0:
        with open(path, "w") as f:
            json.dump({"sizes": SIZES, "step_seconds": times}, f)
        half = sorted(times[n // 2:])
        print(f"steps {path}: median of the last {len(half)} steps {half[len(half) // 2] * 1e3:.2f} ms", flush=True)


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if backend() == "nccl":
        torch.cuda.set_device(0)
    dist.init_process_group(backend())
    {"sweep": sweep, "steps": steps}[mode](path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
