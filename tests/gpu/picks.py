#!/usr/bin/env python3
"""NCCL's own pick against the same setting forced, from the GPU check's sweep.

    picks.py SWEEP_CSV NODES RANK0_LOG

The open question behind the plan's marks (issue 27): does what NCCL runs when
it chooses take the time the same algorithm and protocol take when forced? If
it does, forcing NCCL's own choice measures nothing, and a sweep's "default"
rows and its forced rows of that setting are two readings of one thing. If it
does not, a table that forces NCCL's own choice changes the time.

The sweep (collectives.py) runs NCCL's default first, on its own communicator,
so at each size the first per-collective choice line of rank 0's log (NCCL_DEBUG
=INFO, subsystem TUNING; NCCL 2.24.3+: "AllReduce: <bytes> Bytes -> Algo RING
proto SIMPLE channel{Lo..Hi}={0..1}") is what NCCL chose there. Per size this
prints the default's time, the forced setting's time and their ratio; sizes
whose choice is not in the log, or whose setting the sweep did not force, are
named, never guessed. Needs only Python (no PyTorch), so a test runs it here.
"""
import csv
import re
import statistics
import sys

CHOICE = re.compile(
    r"AllReduce: (\d+) Bytes -> Algo (\w+) proto (\w+)(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?"
)


def choices(log_path):
    """bytes -> (algo, proto, channels or None): the first choice line per size."""
    out = {}
    with open(log_path, errors="replace") as f:
        for line in f:
            m = CHOICE.search(line)
            if not m:
                continue
            size = int(m.group(1))
            if size in out:
                continue
            ch = int(m.group(5)) - int(m.group(4)) + 1 if m.group(4) else None
            out[size] = (m.group(2).lower(), m.group(3).lower(), ch)
    return out


def times(csv_path, nodes):
    """(bytes, algo, proto) -> latency in us, at `nodes`."""
    out = {}
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            if row["collective"] != "allreduce" or int(row["nodes"]) != nodes:
                continue
            key = (int(row["size_bytes"]), row["algorithm"], row["protocol"])
            out[key] = float(row["latency_us"])
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: picks.py SWEEP_CSV NODES RANK0_LOG")
    csv_path, nodes, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        t = times(csv_path, nodes)
        picked = choices(log_path)
    except OSError as e:
        sys.exit(f"picks at {nodes} nodes: cannot read {e.filename}: {e.strerror}")
    sizes = sorted({b for (b, a, p) in t if (a, p) == ("default", "default")})
    if not sizes:
        print(f"picks at {nodes} nodes: the sweep has no NCCL-default rows")
        return
    print(f"NCCL's own pick against the same setting forced, at {nodes} nodes:")
    ratios = []
    for b in sizes:
        d = t[(b, "default", "default")]
        if b not in picked:
            print(f"  {b} B: NCCL's choice is not in the log (no TUNING line for this size)")
            continue
        algo, proto, ch = picked[b]
        forced = t.get((b, algo, proto))
        chs = f"/{ch}ch" if ch else ""
        if forced is None:
            print(f"  {b} B: NCCL chose {algo}/{proto}{chs}, which the sweep did not force")
            continue
        ratios.append(d / forced)
        print(f"  {b} B: NCCL chose {algo}/{proto}{chs}: {d:.1f} us on its own, "
              f"{forced:.1f} us forced ({100 * (d / forced - 1):+.1f} %)")
    if ratios:
        off = [r for r in ratios if abs(r - 1) > 0.05]
        print(f"picks at {nodes} nodes: NCCL's own pick / the same setting forced, median "
              f"{statistics.median(ratios):.3f} over {len(ratios)} sizes; {len(off)} beyond 5 %")
    else:
        print(f"picks at {nodes} nodes: no size to compare")


if __name__ == "__main__":
    main()
