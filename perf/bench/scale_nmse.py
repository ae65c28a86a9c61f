#!/usr/bin/env python3
"""NMSE by ranks, ring against two-shot (docs/scale.md): runs sketchccl-perf once per (data,
collective, schedule, codec, ranks), all in this one run, and prints markdown tables of the NMSE,
the ratio of the largest P to P = 2, the CASQ ratios (casq2 / q2, casq4 / q4) and wire bytes per
input byte against the ring's. A run that fails shows as "-", never filled in.

  perf/bench/scale_nmse.py --perf build/perf/bench/sketchccl-perf [--ranks 2,4,8,16]
      [--size 4M] [--codecs q8,q4,q2,casq2,casq3,casq4] [--data laplace,gauss]
      [--colls all_reduce,reduce_scatter] [--json OUT.json] [--markdown OUT.md]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run_one(perf, coll, algo, codec, data, p, size, seed, timeout):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    env = dict(os.environ, SKETCHCCL_ALGO=algo, SKETCHCCL_MIN_BYTES="0")
    cmd = [perf, "--nranks", str(p), "-b", size, "-e", size, "-n", "1", "-w", "0",
           "--codec", codec, "--data", data, "--seed", str(seed), "-J", out]
    if coll == "reduce_scatter":
        cmd += ["--coll", "reduce_scatter"]
    try:
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=timeout)
        with open(out) as f:
            res = json.load(f)["results"][0]
        return {"nmse": res["nmse"], "wire": res["wire_per_input_byte"], "busbw": res["busbw"]}
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError) as e:
        print(f"# {coll} {algo} {codec} {data} P={p}: failed ({e})", file=sys.stderr)
        return None
    finally:
        try:
            os.unlink(out)
        except OSError:
            pass


def fmt(v, spec=".2e"):
    return "-" if v is None else format(v, spec)


def tables(results, ranks, codecs, datas, colls):
    lines = []
    lo, hi = ranks[0], ranks[-1]
    for data in datas:
        for coll in colls:
            lines.append(f"**{coll}, {data}** (NMSE by ranks; last column: NMSE at {hi} over "
                         f"NMSE at {lo})")
            lines.append("")
            lines.append("| codec | schedule | " + " | ".join(str(p) for p in ranks) +
                         f" | {hi}/{lo} |")
            lines.append("|---|---|" + "---|" * (len(ranks) + 1))
            for codec in codecs:
                for algo in ("ring", "twoshot"):
                    row = [results.get((data, coll, algo, codec, p)) for p in ranks]
                    vals = [r["nmse"] if r else None for r in row]
                    ratio = (vals[-1] / vals[0] if vals[0] and vals[-1] is not None
                             else None)
                    lines.append(f"| {codec} | {algo} | " + " | ".join(fmt(v) for v in vals) +
                                 f" | {fmt(ratio, '.2f')} |")
            lines.append("")
            pairs = [(c, b) for c, b in (("casq2", "q2"), ("casq3", "q2"), ("casq4", "q4"))
                     if c in codecs and b in codecs]
            if pairs:
                lines.append(f"CASQ against uniform at the same P, two-shot ({coll}, {data}):")
                lines.append("")
                lines.append("| ratio | " + " | ".join(str(p) for p in ranks) + " |")
                lines.append("|---|" + "---|" * len(ranks))
                for c, b in pairs:
                    cells = []
                    for p in ranks:
                        x = results.get((data, coll, "twoshot", c, p))
                        y = results.get((data, coll, "twoshot", b, p))
                        cells.append(fmt(x["nmse"] / y["nmse"], ".2f")
                                     if x and y and y["nmse"] else "-")
                    lines.append(f"| {c} / {b} | " + " | ".join(cells) + " |")
                lines.append("")
            lines.append(f"Wire bytes per input byte, two-shot over ring ({coll}, {data}):")
            lines.append("")
            lines.append("| codec | " + " | ".join(str(p) for p in ranks) + " |")
            lines.append("|---|" + "---|" * len(ranks))
            for codec in codecs:
                cells = []
                for p in ranks:
                    t = results.get((data, coll, "twoshot", codec, p))
                    r = results.get((data, coll, "ring", codec, p))
                    cells.append(fmt(t["wire"] / r["wire"], ".3f")
                                 if t and r and r["wire"] else "-")
                lines.append(f"| {codec} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--perf", default="build/perf/bench/sketchccl-perf")
    ap.add_argument("--ranks", default="2,4,8,16")
    ap.add_argument("--size", default="4M")
    ap.add_argument("--codecs", default="q8,q4,q2,casq2,casq3,casq4")
    ap.add_argument("--data", default="laplace,gauss")
    ap.add_argument("--colls", default="all_reduce,reduce_scatter")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    ranks = [int(x) for x in a.ranks.split(",")]
    codecs, datas, colls = a.codecs.split(","), a.data.split(","), a.colls.split(",")
    results = {}
    for data in datas:
        for coll in colls:
            for codec in codecs:
                for algo in ("ring", "twoshot"):
                    for p in ranks:
                        r = run_one(a.perf, coll, algo, codec, data, p, a.size, a.seed,
                                    a.timeout)
                        if r:
                            results[(data, coll, algo, codec, p)] = r
                        print(f"# {data} {coll} {algo} {codec} P={p}: "
                              f"{fmt(r['nmse']) if r else 'failed'}", file=sys.stderr)
    md = (f"sketchccl-perf, {a.size} per rank, host memory, standalone, one run "
          f"(`perf/bench/scale_nmse.py --ranks {a.ranks} --size {a.size}`)\n\n" +
          tables(results, ranks, codecs, datas, colls))
    print(md)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"data": k[0], "coll": k[1], "algo": k[2], "codec": k[3], "nranks": k[4],
                        **v} for k, v in results.items()], f, indent=1)


if __name__ == "__main__":
    main()
