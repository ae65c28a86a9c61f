#!/usr/bin/env python3
"""Unmodified PyTorch DDP through SketchCCL standalone: 2 processes on one GPU.

    perf/gpu/torch_ddp_check.py --lib path/to/libsketchccl.so [--steps 300]

Runs, each in fresh processes:
  1. a single-process reference (no SketchCCL) on the two ranks' batches concatenated;
  2. DDP with 2 ranks on GPU 0, LD_PRELOAD=libsketchccl.so, SKETCHCCL_NCCL_LIB=none,
     torch.distributed's `nccl` backend, SKETCHCCL_CODEC=none;
  3. the same with SKETCHCCL_CODEC=q8;
  4. DDP with one rank in front of the real NCCL (LD_PRELOAD, the real libnccl found as usual).
Checks: after every step the parameters are bit-identical on both ranks (an all-gather of them);
the exact run ends within fp32 tolerance of the reference; the q8 run's loss follows the exact
run's; the one-rank run matches the reference on its own batches. Prints the step times.
Exit status: 0 passed, 1 a check failed, 77 skipped (no torch, no GPU, no library: says why).
perf/gpu/gpu_check.sh runs it where `import torch` works and a GPU exists.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

SKIP = 77


def skip(why):
    print(f"torch_ddp_check: skipped: {why}")
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the training job (the same code for every run) ---------------------------------------------
IN, HIDDEN, OUT, BATCH = 64, 256, 10, 32


def make_model(torch):
    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))


def batch(torch, step, rank, device):
    g = torch.Generator().manual_seed(100003 * step + rank)
    x = torch.randn(BATCH, IN, generator=g)
    y = torch.randint(0, OUT, (BATCH,), generator=g)
    return x.to(device), y.to(device)


def flat_params(torch, model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def worker(args):
    import torch
    import torch.distributed as dist
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    record = {"losses": [], "step_s": [], "mismatched_steps": 0}
    model = make_model(torch).to(device)
    if args.mode == "reference":
        ranks = list(range(args.batches_of))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for step in range(args.steps):
            xs, ys = zip(*(batch(torch, step, r, device) for r in ranks))
            x, y = torch.cat(xs), torch.cat(ys)
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            record["step_s"].append(time.perf_counter() - t0)
            record["losses"].append(loss.item())
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        try:  # device_id (torch >= 2.3) creates the communicator at once
            dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
        except TypeError:
            dist.init_process_group("nccl", rank=rank, world_size=world)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        for step in range(args.steps):
            x, y = batch(torch, step, rank, device)
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            record["step_s"].append(time.perf_counter() - t0)
            # The mean loss over the ranks: what the reference computes on the whole batch.
            lt = loss.detach().clone()
            dist.all_reduce(lt)
            record["losses"].append(lt.item() / world)
            flat = flat_params(torch, ddp.module)
            every = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(every, flat)
            if any(not torch.equal(every[0], f) for f in every[1:]):
                record["mismatched_steps"] += 1
        dist.barrier()
        dist.destroy_process_group()
    if args.out:
        torch.save(flat_params(torch, model).cpu(), args.out + ".pt")
        with open(args.out, "w") as f:
            json.dump(record, f)


# ---- the orchestrator -----------------------------------------------------------------------------
def launch(script, lib, mode, world, steps, env_extra, tmp, name, timeout_s, batches_of=2):
    """Starts `world` worker processes; returns their records (None for a failed rank)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ)
        env.update(env_extra)
        env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        if lib:
            env["LD_PRELOAD"] = lib
        out = os.path.join(tmp, f"{name}_{rank}.json")
        cmd = [sys.executable, script, "--worker", "--mode", mode, "--steps", str(steps),
               "--out", out, "--batches-of", str(batches_of)]
        procs.append((subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True), out))
    records = []
    for p, out in procs:
        try:
            text, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            text += "\n(killed: timeout)"
        if p.returncode != 0 or not os.path.exists(out):
            print(f"--- {name}: a rank failed (exit {p.returncode}):\n{text[-3000:]}")
            records.append(None)
            continue
        with open(out) as f:
            records.append(json.load(f))
    return records


