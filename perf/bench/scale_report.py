#!/usr/bin/env python3
"""The scale model against this machine, then at scale (docs/scale.md).

1. Per-hop costs: sketchccl-codec-bench (one core, GiB/s of encode, step, decode per codec).
2. Measured points: one sketchccl-perf sweep per codec (`none` too), schedule and rank count
   over the calibration sizes and the validation size, so both come from the same runs.
3. Calibration: the figures of ranks sharing cores (the loopback's bytes per second, the cost of
   a message, per call, per message round, the wait per round for each rank per core beyond one)
   fitted, non-negative least squares on relative error, to the calibration sizes' points alone.
   The model is linear in them, so each one's term comes from sketchccl-scale-model itself.
4. sketchccl-scale-model (the policy's own model, src/coll/schedule_choice.h) predicts the
   validation size's points from 1 and 3 (NMSE: from the ring's points at 2 and 4 ranks alone),
   and then 2 to 1,024 ranks, flat and 8 per node, on the issue's link figures.
Prints markdown (validation table with predicted / measured, the prediction table) and writes a
gnuplot PNG. Figures come only from this run's tools; a missing one is shown as "-".

  perf/bench/scale_report.py --build build --nmse nmse.json [--ranks 2,4,8,16]
      [--codecs q8,q4] [--size 4M] [--calibrate 64K,16M] [--repeats 3] [--cores 2]
      [--save POINTS.json | --load POINTS.json] [--markdown OUT.md] [--png OUT.png]
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


def perf_sweep(perf, codec, algo, p, lo, hi, iters=5):
    """Time per call (seconds) by size, nccl-tests' sweep from lo to hi by 4."""
    out = tempfile.mktemp(suffix=".json")
    env = dict(os.environ, SKETCHCCL_ALGO=algo, SKETCHCCL_MIN_BYTES="0")
    cmd = [perf, "--nranks", str(p), "-b", lo, "-e", hi, "-f", "4", "-n", str(iters), "-w", "2",
           "--codec", codec, "--data", "laplace", "-J", out]
    try:
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=600)
        with open(out) as f:
            res = json.load(f)["results"]
        os.unlink(out)
        return {int(r["size"]): r for r in res}
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError) as e:
        print(f"# {codec} {algo} P={p}: failed ({e})", file=sys.stderr)
        return {}


def nnls(rows, ys, weights):
    """Least squares with every unknown >= 0: drop the most negative unknown, fit again."""
    k = len(rows[0])
    active = list(range(k))
    while active:
        a = [[sum(w * w * r[i] * r[j] for r, w in zip(rows, weights)) for j in active]
             for i in active]
        v = [sum(w * w * r[i] * y for r, y, w in zip(rows, ys, weights)) for i in active]
        m = len(active)
        for c in range(m):  # Gauss-Jordan with partial pivoting
            piv = max(range(c, m), key=lambda r: abs(a[r][c]))
            a[c], a[piv], v[c], v[piv] = a[piv], a[c], v[piv], v[c]
            if abs(a[c][c]) < 1e-300:
                break
            for r in range(m):
                if r != c:
                    f = a[r][c] / a[c][c]
                    a[r] = [x - f * y for x, y in zip(a[r], a[c])]
                    v[r] -= f * v[c]
        sol = [v[i] / a[i][i] if abs(a[i][i]) > 1e-300 else 0.0 for i in range(m)]
        worst = min(range(m), key=lambda i: sol[i])
        if sol[worst] >= 0:
            x = [0.0] * k
            for i, j in enumerate(active):
                x[j] = sol[i]
            return x
        del active[worst]
    return [0.0] * k


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


