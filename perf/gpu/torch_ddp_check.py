#!/usr/bin/env python3
"""PyTorch DDP through SketchCCL in front of the real NCCL (PyTorch's wheel), ranks on one GPU.

    perf/gpu/torch_ddp_check.py --lib path/to/libsketchccl.so [--steps 60] [--timeout S]
    perf/gpu/torch_ddp_check.py --rehearse --lib ...   # the launch plumbing only, no torch needed
    perf/gpu/torch_ddp_check.py --plan                 # prints the runs and their environments

Every run is `torchrun --standalone --nproc-per-node N --no-python bash perf/gpu/ddp_rank.sh
python3 torch_ddp_check.py --worker ...`: ddp_rank.sh gives each rank its own NCCL_HOSTID (NCCL's
duplicate-GPU check compares host hash and bus id, and NCCL_HOSTID replaces the host string the
hash is made of, so ranks on one GPU pass as ranks of different hosts) and, for SketchCCL's runs,
LD_PRELOAD. The runs, in order:
  exact_2  2 ranks, NCCL alone (the exact run);
  q8_2     the same through SketchCCL, SKETCHCCL_CODEC=q8, SKETCHCCL_MIN_BYTES=0 (the model's one
           bucket is below the default 1 MiB): 2 nodes of 1 rank, the flat compressed ring;
  exact_4  4 ranks, NCCL alone;
  q8_4     4 ranks through SketchCCL, SKETCHCCL_HOSTID=n0,n0,n1,n1: 2 nodes x 2, hierarchical
           (NCCL's ReduceScatter on the node communicator, the compressed rail, NCCL's AllGather).
Checks for each q8 run: every rank ran; the parameters are identical on every rank after every
step; SketchCCL's statistics show calls taken and q8 compressing (wire bytes per input byte
below 0.75: the exact 2-rank ring sends 1.0), hierarchically for q8_4; the parameters differ from the exact run's (else nothing
was compressed); the loss (last 10% of steps) follows the exact run's. Prints the step times.
Exit status: 0 passed, 1 a check failed, 77 skipped (no torch or no GPU: says why; with
--rehearse, the plumbing passed and the torch part is what skips).
"""
import argparse
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
RANK_SH = os.path.join(HERE, "ddp_rank.sh")
# Started through bash, so that a copy of the tree that lost its modes still runs it.
BASH = shutil.which("bash") or "/bin/bash"
REPO = os.path.dirname(os.path.dirname(HERE))

# ---- the training job (the same code for every run) ---------------------------------------------
IN, HIDDEN, OUT, BATCH = 64, 256, 10, 32


def worker(args):
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1234)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT)).to(device)
    dist.init_process_group("nccl", device_id=device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    record = {"losses": [], "step_s": [], "mismatched_steps": 0}
    for step in range(args.steps):
        g = torch.Generator().manual_seed(100003 * step + rank)
        x = torch.randn(BATCH, IN, generator=g).to(device)
        y = torch.randint(0, OUT, (BATCH,), generator=g).to(device)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        record["step_s"].append(time.perf_counter() - t0)
        # Gathers (forwarded to NCCL, exact) for the checks, so they measure only DDP's AllReduce.
        losses = [torch.zeros(1, device=device) for _ in range(world)]
        dist.all_gather(losses, loss.detach().reshape(1))
        record["losses"].append(sum(v.item() for v in losses) / world)
        flat = torch.cat([p.detach().reshape(-1) for p in ddp.module.parameters()])
        every = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(every, flat)
        if any(not torch.equal(every[0], f) for f in every[1:]):
            record["mismatched_steps"] += 1
    record["params"] = flat.cpu().tolist()
    dist.destroy_process_group()
    with open(f"{args.out}.{rank}.json", "w") as f:
        json.dump(record, f)


# ---- the runs -----------------------------------------------------------------------------------
def plan(lib):
    """The runs: name, ranks, preload, environment for all ranks, per-rank values."""
    nccl = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "WARN",
            "OMP_NUM_THREADS": "1"}
    sccl = {"SKETCHCCL_CODEC": "q8", "SKETCHCCL_MIN_BYTES": "0", "SKETCHCCL_TRANSPORT": "socket",
            "SKETCHCCL_TIMEOUT": "60"}
    runs = []
    for world in (2, 4):
        hosts = {"NCCL_HOSTID": [f"gpucheck-r{r}" for r in range(world)]}
        runs.append({"name": f"exact_{world}", "world": world, "preload": "",
                     "env": dict(nccl), "rank_env": dict(hosts)})
        q8_hosts = dict(hosts)
        if world == 4:
            q8_hosts["SKETCHCCL_HOSTID"] = ["gpucheck-n0", "gpucheck-n0", "gpucheck-n1",
                                            "gpucheck-n1"]
        runs.append({"name": f"q8_{world}", "world": world, "preload": lib,
                     "env": {**nccl, **sccl}, "rank_env": q8_hosts,
                     "hierarchical": world == 4, "exact": f"exact_{world}"})
    return runs


