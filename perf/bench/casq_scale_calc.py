#!/usr/bin/env python3
"""CASQ's scale granularity against q*'s uniform grid, computed (docs/codecs.md): the expected
NMSE of one stochastic-rounding quantization, (u - a)(b - u) for a value u between levels a < b,
of q2/q4 (a [min, max] grid per 256 values) and of casq2/casq4 with one scale per B values
(its largest |v|; fp32 at B = 256, rounded up to bf16 below) and K levels in [-1, 1] fitted to
that variance (ends pinned, coordinate descent on a 4096-bin histogram). No sampling noise from
the rounding: the variance is summed exactly. Pure Python (no numpy): about a minute.

  perf/bench/casq_scale_calc.py [--n 262144] [--seed 1]
"""
import argparse
import math
import random
import struct


def bf16_up(s):
    b = struct.unpack("<I", struct.pack("<f", s))[0]
    b = (b + 0xFFFF) >> 16
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


def q_nmse(x, k):
    err = sq = 0.0
    for i in range(0, len(x), 256):
        blk = x[i:i + 256]
        mn, mx = min(blk), max(blk)
        sc = (mx - mn) / (k - 1)
        for v in blk:
            t = (v - mn) / sc
            f = t - math.floor(t)
            err += f * (1 - f) * sc * sc
            sq += v * v
    return err / sq


def fit(u, k, bins=4096):
    """Levels on a grid of `bins` steps minimising the summed (u - a)(b - u), ends at -1, 1."""
    h0, h1, h2 = [0.0] * bins, [0.0] * bins, [0.0] * bins
    for v in u:
        b = min(bins - 1, int((v + 1) / 2 * bins))
        c = -1 + (b + 0.5) * 2 / bins
        h0[b] += 1
        h1[b] += c
        h2[b] += c * c
    p0, p1, p2 = [0.0], [0.0], [0.0]
    for i in range(bins):
        p0.append(p0[-1] + h0[i])
        p1.append(p1[-1] + h1[i])
        p2.append(p2[-1] + h2[i])

    def cost(lo, hi):  # summed variance of the values between grid points lo < hi
        a, b = -1 + 2 * lo / bins, -1 + 2 * hi / bins
        return -(p2[hi] - p2[lo]) + (a + b) * (p1[hi] - p1[lo]) - a * b * (p0[hi] - p0[lo])

    g = [c * bins // (k - 1) for c in range(k)]
    for _ in range(8):
        for c in range(1, k - 1):
            g[c] = min(range(g[c - 1], g[c + 1] + 1),
                       key=lambda x: cost(g[c - 1], x) + cost(x, g[c + 1]))
    return [-1 + 2 * x / bins for x in g]


def casq_nmse(x, k, block):
    scales = []
    for i in range(0, len(x), block):
        m = max(abs(v) for v in x[i:i + block])
        scales.append(m if block == 256 else bf16_up(m))
    sample = [x[i] / scales[i // block] for i in range(0, len(x), max(1, len(x) // 65536))]
    lv = fit(sample, k)
    err = sq = 0.0
    for i, v in enumerate(x):
        s = scales[i // block]
        u = v / s
        for c in range(k - 1):
            if u <= lv[c + 1]:
                err += (u - lv[c]) * (lv[c + 1] - u) * s * s
                break
        sq += v * v
    return err / sq


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=262144)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    data = {"laplace": [rng.choice((-1, 1)) * rng.expovariate(1) for _ in range(a.n)],
            "gauss": [rng.gauss(0, 1) for _ in range(a.n)]}
    print("| data | bits | q* NMSE | casq/q*: fp32 per 256 | bf16 per 128 | bf16 per 64 |")
    print("|---|---|---|---|---|---|")
    for name, x in data.items():
        for bits in (2, 4):
            q = q_nmse(x, 1 << bits)
            cells = [f"{casq_nmse(x, 1 << bits, b) / q:.3f}" for b in (256, 128, 64)]
            print(f"| {name} | {bits} | {q:.4f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
