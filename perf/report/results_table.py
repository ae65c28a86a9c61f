#!/usr/bin/env python3
"""The demo's current results: one markdown table (per codec: AllReduce busbw and gain over the
exact ring, ReduceScatter gain, wire bytes, NMSE, training accuracy) from demo_report.py's JSON
summaries and the convergence summary line (or a ddp-train run's final accuracies), headed by one line naming the machine (git
history dates the runs),
then the time-to-accuracy lines of `ddp-train` runs (--tta).
With --splice FILE NAME it also replaces what lies between FILE's `<!-- NAME:begin -->` and
`<!-- NAME:end -->` markers with a file's text (the README's table, docs/perf.md's report).
Only what the tools printed is used; a missing figure is shown as `-`."""
import argparse
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def accuracies(path):
    """{config: accuracy %} from a `convergence (...): exact 96.4%, q8 = exact, ...` line."""
    try:
        text = open(path).read()
    except OSError:
        return None, {}
    m = re.search(r"^convergence \(([^)]*)\): (.*)$", text, re.M)
    if not m:
        return None, {}
    acc = {}
    for item in m.group(2).split(", "):
        p = item.split()
        if len(p) >= 2:
            acc[p[0]] = p[1]
    exact = acc.get("exact")
    acc = {k: (exact if v == "=" else v) for k, v in acc.items()}
    if "exact" in acc:
        acc["none"] = acc.pop("exact")
    return m.group(1), acc


def tta_lines(paths):
    """The `  time-to-accuracy TASK CONFIG: ...` lines of ddp-train outputs, in order."""
    out = []
    for p in paths or []:
        try:
            text = open(p).read()
        except OSError:
            continue
        out += [l for l in text.splitlines() if re.match(r"^  time-to-accuracy \S+ \S+: ", l)]
    return out


def tta_accuracies(path):
    """(what, {codec: accuracy %}) from a ddp-train output: its header (task, epochs) and the
    final accuracy of each configuration's first seed; fp32 is the codec `none`."""
    try:
        text = open(path).read()
    except OSError:
        return None, {}
    head = re.search(r"^== ddp-train (\S+): .*?, (\d+) epochs", text, re.M)
    acc = {}
    for m in re.finditer(r"^  (\S+) +seed \d+: final ([0-9.]+%)", text, re.M):
        acc.setdefault("none" if m.group(1) == "fp32" else m.group(1), m.group(2))
    if not head:
        return None, acc
    return f"{head.group(1)}, ddp-train, {head.group(2)} epochs", acc


def machine():
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = re.sub(r"\s+", " ", line.split(":", 1)[1]).strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(open("/proc/meminfo").readline().split()[1])
        mem = f", {kb / 1048576:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} cores of {model}{mem}"


def fmt(v, spec, suffix=""):
    return "-" if v is None else f"{v:{spec}}{suffix}"


def sci(v):
    return "-" if v is None else ("0" if v == 0 else f"{v:.1e}")


def cpu_share(line):
    """'; CPU during the sweeps: X% the demo's, Y% other processes' from demo.sh's CPU line."""
    m = re.search(r"(\d+)% this demo's processes.*?(\d+)% other processes", line or "")
    return f"; CPU during the sweeps: {m.group(1)}% the demo's, {m.group(2)}% other processes" \
        if m else ""


