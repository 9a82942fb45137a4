#!/usr/bin/env python3
"""bench/l2_reuse_model.py - how many of the Hopper dK/dV pass's Q and dO tile reads an L2 of a
given size would miss, for each order of a block's steps (SLUICE_ATTN_SM90_BWD_ORDER).

The model follows attention/gated_attn_sm90_bwd.cu: one block per (key tile of BN keys, kv
head), key tile major, taken in index order by the SMs as they free up, one block per SM; a
block walks its GQA group's query heads and the query tiles of BM rows from its diagonal to the
sequence's end (causal, no documents, the group unsplit), each step reading one tile of Q and
one of dO (BM x D bf16 each) and taking the same time. The L2 is an LRU cache of those tiles
alone (K, V, the statistics and the writes are left out: a lower bound on the traffic). Orders:
  heads       each head's tiles from the diagonal up, head after head (the kernel's default)
  tiles       by query tile from the sequence's last down to the diagonal, every head at each
              tile (SLUICE_ATTN_SM90_BWD_ORDER=tiles)
  tiles_up    by query tile from the diagonal up, every head at each tile (not in the kernel)
  heads_down  each head's tiles from the last down (not in the kernel)
It prints, per order and L2 size, the reads, the misses, the miss rate and the bytes the misses
fetch from DRAM, and "compulsory": the distinct tiles, which every order must fetch once. A
model, not a measurement: gpu_check's part attn_anatomy measures the pass's DRAM bytes and L2
hit rate (docs/attention.md, "The dK/dV pass's step order").

  l2_reuse_model.py [--seq S] [--kv-heads KV] [--group G] [--head-dim D] [--sms N]
                    [--l2-mb MB[,MB...]] [--order NAME[,NAME...]] [--json]
"""
import argparse
import collections
import json
import sys

ORDERS = ("heads", "tiles", "tiles_up", "heads_down")
BM, BN = 64, 128  # the dK/dV pass's query rows per step and keys per block at D = 128


def block_steps(order, kt, kvh, nqt, group):
    """The (query head, query tile) of each step of the block of key tile kt and kv head kvh."""
    qt0 = kt * BN // BM
    per = nqt - qt0
    for s in range(group * per):
        if order == "heads":
            h, q = s // per, qt0 + s % per
        elif order == "tiles":
            h, q = s % group, nqt - 1 - s // group
        elif order == "tiles_up":
            h, q = s % group, qt0 + s // group
        else:
            h, q = s // per, nqt - 1 - s % per
        yield kvh * group + h, q


def simulate(order, l2_bytes, seq, kv, group, d, sms):
    """(reads, misses, distinct tiles) of the pass under an LRU L2 of l2_bytes: the SMs run one
    step each per time unit, a freed SM taking the next block."""
    nqt = -(-seq // BM)
    tile_bytes = 2 * BM * d * 2  # Q and dO
    capacity = max(1, l2_bytes // tile_bytes)
    blocks = [(kt, kvh) for kt in range(-(-seq // BN)) for kvh in range(kv)]
    lru = collections.OrderedDict()
    seen = set()
    running, nxt, reads, misses = [], 0, 0, 0
    while nxt < len(blocks) and len(running) < sms:
        running.append(block_steps(order, *blocks[nxt], nqt, group))
        nxt += 1
    while running:
        alive = []
        for it in running:
            key = next(it, None)
            while key is None and nxt < len(blocks):  # the SM takes the next block
                it = block_steps(order, *blocks[nxt], nqt, group)
                nxt += 1
                key = next(it, None)
            if key is None:
                continue
            reads += 1
            seen.add(key)
            if key in lru:
                lru.move_to_end(key)
            else:
                misses += 1
                lru[key] = True
                if len(lru) > capacity:
                    lru.popitem(last=False)
            alive.append(it)
        running = alive
    return reads, misses, len(seen)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=32768)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--group", type=int, default=8, help="query heads per kv head")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--l2-mb", default="25,50", help="L2 sizes in MiB, comma-separated")
    p.add_argument("--order", default="heads,tiles", help="orders, comma-separated: " + ", ".join(ORDERS))
    p.add_argument("--json", action="store_true", help="one JSON line per (order, size)")
    a = p.parse_args(argv)
    orders = a.order.split(",")
    for o in orders:
        if o not in ORDERS:
            p.error("--order: %r is not one of %s" % (o, ", ".join(ORDERS)))
    try:
        sizes = [float(x) for x in a.l2_mb.split(",")]
    except ValueError:
        p.error("--l2-mb: expected sizes in MiB separated by commas, got %r" % a.l2_mb)
    if min(a.seq, a.kv_heads, a.group, a.head_dim, a.sms) < 1 or min(sizes) <= 0:
        p.error("every size must be positive")
    tile_bytes = 2 * BM * a.head_dim * 2
    for o in orders:
        for mb in sizes:
            reads, misses, distinct = simulate(o, int(mb * 2**20), a.seq, a.kv_heads, a.group, a.head_dim, a.sms)
            row = dict(order=o, l2_mib=mb, reads=reads, misses=misses, compulsory=distinct,
                       miss_rate=misses / reads, dram_gb=misses * tile_bytes / 1e9)
            if a.json:
                print(json.dumps(row))
            else:
                print("%-10s L2 %5.1f MiB: %d reads, %d misses (%.1f%%; compulsory %d), %.1f GB from DRAM" % (
                    o, mb, reads, misses, 100 * row["miss_rate"], distinct, row["dram_gb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
