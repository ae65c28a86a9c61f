#!/usr/bin/env python3
"""auto on each link the demo emulates (perf/demo/auto_links.sh): per link, the busbw of the exact
ring, of the fixed codecs auto may run (the dense codec and its safer rung) and of auto, median over
the sizes; auto over the best of the others, measured side by side in one run; and the verdict auto
logged at init (its figures and choice per size band). Only what the tools printed is used."""
import argparse
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_report import parse  # noqa: E402  (the demo's one parser of the per-run tables)


def verdict_line(link_dir):
    for err in sorted(glob.glob(os.path.join(link_dir, "*-auto.txt.err.*"))):
        with open(err) as f:
            for line in f:
                m = re.search(r"INFO INIT (auto: .*)", line)
                if m:
                    return m.group(1).strip()
    return "(no INIT line: run with SKETCHCCL_DEBUG=INFO)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="OUT/auto, one folder per link")
    ap.add_argument("--links", required=True, help="comma-separated link folder names, in order")
    ap.add_argument("--codecs", required=True, help="fixed codecs beside auto, exact first")
    ap.add_argument("--transport", default="ucx")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    fixed = args.codecs.split(",")
    head = "| link | " + " | ".join(fixed) + " | auto | auto / best | best |"
    lines = ["busbw GB/s, median over the sizes of each run; auto / best: median of the per-size "
             "ratios of auto's busbw over the best fixed configuration's at that size",
             "", head, "|" + " --- |" * (len(fixed) + 4)]
    verdicts = []
    worst = None
    for link in args.links.split(","):
        d = os.path.join(args.dir, link)
        runs = {c: parse(os.path.join(d, f"{args.transport}-{c}.txt")) for c in fixed + ["auto"]}
        sizes = sorted(set.intersection(*[set(r) for r in runs.values()])) if all(runs.values()) else []
        if not sizes:
            lines.append(f"| {link} | " + " | ".join("n/a" for _ in fixed) + " | n/a | n/a | run failed |")
            continue
        med = {c: statistics.median(runs[c][s]["busbw"] for s in sizes) for c in runs}
        ratios, bests = [], []
        for s in sizes:
            best = max(fixed, key=lambda c: runs[c][s]["busbw"])
            bests.append(best)
            ratios.append(runs["auto"][s]["busbw"] / runs[best][s]["busbw"])
        r = statistics.median(ratios)
        worst = r if worst is None else min(worst, r)
        best_name = max(set(bests), key=bests.count)
        lines.append(f"| {link} | " + " | ".join(f"{med[c]:.3f}" for c in fixed) +
                     f" | {med['auto']:.3f} | {r:.2f}x | {best_name} |")
        verdicts.append(f"- {link}: {verdict_line(d)}")
    lines += ["", "auto's figures and verdicts at init (rank 0, SKETCHCCL_DEBUG=INFO):"] + verdicts
    if worst is not None:
        lines += ["", f"goal: auto >= 0.95x the best fixed configuration on every link: worst "
                      f"{worst:.2f}x ({'meets' if worst >= 0.95 else 'below'})"]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
