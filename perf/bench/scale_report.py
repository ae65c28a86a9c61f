#!/usr/bin/env python3
"""The scale model against this machine, then at scale (docs/scale.md).

1. Per-hop costs: sketchccl-codec-bench (one core, GiB/s of encode, step, decode per codec).
2. Link figures here: the exact ring `none` at 2 ranks (sketchccl-perf), whose time less its
   codec work is the loopback's copies.
3. Measured points: busbw of ring and two-shot at the given ranks and codecs (sketchccl-perf,
   the same run), and the NMSE of scale_nmse.py's JSON.
4. sketchccl-scale-model (the policy's own model, src/coll/schedule_choice.h) predicts each
   point from 1 and 2 (NMSE: from the ring's points at 2 and 4 ranks alone), and then 2 to 1,024
   ranks, flat and 8 per node, on the issue's link figures.
Prints markdown (validation table with predicted / measured, the prediction table) and writes a
gnuplot PNG. Figures come only from this run's tools; a missing one is shown as "-".

  perf/bench/scale_report.py --build build --nmse nmse.json [--ranks 2,4,8,16]
      [--codecs q8,q4] [--size 4M] [--markdown OUT.md] [--png OUT.png]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def codec_costs(bench, codecs):
    out = tempfile.mktemp(suffix=".json")
    flt = "^(encode|step|decode)/(" + "|".join(codecs + ["none"]) + ")$"
    subprocess.run([bench, f"--benchmark_filter={flt}", "--benchmark_format=json",
                    f"--benchmark_out={out}", "--benchmark_out_format=json",
                    "--benchmark_min_time=0.2s"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        res = json.load(f)["benchmarks"]
    os.unlink(out)
    costs = {}
    for b in res:
        op, codec = b["name"].split("/")[:2]
        gib = b.get("bytes_per_second", 0) / 2 ** 30
        costs.setdefault(codec, {})[op] = gib
    return {c: (v.get("encode", 0), v.get("step", 0), v.get("decode", 0))
            for c, v in costs.items()}


def perf_point(perf, codec, algo, p, size, coll="all_reduce", iters=3):
    out = tempfile.mktemp(suffix=".json")
    env = dict(os.environ, SKETCHCCL_ALGO=algo, SKETCHCCL_MIN_BYTES="0")
    cmd = [perf, "--nranks", str(p), "-b", size, "-e", size, "-n", str(iters), "-w", "1",
           "--codec", codec, "--data", "laplace", "-J", out]
    if coll == "reduce_scatter":
        cmd += ["--coll", "reduce_scatter"]
    try:
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600)
        with open(out) as f:
            r = json.load(f)["results"][0]
        os.unlink(out)
        return r
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError) as e:
        print(f"# {codec} {algo} P={p}: failed ({e})", file=sys.stderr)
        return None


def model(tool, codec, args):
    res = subprocess.run([tool, "--codec", codec] + args, check=True, capture_output=True,
                         text=True).stdout
    rows = {}
    for line in res.splitlines():
        if line.startswith("#") or line.startswith("ranks,"):
            continue
        p, layout, sched, sec, bw, nmse = line.split(",")
        rows[(int(p), layout, sched)] = {"seconds": float(sec), "busbw": float(bw),
                                         "nmse": float(nmse)}
    return rows


def fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec)


def parse_size(s):
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    return float(s[:-1]) * mult[s[-1]] if s[-1] in mult else float(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--nmse", required=True, help="scale_nmse.py --json output")
    ap.add_argument("--ranks", default="2,4,8,16")
    ap.add_argument("--codecs", default="q8,q4")
    ap.add_argument("--size", default="4M")
    ap.add_argument("--cores", type=float, default=float(os.cpu_count() or 1))
    ap.add_argument("--bytes-at-scale", default="25M")
    ap.add_argument("--markdown")
    ap.add_argument("--png")
    a = ap.parse_args()
    perf = os.path.join(a.build, "perf/bench/sketchccl-perf")
    bench = os.path.join(a.build, "perf/bench/sketchccl-codec-bench")
    tool = os.path.join(a.build, "perf/bench/sketchccl-scale-model")
    ranks = [int(x) for x in a.ranks.split(",")]
    codecs = a.codecs.split(",")
    with open(a.nmse) as f:
        nmse_pts = {(d["data"], d["coll"], d["algo"], d["codec"], d["nranks"]): d
                    for d in json.load(f)}
    costs = codec_costs(bench, codecs)
    lines = []
    # Link figures here from `none` at 2 ranks: its time less its codec work.
    none2 = perf_point(perf, "none", "ring", 2, a.size)
    n = parse_size(a.size)
    link_gbps = None
    if none2 and "none" in costs:
        e, s, d = costs["none"]
        compute = n / 2 / (e * 2 ** 30) + n / 2 / (s * 2 ** 30) + n / (d * 2 ** 30)
        t = none2["time_us"] * 1e-6
        sent = n  # 2 (P - 1) / P of the input at P = 2
        if t > compute:
            link_gbps = sent / (t - compute) / 1e9
    lines.append(f"Per-hop costs (sketchccl-codec-bench, one core, GiB/s encode/step/decode): " +
                 ", ".join(f"{c} {costs[c][0]:.2f}/{costs[c][1]:.2f}/{costs[c][2]:.2f}"
                           for c in ["none"] + codecs if c in costs) +
                 f"; loopback link from `none` at 2 ranks: {fmt(link_gbps)} GB/s; "
                 f"{a.cores:g} cores shared by the ranks.")
    lines.append("")
    lines.append(f"**Validation here** (AllReduce, {a.size}, laplace; predicted / measured; NMSE "
                 "predicted from the ring's points at 2 and 4 ranks alone):")
    lines.append("")
    lines.append("| codec | schedule | ranks | busbw measured GB/s | predicted | ratio | "
                 "NMSE measured | predicted | ratio |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    plot_rows = []
    worst = {"busbw": 0.0, "nmse": 0.0}
    for codec in codecs:
        r2 = nmse_pts.get(("laplace", "all_reduce", "ring", codec, 2))
        r4 = nmse_pts.get(("laplace", "all_reduce", "ring", codec, 4))
        margs = ["--ranks", a.ranks, "--bytes", a.size, "--flat-only", "--cores", str(a.cores)]
        if link_gbps:
            margs += ["--link", f"{link_gbps},0,0"]
        if codec in costs:
            margs += ["--costs", ",".join(str(x) for x in costs[codec])]
        if r2 and r4:
            margs += ["--nmse2", str(r2["nmse"]), "--nmse4", str(r4["nmse"])]
        pred = model(tool, codec, margs)
        for algo in ("ring", "twoshot"):
            for p in ranks:
                m = perf_point(perf, codec, algo, p, a.size)
                pr = pred.get((p, "flat", algo))
                mn = nmse_pts.get(("laplace", "all_reduce", algo, codec, p))
                bw_ratio = pr["busbw"] / m["busbw"] if m and pr and m["busbw"] else None
                nm_ratio = (pr["nmse"] / mn["nmse"] if mn and pr and mn["nmse"] and pr["nmse"]
                            else None)
                for k, v in (("busbw", bw_ratio), ("nmse", nm_ratio)):
                    if v:
                        worst[k] = max(worst[k], abs(v - 1))
                lines.append(f"| {codec} | {algo} | {p} | {fmt(m['busbw'] if m else None)} | "
                             f"{fmt(pr['busbw'] if pr else None)} | {fmt(bw_ratio, '.2f')} | "
                             f"{fmt(mn['nmse'] if mn else None)} | "
                             f"{fmt(pr['nmse'] if pr else None)} | {fmt(nm_ratio, '.2f')} |")
    lines.append("")
    lines.append(f"Largest deviation: busbw {worst['busbw'] * 100:.0f}%, NMSE "
                 f"{worst['nmse'] * 100:.0f}%.")
    lines.append("")
    # At scale: the link figures (the tool's defaults), 8 GPUs per node.
    lines.append(f"**At scale** (AllReduce, {a.bytes_at_scale} per rank, NVLink 450 GB/s, a "
                 "400 Gbit/s NIC per GPU, 5 us per message and 1 us to post one; codec work on "
                 "the GPU not modelled; NMSE from the fit above; busbw GB/s / NMSE):")
    lines.append("")
    at_ranks = [2 ** k for k in range(1, 11)]
    lines.append("| codec | layout | schedule | " + " | ".join(str(p) for p in at_ranks) + " |")
    lines.append("|---|---|---|" + "---|" * len(at_ranks))
    for codec in codecs:
        r2 = nmse_pts.get(("laplace", "all_reduce", "ring", codec, 2))
        r4 = nmse_pts.get(("laplace", "all_reduce", "ring", codec, 4))
        margs = ["--ranks", ",".join(str(p) for p in at_ranks), "--bytes", a.bytes_at_scale]
        if r2 and r4:
            margs += ["--nmse2", str(r2["nmse"]), "--nmse4", str(r4["nmse"])]
        pred = model(tool, codec, margs)
        for layout in ("flat", "hier"):
            for algo in ("ring", "twoshot"):
                cells = []
                for p in at_ranks:
                    pr = pred.get((p, layout, algo))
                    cells.append(f"{pr['busbw']:.1f} / {pr['nmse']:.2g}" if pr else "-")
                    if pr:
                        plot_rows.append((codec, layout, algo, p, pr["busbw"], pr["nmse"]))
                lines.append(f"| {codec} | {layout} | {algo} | " + " | ".join(cells) + " |")
    md = "\n".join(lines)
    print(md)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md + "\n")
    if a.png and plot_rows:
        dat = tempfile.mktemp(suffix=".dat")
        series = sorted({(c, l, s) for c, l, s, *_ in plot_rows})
        with open(dat, "w") as f:
            for c, l, s in series:
                f.write(f"# {c} {l} {s}\n")
                for row in plot_rows:
                    if row[:3] == (c, l, s):
                        f.write(f"{row[3]} {row[4]} {row[5]}\n")
                f.write("\n\n")
        plots_bw = ", ".join(f"'{dat}' index {i} using 1:2 with linespoints title '{c} {l} {s}'"
                             for i, (c, l, s) in enumerate(series))
        plots_nm = ", ".join(f"'{dat}' index {i} using 1:3 with linespoints title '{c} {l} {s}'"
                             for i, (c, l, s) in enumerate(series))
        script = f"""set terminal pngcairo size 1200,500 font ',9'
set output '{a.png}'
set multiplot layout 1,2
set logscale x 2
set xlabel 'ranks'
set key left bottom
set ylabel 'predicted busbw (GB/s)'
set title 'AllReduce {a.bytes_at_scale}: busbw'
plot {plots_bw}
set logscale y
set ylabel 'predicted NMSE'
set key left top
set title 'AllReduce: NMSE'
plot {plots_nm}
unset multiplot
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        os.unlink(dat)


if __name__ == "__main__":
    main()
