#!/usr/bin/env python3
"""Writes the hand-made corrupt seeds in this directory from the golden
tables. Run from the repository root: python3 tables/testdata/fuzz/make_seeds.py
(zlib.crc32 is the same IEEE CRC-32 as crc32fast, used to reseal)."""
import os, struct, zlib

here = os.path.dirname(os.path.abspath(__file__))
golden = open(os.path.join(here, "..", "..", "golden", "allreduce_2x8_v1.0.tbl"), "rb").read()

def reseal(b):
    b = bytearray(b)
    b[32:36] = struct.pack("<I", zlib.crc32(bytes(b[40:])) & 0xFFFFFFFF)
    return bytes(b)

def section(b, kind):
    n = struct.unpack_from("<I", b, 28)[0]
    for i in range(n):
        k, off, ln = struct.unpack_from("<III", b, 40 + 12 * i)
        if k == kind:
            return 40 + 12 * i, off, ln
    raise KeyError(kind)

def put(b, at, fmt, v):
    b = bytearray(b)
    struct.pack_into(fmt, b, at, v)
    return bytes(b)

seeds = {}
seeds["corrupt-truncated.tbl"] = golden[:100]
seeds["corrupt-bad-magic.tbl"] = b"X" + golden[1:]
seeds["corrupt-bad-crc.tbl"] = golden[:-1] + bytes([golden[-1] ^ 0x01])
seeds["corrupt-newer-major.tbl"] = put(golden, 8, "<H", 2)
# Tree node 2 (a split) gets right child 0: a loop back to the root.
_, trees, _ = section(golden, 3)
ntrees = struct.unpack_from("<I", golden, trees)[0]
node2 = trees + 8 + 12 * ntrees + 16 * 2
assert golden[node2] == 0, "node 2 must be a split"
seeds["corrupt-child-loop.tbl"] = reseal(put(golden, node2 + 12, "<I", 0))
# RULES section moved onto CONTEXTS.
_, ctx, _ = section(golden, 1)
rules_dir, _, _ = section(golden, 2)
seeds["corrupt-section-overlap.tbl"] = reseal(put(golden, rules_dir + 4, "<I", ctx + 4))
# A rule whose gain is NaN.
_, rules, _ = section(golden, 2)
seeds["corrupt-nan-gain.tbl"] = reseal(put(golden, rules + 8, "<I", 0x7FC00000))
# Section count far past the directory.
seeds["corrupt-section-count.tbl"] = reseal(put(golden, 28, "<I", 0xFFFFFFFF))
# Header reserved field (bytes 36..40) nonzero: "must be zero to load".
seeds["corrupt-header-reserved.tbl"] = reseal(put(golden, 36, "<I", 1))
# Rule 0 asks for 200 channels; NCCL has at most 64 (MAXCHANNELS).
seeds["corrupt-channels-200.tbl"] = reseal(put(golden, rules + 6, "<B", 200))

for name, data in seeds.items():
    with open(os.path.join(here, name + ".tmp"), "wb") as f:
        f.write(data)
    os.replace(os.path.join(here, name + ".tmp"), os.path.join(here, name))
    print(name, len(data))