def run_env(run, tmp):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(run["env"])
    env["DDP_RANK_ENV"] = " ".join(f"{k}={','.join(v)}" for k, v in run["rank_env"].items())
    env["DDP_PRELOAD"] = run["preload"]
    if run["preload"]:
        env["SKETCHCCL_STATS_FILE"] = os.path.join(tmp, f"{run['name']}_stats_%p.jsonl")
    return env


def torchrun_cmd(run, steps, out):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(run["world"]), "--no-python", BASH, RANK_SH,
            sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(steps),
            "--out", out]


RUNNING = []  # the torchrun in flight: its own session, so killed by group


def stop_running(signum, _frame):
    """A timeout from outside ends the torchrun too (it is in a session of its own)."""
    for p in RUNNING:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sys.exit(128 + signum)


def launch(run, steps, tmp, timeout_s):
    """Runs one torchrun; returns (records per rank or None, seconds, output tail)."""
    out = os.path.join(tmp, run["name"])
    t0 = time.time()
    p = subprocess.Popen(torchrun_cmd(run, steps, out), env=run_env(run, tmp),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    RUNNING[:] = [p]
    try:
        text, _ = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        text += f"\n(killed after {timeout_s:.0f} s)"
    RUNNING.clear()
    records = []
    for r in range(run["world"]):
        path = f"{out}.{r}.json"
        records.append(json.load(open(path)) if os.path.exists(path) else None)
    return records, time.time() - t0, p.returncode, text


def stats(run, tmp):
    lines = []
    for path in glob.glob(os.path.join(tmp, f"{run['name']}_stats_*.jsonl")):
        with open(path) as f:
            lines += [json.loads(line) for line in f if line.strip()]
    return lines


# ---- the plumbing, without torch ------------------------------------------------------------------
def rehearse(lib, tmp):
    """What every rank of every run would start with, run through ddp_rank.sh with `env` as the
    command. True when every check passes."""
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("plumbing PASS " if cond else "plumbing FAIL ") + what)
        ok = ok and cond

    check(os.access(RANK_SH, os.R_OK) and os.access(BASH, os.X_OK), f"{BASH} {RANK_SH} can run")
    check(bool(lib) and os.path.exists(lib), f"the library exists: {lib}")
    wheel = subprocess.run([sys.executable, os.path.join(REPO, "tools", "find_pip_nvidia.py")],
                           capture_output=True, text=True)
    dirs = [ln.split("=", 1)[1] for ln in wheel.stdout.splitlines() if ln.startswith("nccl=")]
    check(bool(dirs) and os.path.exists(os.path.join(dirs[0], "lib", "libnccl.so.2")),
          f"the NCCL wheel's libnccl.so.2 is found: {dirs[0] if dirs else wheel.stderr.strip()}")
    for run in plan(lib):
        print(f"plumbing: {run['name']}: " + shlex.join(torchrun_cmd(run, 60, "OUT")))
        seen = []
        for r in range(run["world"]):
            env = run_env(run, tmp)
            env.update({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(run["world"])})
            p = subprocess.run([BASH, RANK_SH, sys.executable, "-c",
                                "import json, os; print(json.dumps(dict(os.environ)))"],
                               env=env, capture_output=True, text=True)
            if p.returncode != 0:
                check(False, f"{run['name']} rank {r}: ddp_rank.sh failed: {p.stderr.strip()}")
                continue
            seen.append(json.loads(p.stdout))
        if len(seen) != run["world"]:
            continue
        hostids = [e.get("NCCL_HOSTID") for e in seen]
        check(len(set(hostids)) == run["world"] and None not in hostids,
              f"{run['name']}: every rank has its own NCCL_HOSTID: {hostids}")
        pre = [e.get("LD_PRELOAD", "") for e in seen]
        if run["preload"]:
            check(all(p == lib for p in pre), f"{run['name']}: every rank preloads {lib}")
            check(all(e.get("SKETCHCCL_MIN_BYTES") == "0" and e.get("SKETCHCCL_CODEC") == "q8"
                      for e in seen), f"{run['name']}: SKETCHCCL_CODEC=q8 SKETCHCCL_MIN_BYTES=0")
            check(all("%p" in e.get("SKETCHCCL_STATS_FILE", "") for e in seen),
                  f"{run['name']}: a statistics file per process")
            nodes = [e.get("SKETCHCCL_HOSTID") or e.get("NCCL_HOSTID") for e in seen]
            want = 2 if run["world"] == 4 else run["world"]
            per = {n: nodes.count(n) for n in nodes}
            shape = f"{len(per)} nodes x {sorted(per.values())}"
            if run.get("hierarchical"):
                check(len(per) == want and set(per.values()) == {2},
                      f"{run['name']}: SketchCCL sees 2 nodes of 2 ranks ({shape})")
            else:
                check(len(per) == run["world"],
                      f"{run['name']}: SketchCCL sees one rank per node, the flat ring ({shape})")
        else:
            check(all(p == "" for p in pre), f"{run['name']}: no rank preloads SketchCCL")
    return ok


