#!/usr/bin/env python3
"""Turns the demo's per-run tables (sketchccl-perf / mpi-allreduce-perf output, kept by
perf/demo/netem.sh as DIR/<transport>-<codec>.txt and DIR/mpi-<algo>.txt) into one table, a verdict
line per codec, a markdown copy and a gnuplot PNG. Only what the tools printed is used."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys


def parse(path):
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                p = line.split()
                if len(p) < 11:
                    continue
                def num(s):
                    return None if s == "N/A" else float(s)
                # sketchccl-perf: ... nmse maxrel est_nmse wire/in codec; mpi-allreduce-perf:
                # ... nmse maxrel wire/in.
                rows[int(p[0])] = {"time_us": float(p[5]), "algbw": float(p[6]),
                                   "busbw": float(p[7]), "nmse": num(p[8]),
                                   "maxrel": num(p[9]),
                                   "wire": num(p[11] if len(p) >= 13 else p[-1])}
    except OSError:
        pass
    return rows


def mib(b):
    return f"{b / 1048576:g} MiB"


def sci(v):
    if v is None:
        return "n/a"
    return "0" if v == 0 else f"{v:.1e}"


def gain_and_wire(rows, base, sizes):
    """Median over `sizes` of the busbw ratio against `base`, and of the wire bytes per input
    byte; None where a size is missing."""
    g = [rows[s]["busbw"] / base[s]["busbw"] for s in sizes
         if s in rows and s in base and base[s]["busbw"] > 0]
    w = [rows[s]["wire"] for s in sizes if s in rows and rows[s]["wire"]]
    return (statistics.median(g) if g else None), (statistics.median(w) if w else None)


def goal_row(name, data, rows, base, sizes, fp32_wire):
    gain, wire = gain_and_wire(rows, base, sizes)
    if gain is None or wire is None:
        return f"  {name:<8}{data:<16}(no results at these sizes)"
    byte_gain = fp32_wire / wire
    frac = gain / byte_gain
    verdict = "meets" if frac >= 0.6 else "below"
    return (f"  {name:<8}{data:<16}{gain:>7.2f}x{wire:>9.3f}{byte_gain:>10.2f}x"
            f"{0.6 * byte_gain:>9.2f}x{frac:>11.2f}   {verdict}")


def goal_lines(series, base, sizes, fp32_wire, clustered, cdata, sparse_codecs):
    rng = f"{mib(sizes[0])}-{mib(sizes[-1])}"
    out = [f"goal: at {rng} every codec's busbw gain over the exact ring >= 0.6 x its "
           f"byte gain {fp32_wire:g}/wire",
           f"  {'codec':<8}{'data':<16}{'gain':>8}{'wire/in':>9}{'byte gain':>11}{'goal':>10}"
           f"{'gain/byte':>11}",
           ]
    for n, rows in series.items():
        if n == "none" or n.startswith("mpi-") or not rows:
            continue
        data = "sparse:0.01" if n in sparse_codecs else "gauss"
        out.append(goal_row(n, data, rows, base, sizes, fp32_wire))
    for n, rows in clustered.items():
        if rows:
            out.append(goal_row(n, cdata, rows, base, sizes, fp32_wire))
    out.append(f"  (medians over {rng} of the per-size figures; gain/byte = gain / byte gain, the "
               "goal is >= 0.60;")
    out.append(f"   the exact ring is the first sweep's `none`; {os.cpu_count()} CPU core(s) for 4 "
               "ranks: the codecs' CPU time counts)")
    return out


def clustered_lines(clustered, base, fp32_wire, cdata, where):
    names = [n for n in clustered if clustered[n]]
    out = [f"clustered-sparse input ({cdata}: embedding-style rows of 64 non-zeros, 1% of the "
           "rows per rank, half from a pool shared across ranks),",
           "busbw against the exact ring of the first sweep:"]
    if not names:
        return out + [f"  no results (see the logs in {where})"]
    sizes = sorted({s for n in names for s in clustered[n]})
    out.append(f"  {'codec':<8}{'size':>8}{'busbw':>9}{'x none':>8}{'wire/in':>9}"
               f"{f'{fp32_wire:g}/wire':>10}{'nmse':>9}{'maxrel':>9}")
    for n in names:
        for s in sizes:
            r = clustered[n].get(s)
            if not r:
                continue
            b = base.get(s)
            xn = f"{r['busbw'] / b['busbw']:.2f}" if b and b["busbw"] > 0 else "-"
            ws = f"{r['wire']:.3f}" if r["wire"] is not None else "n/a"
            bg = f"{fp32_wire / r['wire']:.2f}" if r["wire"] else "n/a"
            out.append(f"  {n:<8}{mib(s):>8}{r['busbw']:>9.3f}{xn:>8}{ws:>9}{bg:>10}"
                       f"{sci(r['nmse']):>9}{sci(r['maxrel']):>9}")
    lossy = [n for n in names
             if any(r["nmse"] not in (None, 0) for r in clustered[n].values())]
    if lossy:
        out.append(f"  NOT exact on this input: {', '.join(lossy)} (nmse, maxrel above; s2 is meant "
                   "to be exact unless a lossy budget is asked for)")
    else:
        out.append("  every codec here returned the exact sum (nmse 0 at every size)")
    missing = [n for n in clustered if not clustered[n]]
    if missing:
        out.append(f"  (no results for: {', '.join(missing)} - see the logs in {where})")
    return out


# Each collective of the sweeps, as nccl-tests names them: its bus factor, what the exact fp32 ring
# sends per input byte at P = 4, what its sizes mean, whether Open MPI's baseline ran beside it.
COLLECTIVES = {
    "allreduce": {"name": "AllReduce", "factor": "2(P-1)/P", "fp32_wire": 1.5, "sizes": None,
                  "mpi": True},
    "reduce_scatter": {"name": "ReduceScatter", "factor": "(P-1)/P", "fp32_wire": 0.75,
                       "sizes": "sizes are the input's (P chunks); nmse and maxrel are rank 0's "
                                "chunk's.", "mpi": False},
    "allgather": {"name": "AllGather", "factor": "(P-1)/P", "fp32_wire": 3.0,
                  "sizes": "sizes are the output's (P shards); wire/in per byte of this rank's "
                           "shard; the exact gather (none) counts no wire bytes.", "mpi": False},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--mode", default="netem")
    ap.add_argument("--codecs", default="none,bf16,q8,q4,casq2,s2,sparse")
    ap.add_argument("--transport", default="ucx")
    ap.add_argument("--plot")
    ap.add_argument("--markdown")
    ap.add_argument("--json", help="the per-codec summary for perf/report/results_table.py")
    ap.add_argument("--collective", default="allreduce", choices=sorted(COLLECTIVES))
    ap.add_argument("--clustered", help="the clustered-sparse sweep's DIR (same transport)")
    ap.add_argument("--clustered-codecs", default="s2,sparse,auto")
    ap.add_argument("--clustered-data", default="clustered:0.01")
    a = ap.parse_args()
    spec = COLLECTIVES[a.collective]
    factor, coll, fp32_wire = spec["factor"], spec["name"], spec["fp32_wire"]
    lead = "" if a.collective == "allreduce" else coll + ": "  # the AllReduce table reads as before
    codecs = a.codecs.split(",")
    series = {}
    for c in codecs:
        series[c] = parse(os.path.join(a.dir, f"{a.transport}-{c}.txt"))
    for algo in ("ring", "default") if spec["mpi"] else ():  # Open MPI's baseline: AllReduce only
        series[f"mpi-{algo}"] = parse(os.path.join(a.dir, f"mpi-{algo}.txt"))
    iw = max(9, len(f"{fp32_wire:g}/wire") + 1)  # the width of its column
    names = [n for n in series if series[n]]
    missing = [n for n in series if not series[n]]
    sizes = sorted({s for n in names for s in series[n]})
    if not sizes:
        print("demo: no results to report", file=sys.stderr)
        return 1
    sparse_codecs = {"s2", "sparse"}
    label = {n: ("Open MPI " + n[4:]) if n.startswith("mpi-") else n for n in names}

    out = []
    if a.mode == "netem":
        out.append(f"{lead}busbw (GB/s) = algbw * {factor}, P = 4; emulated link 1 Gbit/s "
                   "(~0.119 GB/s of payload). 1 MiB is inflated by the tbf burst: judge >= 4 MiB.")
    else:
        out.append(f"{lead}busbw (GB/s) = algbw * {factor}, P = 4, on LOOPBACK (not a slow "
                   "network).")
    if spec["sizes"]:
        out.append(spec["sizes"])
    out.append("dense codecs and MPI on gauss data; s2 and sparse on 1%-dense data (per rank).")
    head = f"{'size':>8} |" + "".join(f"{label[n]:>{max(8, len(label[n]) + 1)}}" for n in names)
    out.append(head)
    out.append("-" * len(head))
    for s in sizes:
        row = f"{mib(s):>8} |"
        for n in names:
            r = series[n].get(s)
            w = max(8, len(label[n]) + 1)
            row += f"{r['busbw']:>{w}.3f}" if r else f"{'-':>{w}}"
        out.append(row)
    out.append("")
    judge = [s for s in sizes if s >= 4 << 20] or sizes
    big = max(sizes)
    base = series.get("none", {})
    mpi = series.get("mpi-ring", {})
    def ratios(n, ref):
        return [series[n][s]["busbw"] / ref[s]["busbw"] for s in judge
                if s in series[n] and s in ref and ref[s]["busbw"] > 0]

    rng = f"{mib(judge[0])}-{mib(judge[-1])}"
    out.append(f"{'codec':<18}{'data':<14}{'busbw@' + mib(big):>14}{'x none':>8}{'x MPI ring':>11}"
               f"{'nmse':>9}{'maxrel':>9}{'wire/in':>9}{f'{fp32_wire:g}/wire':>{iw}}")
    for n in names:
        r = series[n].get(big)
        if not r:
            out.append(f"{label[n]:<18}(incomplete: largest size reached {mib(max(series[n]))})")
            continue
        xn, xm = ratios(n, base), ratios(n, mpi)
        data = "sparse:0.01" if n in sparse_codecs else "gauss"
        if n.startswith("mpi-"):
            data = "(own, exact)"
        ws = f"{r['wire']:.3f}" if r["wire"] is not None else "n/a"
        ideal = f"{fp32_wire / r['wire']:.2f}" if r["wire"] else "n/a"
        out.append(f"{label[n]:<18}{data:<14}{r['busbw']:>14.3f}"
                   f"{(f'{statistics.median(xn):.2f}' if xn else '-'):>8}"
                   f"{(f'{statistics.median(xm):.2f}' if xm else '-'):>11}"
                   f"{sci(r['nmse']):>9}{sci(r['maxrel']):>9}{ws:>9}{ideal:>{iw}}")
    out.append(f"(x none, x MPI ring: median over {rng} of the per-size busbw ratios; nmse, maxrel "
               f"and wire/in at {mib(big)};")
    out.append(f" {fp32_wire:g}/wire = the gain if only bytes mattered; this machine has {os.cpu_count()} CPU "
               f"core(s) for 4 ranks, so the codecs' CPU time also counts)")
    out.append("")
    out.append(f"verdicts (busbw against the exact fp32 ring `none` measured in the same run, median "
               f"[min-max] over {rng}):")
    verdicts = []
    for n in names:
        if n.startswith("mpi-") or not base:
            continue
        rs = ratios(n, base)
        if not rs:
            continue
        r = series[n][max(series[n])]  # the largest size this run reached
        nm = r["nmse"]
        exact_codec = n in ("none", "sparse")
        err = ("exact (NMSE 0)" if exact_codec else "NMSE 0 on this data") if nm == 0 else \
            f"NMSE {sci(nm)}, max rel. error {sci(r['maxrel'])}"
        wire = f", {r['wire']:.3f} wire B per input B" if r["wire"] is not None else ""
        data = " on 1%-dense data" if n in sparse_codecs else ""
        med = statistics.median(rs)
        spread = f" [{min(rs):.2f}-{max(rs):.2f}]"
        if n == "none":
            xm = [1 / x for x in ratios("mpi-ring", base)] if "mpi-ring" in names else []
            v = "none: the exact ring itself"
            if xm:
                v += (f": {statistics.median(xm):.2f}x [{min(xm):.2f}-{max(xm):.2f}] the busbw of "
                      f"Open MPI's ring MPI_Allreduce")
            v += f", {err}{wire}"
        elif med < 1.0:
            v = f"{n}{data}: does NOT pay here: {med:.2f}x{spread} the busbw of exact ring, {err}{wire}"
        else:
            v = f"{n}{data}: {med:.2f}x{spread} the busbw of exact ring, {err}{wire}"
        verdicts.append(v)
    out += ["  " + v for v in verdicts]
    if missing:
        out.append(f"  (no results for: {', '.join(missing)} - see the logs in {a.dir})")

    clustered = {}
    if a.clustered:
        clustered = {c: parse(os.path.join(a.clustered, f"{a.transport}-{c}.txt"))
                     for c in a.clustered_codecs.split(",")}
    if a.clustered:
        out.append("")
        out += clustered_lines(clustered, base, fp32_wire, a.clustered_data, a.clustered)
    # The goal: at 16-64 MiB (past the tbf burst and the per-call costs), a codec's busbw gain over
    # the exact ring reaches 0.6 of what its bytes alone would give (fp32_wire / wire).
    goal_sizes = [s for s in sizes if 16 << 20 <= s <= 64 << 20]
    if base and goal_sizes:
        out.append("")
        out += goal_lines(series, base, goal_sizes, fp32_wire, clustered,
                          a.clustered_data, sparse_codecs)
    elif base:
        out.append("")
        out.append("goal (gain >= 0.6 x byte gain at 16-64 MiB): not judged, the sweep stopped at "
                   f"{mib(big)}")
    print("\n".join(out))

    if a.json:
        summary = {"collective": a.collective, "mode": a.mode, "judge": [judge[0], judge[-1]],
                   "largest": big, "codecs": {}, "clustered": {}}
        for n in names:
            r = series[n].get(big)
            xn = ratios(n, base)
            summary["codecs"][n] = {
                "data": "sparse:0.01" if n in sparse_codecs else "gauss",
                "busbw": r["busbw"] if r else None,
                "x_none": statistics.median(xn) if xn else None,
                "wire": r["wire"] if r else None, "nmse": r["nmse"] if r else None}
        for n, rows in clustered.items():
            cs = [s for s in sorted(rows) if s >= 4 << 20]
            g = [rows[s]["busbw"] / base[s]["busbw"] for s in cs if s in base and base[s]["busbw"] > 0]
            r = rows[max(rows)] if rows else None
            summary["clustered"][n] = {
                "data": a.clustered_data, "busbw": r["busbw"] if r else None,
                "x_none": statistics.median(g) if g else None,
                "wire": r["wire"] if r else None, "nmse": r["nmse"] if r else None}
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)

    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("```\n" + "\n".join(out) + "\n```\n")

    if a.plot:
        if shutil.which("gnuplot") is None:
            print("demo: gnuplot not found: no plot", file=sys.stderr)
            return 0
        dat = os.path.join(a.dir, "busbw.dat")
        with open(dat, "w") as f:
            for n in names:
                f.write(f"# {label[n]}\n")
                for s in sorted(series[n]):
                    f.write(f"{s / 1048576:g} {series[n][s]['busbw']:.6f}\n")
                f.write("\n\n")
        title = ("4 ranks, emulated 1 Gbit/s links (netns + tc tbf), UCX tcp" if a.mode == "netem"
                 else "4 ranks on loopback (NOT a slow network)")
        plots = []
        for i, n in enumerate(names):
            dash = " dt 2" if n.startswith("mpi-") else ""
            extra = " (1% dense)" if n in sparse_codecs else ""
            plots.append(f"'{dat}' index {i} with linespoints lw 2{dash} title '{label[n]}{extra}'")
        script = f"""
set terminal pngcairo size 900,560 font 'sans,10'
set output '{a.plot}'
set title 'SketchCCL {coll} busbw: {title}'
set xlabel 'message size (MiB)'
set ylabel 'busbw (GB/s)'
set logscale x 2
set key outside right
set grid
set yrange [0:*]
plot {', '.join(plots)}
"""
        if a.mode == "netem":
            script = script.replace("plot ", "set arrow from graph 0, first 0.1193 to graph 1, first 0.1193 nohead dt 3\n"
                                    "set label 'link payload rate 0.119 GB/s' at graph 0.6, first 0.128\nplot ")
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
        if r.returncode != 0:
            # pngcairo may be missing from a gnuplot build: fall back to the libgd terminal
            r = subprocess.run(["gnuplot"], input=script.replace("pngcairo size 900,560 font 'sans,10'",
                                                                 "png size 900,560"),
                               text=True, capture_output=True)
        if r.returncode == 0:
            print(f"\nplot: {a.plot}")
        else:
            print(f"demo: gnuplot failed: {r.stderr.strip()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