def table(ar, rs, conv_path, mode, cpu="", tta=None, acc_from=None):
    conv_what, acc = accuracies(conv_path) if conv_path else (None, {})
    if acc_from:
        conv_what, acc = tta_accuracies(acc_from)
    net = ("4 ranks in network namespaces, 1 Gbit/s `tc tbf` links, UCX over TCP" if mode == "netem"
           else "4 ranks on loopback (not a slow network)")
    lo, hi = (ar or {}).get("judge", [4 << 20, 64 << 20])
    big = (ar or {}).get("largest", 64 << 20)
    rng = f"{lo >> 20}-{hi >> 20} MiB"
    acc_head = "test accuracy"
    if conv_what and acc_from:
        acc_head = f"test accuracy ({conv_what})"
    elif conv_what:
        acc_head = f"test accuracy ({conv_what.split(',')[0]}, {conv_what.split(',')[2].strip()})"
    out = [f"`./run demo` on {machine()}; {net}{cpu_share(cpu)}.", "",
           f"| codec | data | AllReduce busbw at {big >> 20} MiB | AllReduce × exact ring | "
           f"ReduceScatter × exact ring | AllReduce wire bytes per input byte | AllReduce NMSE | "
           f"{acc_head} |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    codecs = (ar or {}).get("codecs", {})
    rcodecs = (rs or {}).get("codecs", {})
    for n, c in codecs.items():
        if n.startswith("mpi-"):
            continue
        r = rcodecs.get(n, {})
        out.append(f"| `{n}` | {c['data']} | {fmt(c['busbw'], '.3f', ' GB/s')} | "
                   f"{fmt(c['x_none'], '.2f', '×')} | {fmt(r.get('x_none'), '.2f', '×')} | "
                   f"{fmt(c['wire'], '.3f')} | {sci(c['nmse'])} | {acc.get(n, '-')} |")
    for n, c in (ar or {}).get("clustered", {}).items():
        out.append(f"| `{n}` | {c['data']} | {fmt(c['busbw'], '.3f', ' GB/s')} | "
                   f"{fmt(c['x_none'], '.2f', '×')} | - | {fmt(c['wire'], '.3f')} | "
                   f"{sci(c['nmse'])} | - |")
    m = codecs.get("mpi-ring")
    if m:
        out.append(f"| Open MPI ring `MPI_Allreduce` | gauss | {fmt(m['busbw'], '.3f', ' GB/s')} | "
                   f"{fmt(m['x_none'], '.2f', '×')} | - | - | 0 | - |")
    out += ["", f"× exact ring: the median over {rng} of the busbw ratio against SketchCCL's exact "
            "fp32 ring (`none`) in the same run; wire bytes and NMSE at the largest size. "
            "Full report: [docs/perf.md](docs/perf.md#current-results)."]
    lines = tta_lines(tta)
    if lines:
        out += ["", "Time to accuracy (`ddp-train`: DDP's buckets, each AllReduce overlapped with the "
                "rest of the backward pass, over the same network): training wall-clock time until "
                "the test accuracy first reaches the exact fp32 run's final accuracy less 0.5 points, "
                "and the speed-up over exact fp32 and bf16 on the wire "
                "([method](docs/perf.md#time-to-accuracy)).", "", "```"] + lines + ["```"]
    return "\n".join(out) + "\n"


def splice(path, name, text):
    with open(path) as f:
        old = f.read()
    pat = re.compile(rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)", re.S)
    if not pat.search(old):
        print(f"results_table: no {name} markers in {path}", file=sys.stderr)
        return 1
    with open(path, "w") as f:
        f.write(pat.sub(lambda m: m.group(1) + text + m.group(2), old))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--allreduce", help="demo_report.py --json of the AllReduce sweep")
    ap.add_argument("--reduce-scatter", help="demo_report.py --json of the ReduceScatter sweep")
    ap.add_argument("--convergence", help="a convergence --short output (its summary line)")
    ap.add_argument("--tta", nargs="*", default=[],
                    help="ddp-train outputs (their time-to-accuracy lines); NAME.txt or NAME")
    ap.add_argument("--accuracy-from", help="a ddp-train output: the accuracy column from its "
                    "final accuracies (instead of --convergence)")
    ap.add_argument("--mode", default="netem")
    ap.add_argument("--cpu", default="", help="demo.sh's CPU line (how busy the machine was)")
    ap.add_argument("--out", help="write the table here")
    ap.add_argument("--splice", nargs=2, metavar=("FILE", "NAME"),
                    help="replace FILE's NAME markers' content (with --text, else the table)")
    ap.add_argument("--text", help="the file whose text --splice puts between the markers")
    a = ap.parse_args()
    if a.text:
        with open(a.text) as f:
            text = f.read()
    else:
        ar = load(a.allreduce) if a.allreduce else None
        rs = load(a.reduce_scatter) if a.reduce_scatter else None
        if not ar:
            print("results_table: no AllReduce summary", file=sys.stderr)
            return 1
        tta = [t if t.endswith(".txt") else t + ".txt" for t in a.tta]
        text = table(ar, rs, a.convergence, a.mode, a.cpu, tta, a.accuracy_from)
        if a.out:
            with open(a.out, "w") as f:
                f.write(text)
        else:
            print(text, end="")
    if a.splice:
        return splice(a.splice[0], a.splice[1], text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
