#!/usr/bin/env python3
"""Rotated against plain quantizers (docs/codecs.md): NMSE of q4r/q2r next to q4/q2 and
casq4/casq2 by data, ranks and schedule, one sketchccl-perf run per point (scale_nmse.run_one),
all in this one run, as markdown with the ratios q4r/q4 and q2r/q2. A failed run shows as "-".

  perf/bench/rotation_nmse.py --perf build/perf/bench/sketchccl-perf [--ranks 2,4,8,16]
      [--size 1M] [--data gauss,laplace,student3,outliers] [--markdown OUT.md]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_nmse import fmt, run_one  # noqa: E402

CODECS = ["q4", "q4r", "q2", "q2r", "casq4", "casq2"]


def ratio(results, key, a, b):
    x, y = results.get(key + (a,)), results.get(key + (b,))
    return x["nmse"] / y["nmse"] if x and y and y["nmse"] else None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--perf", default="build/perf/bench/sketchccl-perf")
    ap.add_argument("--ranks", default="2,4,8,16")
    ap.add_argument("--size", default="1M")
    ap.add_argument("--data", default="gauss,laplace,student3,outliers")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--markdown")
    a = ap.parse_args()
    ranks = [int(x) for x in a.ranks.split(",")]
    results = {}
    lines = []
    for data in a.data.split(","):
        lines += [f"**{data}** (AllReduce of {a.size} fp32 per rank, NMSE)", "",
                  "| schedule | P | " + " | ".join(CODECS) + " | q4r/q4 | q2r/q2 |",
                  "|---|---|" + "---|" * (len(CODECS) + 2)]
        for algo in ("ring", "twoshot"):
            for p in ranks:
                key = (data, algo, p)
                for codec in CODECS:
                    results[key + (codec,)] = run_one(a.perf, "all_reduce", algo, codec, data, p,
                                                      a.size, a.seed, a.timeout)
                cells = [fmt(results[key + (c,)]["nmse"] if results[key + (c,)] else None)
                         for c in CODECS]
                lines.append(f"| {algo} | {p} | " + " | ".join(cells) + " | " +
                             fmt(ratio(results, key, "q4r", "q4"), ".3f") + " | " +
                             fmt(ratio(results, key, "q2r", "q2"), ".3f") + " |")
                print(lines[-1], flush=True)
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