# ---- the checks ------------------------------------------------------------------------------------
def median_ms(xs):
    xs = sorted(xs[len(xs) // 10:])  # past the warm-up
    return 1e3 * xs[len(xs) // 2] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.environ.get("SKETCHCCL_LIB", ""))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--timeout", type=float, default=60, help="seconds per torchrun")
    ap.add_argument("--rehearse", action="store_true")
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    lib = os.path.abspath(args.lib) if args.lib else ""
    if args.plan:
        print(json.dumps(plan(lib), indent=1))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        if not rehearse(lib, tmp):
            print("RESULT: FAILED (the launch plumbing)")
            return 1
    try:
        import torch
    except ImportError:
        print("SKIP torch part: no torch (import torch failed)")
        return SKIP
    if not torch.cuda.is_available():
        print("SKIP torch part: no GPU (torch.cuda.is_available() is False)")
        return SKIP
    if args.rehearse:
        print("SKIP torch part: --rehearse")
        return SKIP
    print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}")
    signal.signal(signal.SIGTERM, stop_running)
    signal.signal(signal.SIGINT, stop_running)
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("PASS " if cond else "FAIL ") + what)
        ok = ok and cond

    results, times = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for run in plan(lib):
            recs, secs, rc, text = launch(run, args.steps, tmp, args.timeout)
            name = run["name"]
            print(f"{name}: {secs:.1f} s wall, torchrun exit {rc}")
            ran = all(r is not None for r in recs)
            check(ran, f"{name}: every rank ran")
            if not ran:
                print(f"--- {name} output (tail):\n{text[-4000:]}")
                continue
            results[name] = recs
            times.append(f"{name} {median_ms(recs[0]['step_s']):.2f}")
            if not run["preload"]:
                continue
            check(all(r["mismatched_steps"] == 0 for r in recs),
                  f"{name}: parameters identical on every rank after every step")
            st = stats(run, tmp)
            taken = sum(s.get("calls_taken", 0) for s in st)
            q8 = [s.get("codecs", {}).get("q8") or s.get("q8") or {} for s in st]
            wire = [c.get("wire_per_input_byte") for c in q8 if c.get("calls")]
            # A 2-rank ring sends 1.0 byte per input byte exact, about 0.26 in q8.
            check(taken > 0 and bool(wire) and max(wire) < 0.75,
                  f"{name}: SketchCCL took {taken} calls, q8 wire bytes per input byte {wire}")
            if run.get("hierarchical"):
                check(any(s.get("hierarchical") for s in st),
                      f"{name}: hierarchical (statistics: "
                      f"{[(s.get('nodes'), s.get('ranks_per_node')) for s in st]})")
            ex = results.get(run["exact"])
            if ex:
                diff = max(abs(a - b) for a, b in zip(recs[0]["params"], ex[0]["params"]))
                check(diff > 0, f"{name}: parameters differ from the exact run's (max |diff| "
                                f"{diff:.3g}): the gradients were compressed")
                le, lq = ex[0]["losses"], recs[0]["losses"]
                tail = max(1, len(le) // 10)
                me, mq = sum(le[-tail:]) / tail, sum(lq[-tail:]) / tail
                check(abs(mq - me) <= 0.05 * abs(me) + 1e-3,
                      f"{name}: loss follows the exact run's: last-10% mean {mq:.4f} vs {me:.4f}")
            if not ok:
                print(f"--- {name} output (tail):\n{text[-2000:]}")
    print("step time (median ms): " + ", ".join(times))
    print("RESULT: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
