#!/usr/bin/env python3
"""auto's own model against this machine (docs/scale.md, "auto and the network"): per rank count,
the figures a communicator measured at its join (its INIT line: the probed link and latency, the
codecs' speeds), the scale model on those figures with nothing fitted, as `auto` runs it, and the
busbw measured at one size in the same run, for the exact ring and each codec under ring and
two-shot. What auto needs of it: that the model orders exact and the codecs as the measurement
does; how far its busbw is from the measured one is shown too.

  perf/bench/scale_verdict_check.py --build build [--ranks 2,4,8,16] [--codecs q8,q4]
      [--size 4M] [--repeats 2] [--markdown OUT.md]
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_report import model, parse_size, perf_sweep  # noqa: E402  (one sweep, one model)

LINE = re.compile(r"auto: link ([0-9.e+-]+) Gbit/s, ([0-9.e+-]+) us .*?exact encode ([0-9.e+-]+) "
                  r"step ([0-9.e+-]+) decode ([0-9.e+-]+) GB/s, (\d+) rank\(s\) on (\d+) core")


def figures(perf, codec, p):
    """A p-rank communicator's INIT line under auto with `codec` as the dense codec."""
    env = dict(os.environ, SKETCHCCL_DEBUG="INFO", SKETCHCCL_DEBUG_SUBSYS="INIT",
               SKETCHCCL_DENSE_CODEC=codec, SKETCHCCL_MIN_BYTES="0")
    err = subprocess.run([perf, "--nranks", str(p), "--codec", "auto", "-b", "1M", "-e", "1M",
                          "-n", "1", "-w", "0"], env=env, capture_output=True, text=True,
                         timeout=600).stderr
    for line in err.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        c = re.search(codec + r" encode ([0-9.e+-]+) step ([0-9.e+-]+) decode ([0-9.e+-]+) GB/s",
                      line)
        gib = 1e9 / 2 ** 30  # the INIT line says GB/s; the model takes GiB/s
        return {"gbps": float(m.group(1)), "lat_us": float(m.group(2)),
                "exact": [float(m.group(i)) * gib for i in (3, 4, 5)],
                "codec": [float(c.group(i)) * gib for i in (1, 2, 3)] if c else None,
                "ranks_per_machine": int(m.group(6)), "cores": int(m.group(7)), "line": line}
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", default="2,4,8,16")
    ap.add_argument("--codecs", default="q8,q4")
    ap.add_argument("--size", default="4M")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--markdown")
    a = ap.parse_args()
    perf = os.path.join(a.build, "perf/bench/sketchccl-perf")
    tool = os.path.join(a.build, "perf/bench/sketchccl-scale-model")
    size = int(parse_size(a.size))
    lines = [f"AllReduce of {a.size} per rank, laplace data; measured busbw (the fastest of "
             f"{a.repeats}) against the model on the figures a communicator of that many ranks "
             "measured at its join, nothing fitted (GB/s):", "",
             "| ranks | link probed | series | measured | predicted | ratio |",
             "|---|---|---|---|---|---|"]
    orders, ratios = [], []
    for p in [int(x) for x in a.ranks.split(",")]:
        pred, meas = {}, {}
        for codec in a.codecs.split(","):
            f = figures(perf, codec, p)
            if f is None or f["codec"] is None:
                print(f"# P={p} {codec}: no INIT line", file=sys.stderr)
                continue
            # As judge() weighs them: the ranks of one machine share its cores (and its
            # copies are the link), and a lossy call runs its accuracy sample.
            shared = True
            base = ["--ranks", str(p), "--bytes", str(size), "--flat-only",
                    "--link", f"{f['gbps'] / 8!r},{f['lat_us']!r},0",
                    "--cores", str(f["cores"] * p / f["ranks_per_machine"] if shared else 0)]
            for c, costs in (("none", f["exact"]), (codec, f["codec"])):
                rows = model(tool, c, base + ["--costs", ",".join(repr(v) for v in costs)] +
                             ([] if c == "none" else ["--sampled"]))
                for algo in (("ring",) if c == "none" else ("ring", "twoshot")):
                    r = rows.get((p, "flat", algo))
                    if r:
                        pred[(c, algo)] = r["busbw"]  # the model prints GB/s
                        link = f"{f['gbps']:.3g} Gbit/s, {f['lat_us']:.3g} us"
        for (c, algo) in pred:
            best = None
            for _ in range(a.repeats):
                r = perf_sweep(perf, c, algo, p, str(size), str(size)).get(size)
                if r and (best is None or r["busbw"] > best):
                    best = r["busbw"]
            meas[(c, algo)] = best
        for (c, algo), v in sorted(pred.items()):
            m = meas.get((c, algo))
            ratio = v / m if m else None
            if ratio:
                ratios.append(ratio)
            lines.append(f"| {p} | {link} | {c} {algo} | {m if m else '-'} | {v:.3g} | "
                         f"{ratio:.2f} |" if ratio else f"| {p} | {link} | {c} {algo} | - | "
                         f"{v:.3g} | - |")
        known = [k for k in pred if meas.get(k)]
        if known:
            by_model = max(known, key=lambda k: pred[k])
            by_run = max(known, key=lambda k: meas[k])
            orders.append((p, by_model, by_run))
    lines.append("")
    for p, bm, br in orders:
        agree = "the same" if bm == br else "differs"
        lines.append(f"- {p} ranks: fastest by the model {bm[0]} {bm[1]}, measured {br[0]} {br[1]}"
                     f" ({agree}; measured busbw of the model's pick "
                     f"is what auto gets)")
    if ratios:
        within = sum(1 for r in ratios if 0.8 <= r <= 1.25)
        lines.append(f"- busbw predicted / measured within 25%: {within} of {len(ratios)} points "
                     f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