def fmt_size(b):
    for unit, m in (("M", 1024 ** 2), ("K", 1024)):
        if b >= m and b % m == 0:
            return f"{int(b // m)}{unit}"
    return str(int(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--nmse", required=True, help="scale_nmse.py --json output")
    ap.add_argument("--ranks", default="2,4,8,16")
    ap.add_argument("--codecs", default="q8,q4")
    ap.add_argument("--size", default="4M")
    ap.add_argument("--calibrate", default="64K,16M",
                    help="sizes the shared-core figures are fitted to; the rest validate")
    ap.add_argument("--repeats", type=int, default=3,
                    help="sweeps per point, the fastest kept")
    ap.add_argument("--cores", type=float, default=float(os.cpu_count() or 1))
    ap.add_argument("--bytes-at-scale", default="25M")
    ap.add_argument("--save", help="write the measured points (JSON) for a later --load")
    ap.add_argument("--load", help="the measured points of an earlier --save: no runs")
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
    calib = [parse_size(x) for x in a.calibrate.split(",")]
    n = parse_size(a.size)
    lo, hi = int(min(calib + [n])), int(max(calib + [n]))
    sizes = sorted(set(calib + [n] + [lo * 4 ** k for k in range(20) if lo * 4 ** k <= hi]))
    series = [("none", "ring")] + [(c, s) for c in codecs for s in ("ring", "twoshot")]
    load = [os.getloadavg()[0]]
    measured = {}  # (codec, algo, p) -> {size: result}
    if a.load:
        with open(a.load) as f:
            saved = json.load(f)
        load = saved["load"]
        a.repeats = saved.get("repeats", a.repeats)
        for d in saved["points"]:
            measured.setdefault((d["codec"], d["algo"], d["nranks"]), {})[d["size"]] = d
        series = []
    for codec, algo in series:
        for p in ranks:
            # The fastest of the repeats: the least disturbed by whatever else runs here.
            runs = [perf_sweep(perf, codec, algo, p, str(lo), str(hi)) for _ in range(a.repeats)]
            best, slowest = {}, {}
            for r in runs:
                for size, res in r.items():
                    if size not in best or res["time_us"] < best[size]["time_us"]:
                        best[size] = dict(res)
                    slowest[size] = max(slowest.get(size, 0.0), res["time_us"])
            # The repeats' own spread (slowest / fastest): how far this machine reproduces a point.
            for size, res in best.items():
                res["spread"] = slowest[size] / res["time_us"] if res["time_us"] > 0 else None
            measured[(codec, algo, p)] = best
    if not a.load:
        load.append(os.getloadavg()[0])
    if a.save:
        with open(a.save, "w") as f:
            json.dump({"load": load, "repeats": a.repeats, "points": [
                dict(r, codec=c, algo=al, nranks=p, size=size)
                for (c, al, p), by_size in measured.items() for size, r in by_size.items()]}, f)

    def margs_of(codec, size, x):
        inv_b, msg, call, rnd, wait = x
        gbps = 1.0 / inv_b / 1e9 if inv_b > 0 else 1e15
        m = ["--ranks", a.ranks, "--bytes", str(int(size)), "--flat-only", "--cores",
             str(a.cores), "--link", f"{gbps!r},0,{msg * 1e6!r}",
             "--shared", f"{call * 1e6!r},{rnd * 1e6!r},{wait * 1e6!r}"]
        if codec in costs:
            m += ["--costs", ",".join(str(v) for v in costs[codec])]
        if codec != "none":
            m += ["--sampled"]
        return m

    # The model is linear in the five figures: each one's term is the tool's answer with that
    # figure alone at a unit value, less its answer with none.
    units = [1e-9, 1e-6, 1e-6, 1e-6, 1e-6]
    terms = {}
    for codec in ["none"] + codecs:
        for size in sizes:
            zero = model(tool, codec, margs_of(codec, size, [0.0] * 5))
            ones = []
            for i, u in enumerate(units):
                x = [0.0] * 5
                x[i] = u
                ones.append(model(tool, codec, margs_of(codec, size, x)))
            for key, z in zero.items():
                terms[(codec, size) + key] = (z["seconds"], [o[key]["seconds"] - z["seconds"]
                                                             for o in ones])
    rows, ys, ws = [], [], []
    for (codec, algo, p), by_size in measured.items():
        for size in calib:
            r = by_size.get(int(size))
            tm = terms.get((codec, size, p, "flat", algo))
            if not r or not tm or r["time_us"] <= 0:
                continue
            t = r["time_us"] * 1e-6
            rows.append([f / u for f, u in zip(tm[1], units)])
            ys.append(t - tm[0])
            ws.append(1.0 / t)
    fit = nnls(rows, ys, ws) if rows else [0.0] * 5
    inv_b, msg, call, rnd, wait = fit
    lines = []
    lines.append(f"Per-hop costs (sketchccl-codec-bench, one core, GiB/s encode/step/decode): " +
                 ", ".join(f"{c} {costs[c][0]:.2f}/{costs[c][1]:.2f}/{costs[c][2]:.2f}"
                           for c in ["none"] + codecs if c in costs) +
                 f"; {a.cores:g} cores shared by the ranks. Fitted to the "
                 f"{', '.join(fmt_size(x) for x in calib)} points of `none`, "
                 f"{', '.join(codecs)}, ring and two-shot at {a.ranks} ranks ({len(rows)} points;"
                 f" non-negative least squares, relative error): loopback "
                 f"{fmt(1 / inv_b / 1e9 if inv_b > 0 else None)} GB/s, {msg * 1e6:.1f} us per "
                 f"message, {call * 1e6:.0f} us per call, {rnd * 1e6:.1f} us per message round, "
                 f"{wait * 1e6:.1f} us more per round for each rank per core beyond one. Load "
                 f"average (1 min) {load[0]:.1f} at the start of the runs, {load[1]:.1f} at "
                 f"the end.")
    lines.append("")
    lines.append(f"**Validation here** (AllReduce, {a.size}, laplace; predicted / measured; busbw "
                 f"from the fit above, in the same runs; NMSE predicted from the ring's points at "
                 "2 and 4 ranks alone):")
    lines.append("")
    lines.append("| codec | schedule | ranks | busbw measured GB/s | repeats' spread | predicted | "
                 "ratio | NMSE measured | predicted | ratio |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    plot_rows = []
    worst = {"busbw": 0.0, "nmse": 0.0}
    held = {"all": 0, "in": 0, "other": 0, "other_in": 0, "noisy": 0, "noisy_out": 0}
    for codec in codecs:
        r2 = nmse_pts.get(("laplace", "all_reduce", "ring", codec, 2))
        r4 = nmse_pts.get(("laplace", "all_reduce", "ring", codec, 4))
        fits = {}
        for size in sizes:
            margs = margs_of(codec, size, fit)
            if r2 and r4:
                margs += ["--nmse2", str(r2["nmse"]), "--nmse4", str(r4["nmse"])]
            fits[size] = model(tool, codec, margs)
        for algo in ("ring", "twoshot"):
            for p in ranks:
                by_size = measured.get((codec, algo, p), {})
                for size in sizes:
                    if size in calib:
                        continue
                    m, pr = by_size.get(int(size)), fits[size].get((p, "flat", algo))
                    if m and pr and m["busbw"]:
                        ok = abs(pr["busbw"] / m["busbw"] - 1) <= 0.25
                        key = "all" if size == n else "other"
                        held[key] += 1
                        held["in" if size == n else "other_in"] += ok
                        noisy = (m.get("spread") or 1.0) > 1.25
                        held["noisy"] += noisy
                        held["noisy_out"] += noisy and not ok
                m, pr = by_size.get(int(n)), fits[n].get((p, "flat", algo))
                mn = nmse_pts.get(("laplace", "all_reduce", algo, codec, p))
                bw_ratio = pr["busbw"] / m["busbw"] if m and pr and m["busbw"] else None
                nm_ratio = (pr["nmse"] / mn["nmse"] if mn and pr and mn["nmse"] and pr["nmse"]
                            else None)
                for k, v in (("busbw", bw_ratio), ("nmse", nm_ratio)):
                    if v:
                        worst[k] = max(worst[k], abs(v - 1))
                lines.append(f"| {codec} | {algo} | {p} | {fmt(m['busbw'] if m else None)} | "
                             f"{fmt(m.get('spread') if m else None, '.2f')} | "
                             f"{fmt(pr['busbw'] if pr else None)} | {fmt(bw_ratio, '.2f')} | "
                             f"{fmt(mn['nmse'] if mn else None)} | "
                             f"{fmt(pr['nmse'] if pr else None)} | {fmt(nm_ratio, '.2f')} |")
    lines.append("")
    unseen = ", ".join(fmt_size(x) for x in sizes if x not in calib and x != n)
    lines.append(f"Largest deviation: busbw {worst['busbw'] * 100:.0f}%, NMSE "
                 f"{worst['nmse'] * 100:.0f}%. busbw within 25%: {held['in']} of {held['all']} "
                 f"points at {a.size}; {held['other_in']} of {held['other']} at the other sizes "
                 f"the fit did not see ({unseen}). Of these {held['all'] + held['other']} "
                 f"points, {held['noisy']} measured more than 25% apart between their own "
                 f"{a.repeats} repeats (slowest / fastest), {held['noisy_out']} of them outside "
                 f"the 25%.")
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
