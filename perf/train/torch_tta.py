#!/usr/bin/env python3
"""Time to accuracy with PyTorch: DistributedDataParallel over 4 ranks (processes), gradients
averaged by gloo's AllReduce (fp32, what PyTorch users run on CPU) or by SketchCCL's through the
DDP communication hook (sketchccl.torch.comm_hook), per codec, on the same network.

Models (torch.nn only) and data (files Debian packages ship):
  lm   a GPT-style byte-level language model (pre-norm transformer, 4 layers, width 256, 4
       heads, context 64: 3.3 M parameters) on the Python standard library's own source
       (/usr/lib/python3.11/*.py, 4.7 MB: real code, comments and docstrings; every 10th file
       is the validation set)
  cnn  a convolutional network (2 conv layers, 2 dense: 1.7 M parameters) on Fashion-MNIST
       (/usr/share/datasets/fashion-mnist, package dataset-fashion-mnist; validation: 2,000
       images of the test set)

Every configuration of a seed starts from the same parameters and sees the same batches. The
clock counts training steps only (evaluation stops it). Per run: the validation loss every
--eval-every steps; the time to accuracy is the training time until the validation loss first
reaches the fp32 (gloo) run's final loss plus --margin (same seed).

  torch_tta.py --model lm|cnn [--configs LIST] [--seeds LIST] [--steps N] [--eval-every N]
               [--margin X] [--netns PREFIX] [--csv FILE] [--out DIR] [--label TEXT]

Configurations: fp32 (gloo's AllReduce, no hook), compute (a hook that communicates nothing: the
step's compute alone), and SketchCCL codecs: none, bf16, q8, q4, auto, ..., with "+ef" for error
feedback. --netns PREFIX: rank i runs in namespace PREFIX<i> (perf/demo/netem.sh --exec makes
scclns0..3 behind a 1 Gbit/s bridge); without it the ranks share loopback (not a slow network).
"""
import argparse
import glob
import gzip
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FASHION = "/usr/share/datasets/fashion-mnist"
PY_SOURCES = "/usr/lib/python3.11/*.py"
NRANKS = 4
COMPUTE_STEPS = 40  # the compute-only configuration measures the step time, not a curve
DEFAULTS = {  # steps, eval every, batch per rank, learning rate, margin on the loss
    "lm": dict(steps=100, eval_every=10, batch=2, lr=2e-3, margin=0.03),
    "cnn": dict(steps=80, eval_every=8, batch=32, lr=1e-3, margin=0.03),
}


# --- data and models (worker side) -------------------------------------------------------------
def lm_data(torch):
    files = sorted(glob.glob(PY_SOURCES))
    if not files:
        raise SystemExit("torch_tta: no Python sources at %s" % PY_SOURCES)
    train, val = [], []
    for i, f in enumerate(files):
        (val if i % 10 == 9 else train).append(open(f, "rb").read())
    as_tensor = lambda parts: torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8).long()
    return as_tensor(train), as_tensor(val)


