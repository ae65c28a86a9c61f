#!/usr/bin/env python3
"""The demo's topology section (docs/hierarchy.md): 2 namespaces as 2 nodes of 2 ranks, one
1 Gbit/s link per node. Reads perf/demo/netem.sh's per-run tables (DIR/ucx-<series>.txt,
DIR/mpi-ring.txt) and DIR/node_bytes.txt (bytes each node's link carried per run, from tc -s
qdisc) and prints the busbw table, the gain of the hierarchy over the flat ring, the bytes on
each node's link, a markdown copy and a gnuplot PNG. Only what the tools and tc printed is used."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from demo_report import mib, parse, sci  # noqa: E402

LABELS = {"q8": "hier q8", "q4": "hier q4", "none": "hier exact", "q8@flat": "flat q8",
          "q4@flat": "flat q4", "none@flat": "flat exact", "mpi-ring": "Open MPI ring"}


def node_bytes(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 2:
                    out[p[0]] = [int(x) for x in p[1:]]
    except OSError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--series", default="q8,q4,q8@flat,none@flat")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--per-node", type=int, default=2)
    ap.add_argument("--plot")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    p = a.nodes * a.per_node
    series = {}
    for s in a.series.split(","):
        series[s] = parse(os.path.join(a.dir, f"ucx-{s}.txt"))
    series["mpi-ring"] = parse(os.path.join(a.dir, "mpi-ring.txt"))
    names = [n for n in series if series[n]]
    sizes = sorted({s for n in names for s in series[n]})
    if not sizes:
        print("demo: no topology results", file=sys.stderr)
        return 1
    label = {n: LABELS.get(n, n) for n in names}
    nb = node_bytes(os.path.join(a.dir, "node_bytes.txt"))

    out = [f"Topology: {a.nodes} nodes x {a.per_node} ranks (namespaces as nodes, ranks placed node "
           "by node), tc tbf 1 Gbit/s on each node's link, loopback inside a node; UCX tcp.",
           f"busbw (GB/s) = algbw * 2(P-1)/P, P = {p}, for every series alike; gauss data."]
    head = f"{'size':>8} |" + "".join(f"{label[n]:>{max(9, len(label[n]) + 1)}}" for n in names)
    out += [head, "-" * len(head)]
    for s in sizes:
        row = f"{mib(s):>8} |"
        for n in names:
            r = series[n].get(s)
            w = max(9, len(label[n]) + 1)
            row += f"{r['busbw']:>{w}.3f}" if r else f"{'-':>{w}}"
        out.append(row)
    out.append("")
    judge = [s for s in sizes if s >= 4 << 20] or sizes

    def gain(n, ref):
        if n not in series or ref not in series:
            return []
        return [series[n][s]["busbw"] / series[ref][s]["busbw"] for s in judge
                if s in series[n] and s in series[ref] and series[ref][s]["busbw"] > 0]

    big = max(sizes)
    out.append(f"{'series':<16}{'busbw@' + mib(big):>15}{'x flat q8':>10}{'x flat exact':>13}"
               f"{'nmse':>9}{'node link MB/run':>18}")
    for n in names:
        r = series[n].get(big)
        if not r:
            continue
        g8, ge = gain(n, "q8@flat"), gain(n, "none@flat")
        links = nb.get(n if n.startswith("mpi-") else f"ucx-{n}")
        lb = "/".join(f"{b / 1e6:.0f}" for b in links) if links else "n/a"
        out.append(f"{label[n]:<16}{r['busbw']:>15.3f}"
                   f"{(f'{statistics.median(g8):.2f}' if g8 else '-'):>10}"
                   f"{(f'{statistics.median(ge):.2f}' if ge else '-'):>13}"
                   f"{sci(r['nmse']):>9}{lb:>18}")
    rng = f"{mib(judge[0])}-{mib(judge[-1])}"
    out.append(f"(x flat: median over {rng} of the per-size busbw ratios; node link MB/run: what "
               "each node's link carried out of it during the whole sweep, from tc -s qdisc)")
    out.append("")
    bound = 2 * (p - 1) / p / (2 * (a.nodes - 1) / a.nodes)
    verdicts = []
    g = gain("q8", "q8@flat")
    if g:
        med = statistics.median(g)
        verdicts.append(f"hierarchical q8: {med:.2f}x [{min(g):.2f}-{max(g):.2f}] the busbw of the "
                        f"flat q8 ring (goal >= 1.25x, bound {bound:.2f}x): "
                        f"{'met' if med >= 1.25 else 'NOT met'}")
    hq, fq = nb.get("ucx-q8"), nb.get("ucx-q8@flat")
    if hq and fq and sum(fq) > 0:
        ratio = sum(hq) / sum(fq)
        verdicts.append(f"node links: hierarchical q8 carried {ratio:.3f} of the flat q8 ring's "
                        f"bytes (arithmetic: {2 * (a.nodes - 1) / a.nodes:.3g} / "
                        f"{2 * (p - 1) / p:.3g} = {1 / bound:.3f})")
    g = gain("q8@flat", "none@flat")
    if g:
        verdicts.append(f"flat q8: {statistics.median(g):.2f}x the busbw of the flat exact ring")
    g = gain("none", "none@flat")
    if g:
        verdicts.append(f"hierarchical exact: {statistics.median(g):.2f}x the flat exact ring")
    out += ["  " + v for v in verdicts]
    print("\n".join(out))
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("```\n" + "\n".join(out) + "\n```\n")

    if a.plot and shutil.which("gnuplot"):
        dat = os.path.join(a.dir, "busbw.dat")
        with open(dat, "w") as f:
            for n in names:
                f.write(f"# {label[n]}\n")
                for s in sorted(series[n]):
                    f.write(f"{s / 1048576:g} {series[n][s]['busbw']:.6f}\n")
                f.write("\n\n")
        plots = []
        for i, n in enumerate(names):
            dash = " dt 2" if n.startswith("mpi-") or n.endswith("@flat") else ""
            plots.append(f"'{dat}' index {i} with linespoints lw 2{dash} title '{label[n]}'")
        script = f"""
set terminal pngcairo size 900,560 font 'sans,10'
set output '{a.plot}'
set title 'SketchCCL AllReduce busbw: {a.nodes} nodes x {a.per_node} ranks, 1 Gbit/s per node link (netns + tc tbf)'
set xlabel 'message size (MiB)'
set ylabel 'busbw (GB/s)'
set logscale x 2
set key outside right
set grid
set yrange [0:*]
plot {', '.join(plots)}
"""
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
        if r.returncode != 0:
            r = subprocess.run(["gnuplot"], input=script.replace(
                "pngcairo size 900,560 font 'sans,10'", "png size 900,560"), text=True,
                capture_output=True)
        if r.returncode == 0:
            print(f"\nplot: {a.plot}")
        else:
            print(f"demo: gnuplot failed: {r.stderr.strip()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