def median_ms(xs):
    xs = sorted(xs[len(xs) // 10:])  # past the warm-up
    return 1e3 * xs[len(xs) // 2] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.environ.get("SKETCHCCL_LIB", ""))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--mode", default="ddp")
    ap.add_argument("--out", default="")
    ap.add_argument("--batches-of", type=int, default=2)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    try:
        import torch
    except ImportError:
        skip("no torch (import torch failed)")
    if not torch.cuda.is_available():
        skip("no GPU (torch.cuda.is_available() is False)")
    if not args.lib or not os.path.exists(args.lib):
        skip("no libsketchccl.so: pass --lib or set SKETCHCCL_LIB")
    import tempfile
    lib = os.path.abspath(args.lib)
    script = os.path.abspath(__file__)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        def run(name, mode, world, preload, env, batches_of=2):
            t0 = time.time()
            recs = launch(script, preload, mode, world, args.steps, env, tmp, name, args.timeout,
                          batches_of)
            print(f"{name}: {time.time() - t0:.1f} s wall")
            return recs

        common = {"SKETCHCCL_TIMEOUT": "120", "SKETCHCCL_TRANSPORT": "socket"}
        ref = run("reference", "reference", 1, "", {})
        exact = run("exact", "ddp", 2, lib, {**common, "SKETCHCCL_NCCL_LIB": "none",
                                            "SKETCHCCL_CODEC": "none"})
        q8 = run("q8", "ddp", 2, lib, {**common, "SKETCHCCL_NCCL_LIB": "none",
                                       "SKETCHCCL_CODEC": "q8"})
        # One rank in front of the real NCCL (SketchCCL forwards or takes over as its policy
        # says), against a reference on rank 0's batches alone.
        ref1 = run("reference_1rank", "reference", 1, "", {}, batches_of=1)
        real = run("real_nccl_1rank", "ddp", 1, lib, {"SKETCHCCL_TIMEOUT": "120"})
        params = {}
        for name in ("reference_0", "exact_0", "q8_0", "reference_1rank_0", "real_nccl_1rank_0"):
            path = os.path.join(tmp, name + ".json.pt")
            params[name] = torch.load(path) if os.path.exists(path) else None

        def check(cond, what):
            nonlocal ok
            print(("PASS " if cond else "FAIL ") + what)
            ok = ok and cond

        for name, recs in (("exact", exact), ("q8", q8), ("real_nccl_1rank", real)):
            check(all(r is not None for r in recs) and len(recs) > 0, f"{name}: every rank ran")
        check(ref[0] is not None, "reference ran")
        if all(r is not None for r in exact + q8 + ref):
            check(all(r["mismatched_steps"] == 0 for r in exact + q8),
                  "parameters identical on both ranks after every step (none and q8)")
            pr, pe = params["reference_0"], params["exact_0"]
            diff = (pr - pe).abs().max().item()
            scale = pr.abs().max().item()
            check(diff <= 1e-4 * max(scale, 1.0),
                  f"exact DDP matches the single-process run: max |diff| {diff:.3g} (scale {scale:.3g})")
            le, lq, lr_ = exact[0]["losses"], q8[0]["losses"], ref[0]["losses"]
            check(max(abs(a - b) for a, b in zip(le, lr_)) <= 1e-3 * max(lr_),
                  "exact DDP loss follows the reference's")
            tail = max(1, len(le) // 10)
            mean_e = sum(le[-tail:]) / tail
            mean_q = sum(lq[-tail:]) / tail
            check(abs(mean_q - mean_e) <= 0.05 * abs(mean_e) + 1e-3,
                  f"q8 loss follows the exact one: last-10% mean {mean_q:.4f} vs {mean_e:.4f}")
        if real[0] is not None and ref1[0] is not None:
            pr, pe = params["reference_1rank_0"], params["real_nccl_1rank_0"]
            diff = (pr - pe).abs().max().item()
            check(diff <= 1e-4 * max(pr.abs().max().item(), 1.0),
                  f"one rank in front of the real NCCL matches its reference: max |diff| {diff:.3g}")
        print("step time (median ms): " + ", ".join(
            f"{n} {median_ms(r[0]['step_s']):.2f}" for n, r in
            (("reference", ref), ("exact", exact), ("q8", q8), ("real_nccl_1rank", real))
            if r and r[0] is not None))
    print("RESULT: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