def make_lm(torch, ctx=64, width=256, layers=4, heads=4):
    nn = torch.nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.register_buffer("mask", torch.full((ctx, ctx), float("-inf")).triu(1))

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).view(B, T, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // heads) + self.mask[:T, :T]
            y = att.softmax(-1) @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    class TransformerBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.att = Attention()
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, x):
            x = x + self.att(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(256, width), nn.Embedding(ctx, width)
            self.blocks = nn.Sequential(*[TransformerBlock() for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, 256)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            return self.head(self.ln(self.blocks(x)))

    return GPT()


def read_idx(torch, name):
    raw = gzip.open(os.path.join(FASHION, name)).read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).view(*dims)


def cnn_data(torch):
    if not os.path.isdir(FASHION):
        raise SystemExit("torch_tta: no Fashion-MNIST at %s (apt-get install dataset-fashion-mnist)"
                         % FASHION)
    xtr, ytr = read_idx(torch, "train-images-idx3-ubyte.gz"), read_idx(
        torch, "train-labels-idx1-ubyte.gz").long()
    xte, yte = read_idx(torch, "t10k-images-idx3-ubyte.gz"), read_idx(
        torch, "t10k-labels-idx1-ubyte.gz").long()
    return (xtr, ytr), (cnn_input(xte[:2000]), yte[:2000])


def cnn_input(images):  # uint8 images (N, 28, 28) to the network's input: normalized floats
    return (((images.float() / 255.0) - 0.2860) / 0.3530).unsqueeze(1)  # training set mean, std


def make_cnn(torch):
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


# --- one rank ---------------------------------------------------------------------------------
def worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)  # 4 ranks share the machine's cores
    rank = a.rank
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (a.master, a.port), rank=rank,
                            world_size=NRANKS)
    cfg = DEFAULTS[a.model]
    torch.manual_seed(a.seed)
    if a.model == "lm":
        train, val = lm_data(torch)
        model, ctx = make_lm(torch), 64
        vg = torch.Generator().manual_seed(12345)  # the same validation windows for every run
        starts = torch.randint(0, len(val) - ctx - 1, (128,), generator=vg)
        vx = torch.stack([val[s:s + ctx] for s in starts])
        vy = torch.stack([val[s + 1:s + ctx + 1] for s in starts])
    else:
        (xtr, ytr), (vx, vy) = cnn_data(torch)
        model = make_cnn(torch)
    nparams = sum(p.numel() for p in model.parameters())
    ddp = DDP(model)
    hook_state = None
    if a.config == "compute":  # no communication: the step's compute alone
        def noop(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp.register_comm_hook(None, noop)
    elif a.config != "fp32":
        import sketchccl.torch as st
        codec, ef = a.config.split("+")[0], a.config.endswith("+ef")
        hook_state, hook = st.comm_hook(codec=codec, error_feedback=ef)
        ddp.register_comm_hook(hook_state, hook)
    opt = torch.optim.AdamW(ddp.parameters(), lr=cfg["lr"], weight_decay=0.0)
    batches = torch.Generator().manual_seed(a.seed * 1000 + rank)  # this rank's batches

    def batch():
        B = cfg["batch"]
        if a.model == "lm":
            s = torch.randint(0, len(train) - ctx - 1, (B,), generator=batches)
            return (torch.stack([train[i:i + ctx] for i in s]),
                    torch.stack([train[i + 1:i + ctx + 1] for i in s]))
        idx = torch.randint(0, len(ytr), (B,), generator=batches)
        return cnn_input(xtr[idx]), ytr[idx]

    def loss_of(out, y):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def evaluate():  # this rank's share of the validation set, summed exactly over the ranks
        model.eval()
        with torch.no_grad():
            lo, hi = len(vy) * rank // NRANKS, len(vy) * (rank + 1) // NRANKS
            s = torch.zeros(2, dtype=torch.float64)
            for i in range(lo, hi, 64):
                out = model(vx[i:min(hi, i + 64)])
                s[0] += float(loss_of(out, vy[i:min(hi, i + 64)])) * out[..., 0].numel()
                s[1] += out[..., 0].numel()
        dist.all_reduce(s)
        model.train()
        return float(s[0] / s[1])

    # The exact AllReduce of the whole gradient with gloo, timed alone (3 calls, median).
    flat = torch.zeros(nparams)
    ar = []
    for _ in range(3):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(flat)
        ar.append(time.perf_counter() - t0)
    records = []
    out = open(a.result, "w") if rank == 0 else None

    def emit(rec):
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    emit({"nparams": nparams, "gloo_allreduce_s": sorted(ar)[1]})
    clock = 0.0
    emit({"step": 0, "time": 0.0, "val_loss": evaluate()})
    dist.barrier()
    steps = min(a.steps, COMPUTE_STEPS) if a.config == "compute" else a.steps
    for step in range(1, steps + 1):
        x, y = batch()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(ddp(x), y)
        loss.backward()  # DDP's reduction of the buckets ends inside backward
        opt.step()
        clock += time.perf_counter() - t0
        if step % a.eval_every == 0 or step == steps:
            emit({"step": step, "time": clock, "val_loss": evaluate(), "train_loss": loss.item()})
            dist.barrier()
    summary = {"steps": steps, "time": clock}
    if hook_state is not None:
        s = hook_state.stats()
        summary.update(bytes_in=s["bytes_in"], bytes_sent=s["bytes_sent"],
                       lib_seconds=s["seconds"], codecs=sorted(s["codecs"]))
        hook_state.close()
    emit({"summary": summary})
    if out:
        out.close()
    dist.barrier()
    # Out without tearing down: torch 1.13 can deadlock destroying DDP's Reducer and its gloo
    # process group at exit (a gloo thread freeing a tensor waits for the GIL the main thread
    # holds while it waits for the group's lock).
    sys.stdout.flush()
    os._exit(0)


# --- the launcher -----------------------------------------------------------------------------
def torch_python():
    """A Python that imports torch (Debian's python3-torch is only in /usr/bin/python3)."""
    for py in [os.environ.get("SKETCHCCL_TORCH_PYTHON"), sys.executable, "/usr/bin/python3"]:
        if py and subprocess.run([py, "-c", "import torch.distributed"],
                                 capture_output=True).returncode == 0:
            return py
    raise SystemExit("torch_tta: no Python here imports torch (apt-get install python3-torch)")


def cpu_ticks():
    """(busy, total) jiffies of the whole machine (/proc/stat)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return sum(f) - f[3] - f[4], sum(f)


def run_config(a, py, config, seed, port, workdir):
    result = os.path.join(workdir, "%s-%s-%d.jsonl" % (a.model, config, seed))
    # One thread per rank for torch and BLAS: 4 ranks share the cores (Debian's threaded
    # OpenBLAS, where installed instead of libopenblas0-serial, would start one per core).
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", SKETCHCCL_TIMEOUT="120",
               SKETCHCCL_DEBUG=os.environ.get("SKETCHCCL_DEBUG", "WARN"))
    pkg = os.environ.get("SKETCHCCL_PYTHONPATH") or os.path.join(a.build, "python")
    env["PYTHONPATH"] = pkg + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    master = "127.0.0.1"
    # SketchCCL's socket transport: a rank waiting for its peers sleeps in ppoll() as gloo's
    # do; UCX's progress spins (docs/transport.md), taking the cores the 4 ranks compute on.
    env.setdefault("SKETCHCCL_TRANSPORT", "socket")
    if a.netns:  # gloo and SketchCCL on the namespace's link (eth0)
        master = "10.88.0.1"
        env.update(GLOO_SOCKET_IFNAME="eth0", SKETCHCCL_SOCKET_IFNAME="=eth0")
    procs = []
    busy0, total0 = cpu_ticks()
    ours0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for r in range(NRANKS):
        cmd = [py, os.path.abspath(__file__), "--worker", "--model", a.model, "--config", config,
               "--seed", str(seed), "--steps", str(a.steps), "--eval-every", str(a.eval_every),
               "--rank", str(r), "--master", master, "--port", str(port), "--result", result]
        if a.netns:
            cmd = ["ip", "netns", "exec", "%s%d" % (a.netns, r)] + cmd
        err = open(os.path.join(workdir, "%s-%s-%d.err.%d" % (a.model, config, seed, r)), "w")
        procs.append(subprocess.Popen(cmd, env=env, stdout=err, stderr=subprocess.STDOUT))
    t0 = time.time()
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(timeout=max(1, a.timeout - (time.time() - t0))))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            rcs.append("timeout")
    busy1, total1 = cpu_ticks()
    ours1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    hz, span = os.sysconf("SC_CLK_TCK"), max(1, total1 - total0)
    ours = (ours1.ru_utime + ours1.ru_stime - ours0.ru_utime - ours0.ru_stime) * hz / span
    busy = (busy1 - busy0) / span
    recs = [json.loads(l) for l in open(result)] if os.path.exists(result) else []
    recs.append({"cpu": {"ours": ours, "others": max(0.0, busy - ours)}})
    if any(rc != 0 for rc in rcs):
        print("torch_tta: %s seed %d failed (exit %s); logs %s/%s-%s-%d.err.*" % (
            config, seed, rcs, workdir, a.model, config, seed), file=sys.stderr)
        return None
    return recs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["lm", "cnn"], required=True)
    p.add_argument("--configs", default="compute,fp32,none,bf16,q8,q4,q4+ef,auto")
    p.add_argument("--seeds", default="1")
    p.add_argument("--steps", type=int)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--margin", type=float)
    p.add_argument("--netns", default="")
    p.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "build"))
    p.add_argument("--csv", default="")
    p.add_argument("--out", default="")
    p.add_argument("--label", default="")
    p.add_argument("--timeout", type=float, default=900)
    # worker side
    p.add_argument("--worker", action="store_true")
    p.add_argument("--config", default="fp32")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--master", default="127.0.0.1")
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--result", default="")
    a = p.parse_args()
    for k in ("steps", "eval_every", "margin"):
        if getattr(a, k) is None:
            setattr(a, k, DEFAULTS[a.model][k])
    if a.worker:
        return worker(a)

    py = torch_python()
    configs = [c for c in a.configs.split(",") if c]
    if "fp32" not in configs:
        raise SystemExit("torch_tta: --configs needs fp32 (the target and the baseline)")
    seeds = [int(s) for s in a.seeds.split(",")]
    workdir = a.out or tempfile.mkdtemp(prefix="torch_tta.")
    os.makedirs(workdir, exist_ok=True)
    where = a.label or ("%s (namespaces %s0..%d)" % ("emulated network", a.netns, NRANKS - 1)
                        if a.netns else "LOOPBACK (not a slow network)")
    print("== torch_tta %s: DDP, %d ranks, %s; %d steps, validation every %d; target: fp32's final "
          "validation loss + %g" % (a.model, NRANKS, where, a.steps, a.eval_every, a.margin),
          flush=True)
    port = 29500 + os.getpid() % 2000
    runs = {}  # (seed, config) -> {curve, step_s, wire, cpu} or None (failed)
    for k, seed in enumerate(seeds):
        # Every other seed in reverse order: a drift of the machine's load shifts no configuration
        # the same way in every seed.
        for config in (configs if k % 2 == 0 else configs[::-1]):
            if config == "compute" and k > 0:
                continue  # a step time, not a curve: the first seed's is enough
            port += 1
            wall = time.time()
            recs = run_config(a, py, config, seed, port, workdir)
            if recs is None:
                runs[(seed, config)] = None
                continue
            head = recs[0]
            summary = next((r["summary"] for r in recs if "summary" in r), {})
            run = {"curve": [r for r in recs if "val_loss" in r],
                   "cpu": next(r["cpu"] for r in recs if "cpu" in r),
                   "step_s": summary["time"] / max(1, summary["steps"]),
                   "wire": (summary["bytes_sent"] / summary["bytes_in"]
                            if summary.get("bytes_in") else None)}
            runs[(seed, config)] = run
            print("   seed %d %-8s %6.1f s for %3d steps (%.3f s/step), final val loss %.4f%s"
                  "  [run %.0f s; CPU %.0f%% ours, %.0f%% others']" % (
                      seed, config, summary["time"], summary["steps"], run["step_s"],
                      run["curve"][-1]["val_loss"],
                      ", wire/input %.3f" % run["wire"] if run["wire"] is not None else "",
                      time.time() - wall, 100 * run["cpu"]["ours"], 100 * run["cpu"]["others"]),
                  flush=True)
            if config == "fp32":
                print("   seed %d: %d parameters (%.1f MiB fp32); gloo's AllReduce of the whole "
                      "gradient, alone: %.3f s" % (seed, head["nparams"],
                                                   head["nparams"] * 4 / 1048576.0,
                                                   head["gloo_allreduce_s"]), flush=True)
    if a.csv:
        with open(a.csv, "w") as csv:
            csv.write("model,config,seed,time,val_loss\n")  # as perf/report/plot_tta.sh --loss reads
            for seed in seeds:
                for config in configs:
                    for r in (runs.get((seed, config)) or {}).get("curve", []):
                        csv.write("%s,%s,%d,%.4f,%.5f\n" % (a.model, config, seed, r["time"],
                                                           r["val_loss"]))
    # Per configuration over the seeds: the time to each seed's target, the speed-ups.
    tta = {}
    for seed in seeds:
        base = runs.get((seed, "fp32"))
        if not base:
            continue
        target = base["curve"][-1]["val_loss"] + a.margin
        for config in configs:
            run = runs.get((seed, config))
            if run and config != "compute":
                tta[(seed, config)] = next((r["time"] for r in run["curve"]
                                            if r["val_loss"] <= target), None)
    print("   summary: training time until the validation loss first reaches the fp32 (gloo) "
          "run's final loss + %g, per seed; speed-up: the mean over the seeds of the ratio" %
          a.margin)
    for config in configs:
        if config == "compute":
            pairs = [(runs[(s, "compute")]["step_s"], runs[(s, "fp32")]["step_s"]) for s in seeds
                     if runs.get((s, "compute")) and runs.get((s, "fp32"))]
            if pairs:
                c = sum(p[0] for p in pairs) / len(pairs)
                f = sum(p[1] for p in pairs) / len(pairs)
                print("   time-to-accuracy %s compute: %.3f s/step without communication, fp32 "
                      "(gloo) %.3f s/step: communication is %.0f%% of an fp32 step" % (
                          a.model, c, f, 100 * (1 - c / f)))
            continue
        times = [tta.get((s, config)) for s in seeds]
        speedups = []
        for base in ("fp32", "bf16"):
            sp = [tta[(s, base)] / t for s, t in zip(seeds, times) if t and tta.get((s, base))]
            speedups.append("%.2fx%s" % (sum(sp) / len(sp), " (%.2f-%.2f)" % (min(sp), max(sp))
                                         if len(sp) > 1 else "") if sp else "-")
        steps = [runs[(s, config)]["step_s"] for s in seeds if runs.get((s, config))]
        print("   time-to-accuracy %s %-7s %s; vs gloo fp32 %s, vs bf16 %s; %s s/step" % (
            a.model, config, ", ".join("%.1f s" % t if t is not None else "not reached"
                                       for t in times),
            speedups[0], speedups[1],
            "%.3f" % (sum(steps) / len(steps)) if steps else "-"), flush=True)
    others = [r["cpu"]["others"] for r in runs.values() if r]
    if others:
        print("   CPU taken by other processes on the machine during the runs: %.0f%% on average, "
              "%.0f%% at most (of %d cores)" % (100 * sum(others) / len(others),
                                                100 * max(others), os.cpu_count()))
    return 0 if all(runs.values()) else 1  # every run ran


if __name__ == "__main__":
    sys.exit(main())
