"""Memory and step time against width and depth: SGD, AdamW and infogeo's curvatures; and per rank under DDP.

Usage::

    python benchmarks/nn_scale.py [--quick] [--device cuda] [--out DIR] [--skip-distributed]

Every configuration runs in a fresh process (one thread; on CUDA all in one process, the allocator's
peak reset before each), so its peak resident memory (RSS, from ``getrusage``; on CUDA the allocator's
peak) is its own: the model, a batch, its gradients and
activations, and the optimizer.  The *state multiple* is exact instead: the bytes of every tensor
the optimizer holds (moments, curvature statistics, their averages, inverses, eigenbases, recorded
rows), found by walking the optimizer object and counting each storage once, over the bytes of the
parameters (``curv. x``: the preconditioner's share of it: statistics and factorisations; the rest is the
step rule's moments).  Step time: the CPU time (process time; CUDA: wall time after synchronising) of each of
``steps`` steps with the default periods (statistics every 10 steps, factorisations every 100, both also
at steps 1, 2, 4, 8, ... in the first 100): the median step, and the mean, which carries the refreshes.
Exponents: the slope of a
least-squares line through log(value) against log(width) or log(depth).

The distributed section runs DDP over gloo with 1, 2 and 4 processes on CPU: step time (rank 0's
median wall time) and the bytes each rank sends into collectives per step, averaged over the steps,
for DDP's gradient all-reduce (counted by a communication hook) and infogeo's own collectives
(``torch.distributed`` calls from :mod:`infogeo.nn.distributed`), with ``placement="memory"`` and
``"comm"``, and each rank's optimizer state over the parameters' bytes (the largest rank's is printed); and K-FAC
and EKFAC under FSDP2 (each Linear and the root ``fully_shard``-ed, its default step rule ``"graft"``, ``"memory"``:
each block's statistics on its owner rank alone), where the state multiple is over the whole parameters' bytes and
FSDP2's own collectives are not counted (the DDP column then reads 0).
Bytes are payloads handed to the collectives, not wire traffic.

Plots (``--out``, default ``benchmarks/results``): ``nn_scale_width.png`` (time and memory against
width, log-log) and ``nn_scale_depth.png``.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

OPTIMIZERS = ["sgd", "adamw", "diag", "kfac", "kfac-bf16", "kfac-eigen", "kfac-eigen-adam", "ekfac"]


# ------------------------------------------------------------------ one configuration (a child process)
def _mlp(torch, width: int, depth: int, d_in: int, classes: int):
    layers, d = [], d_in
    for _ in range(depth):
        layers += [torch.nn.Linear(d, width), torch.nn.Tanh()]
        d = width
    return torch.nn.Sequential(*layers, torch.nn.Linear(d, classes))


def _optimizer(torch, name: str, model):
    from infogeo.nn import NaturalGradient
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-3)
    kind, options = {"kfac-eigen": ("kfac", {"inverse": "eigen"}),
                     "kfac-eigen-adam": ("kfac", {"step_rule": "eigen-adam"}),
                     "kfac-bf16": ("kfac", {"factor_dtype": torch.bfloat16})}.get(name, (name, {}))
    return NaturalGradient(model, lr=1e-3, curvature=kind, **options)


def held_bytes(torch, root: Any, exclude: set) -> int:
    """Bytes of the distinct tensor storages reachable from ``root`` (not through modules or ``exclude``)."""
    seen_obj, seen_storage, total = set(), set(), 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen_obj or isinstance(obj, (torch.nn.Module, str, bytes, int, float, bool, type(None))):
            continue
        seen_obj.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if id(obj) in exclude or obj.device.type == "meta":
                continue
            if hasattr(obj, "to_local"):   # a DTensor (FSDP2): this rank's shard is what it holds
                obj = obj.to_local()
            st = obj.untyped_storage()
            key = (st.data_ptr(), obj.device.type)
            if key not in seen_storage and st.data_ptr() not in exclude:
                seen_storage.add(key)
                total += st.nbytes()
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif type(obj).__name__ == "Batch":   # the last batch seen: data, not state
            continue
        elif isinstance(obj, functools.partial):   # a step rule's way to its last step: what it holds counts
            stack.extend((obj.args, obj.keywords))
        else:
            d = getattr(obj, "__dict__", None)
            if d is not None:
                stack.append(d)
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return total


def run_one(cfg: Dict[str, Any]) -> Dict[str, Any]:
    import resource
    import warnings

    import torch
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    device = torch.device(cfg["device"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    model = _mlp(torch, cfg["width"], cfg["depth"], cfg["d_in"], cfg["classes"]).to(device)
    X = torch.randn(cfg["batch"], cfg["d_in"], device=device)
    y = torch.randint(0, cfg["classes"], (cfg["batch"],), device=device)
    opt = _optimizer(torch, cfg["optimizer"], model)
    F = torch.nn.functional
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    times = []
    for i in range(cfg["steps"] + 1):
        sync()
        t0 = clock()
        opt.zero_grad()
        F.cross_entropy(model(X), y).backward()
        opt.step()
        sync()
        if i:   # the first step builds the structures
            times.append(clock() - t0)
    params = list(model.parameters())
    exclude = {id(p) for p in params} | {p.untyped_storage().data_ptr() for p in params}
    exclude |= {id(p.grad) for p in params if p.grad is not None}
    n_params = sum(p.numel() for p in params)
    state = held_bytes(torch, opt, exclude)
    # the curvature's share: statistics and factorisations (the preconditioner refers back to the optimizer)
    curvature = held_bytes(torch, getattr(getattr(opt, "preconditioner", None), "estimate", None), exclude)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2 ** 20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KiB on Linux
    return {**cfg, "params": n_params, "state_multiple": state / (4 * n_params),
            "curvature_multiple": curvature / (4 * n_params), "peak_mb": peak,
            "median_s": statistics.median(times), "mean_s": statistics.fmean(times)}


def in_child(cfg: Dict[str, Any]) -> Dict[str, Any]:
    if cfg["device"].startswith("cuda"):   # the allocator's own peak is per configuration: one process will do
        import gc

        import torch
        try:
            return run_one(cfg)
        except Exception as e:   # e.g. out of memory: a row that says so
            return {**cfg, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        finally:
            gc.collect()
            torch.cuda.empty_cache()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", json.dumps(cfg)],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return {**cfg, "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def slope(xs: List[float], ys: List[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / den if den else float("nan")


# ------------------------------------------------------------------ the distributed section
def _dist_worker(rank: int, world: int, port: int, cfg: Dict[str, Any], queue) -> None:
    import warnings

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sent = [0]
    reduce_uncounted = dist.all_reduce   # DDP's own all-reduce, counted by its hook below

    def counted(fn):
        def wrapper(tensor_or_list, *args, **kwargs):
            t = tensor_or_list if isinstance(tensor_or_list, torch.Tensor) else args[0]
            sent[0] += t.numel() * t.element_size()
            return fn(tensor_or_list, *args, **kwargs)
        return wrapper
    for name in ("all_reduce", "reduce", "broadcast", "all_gather"):
        setattr(dist, name, counted(getattr(dist, name)))
    torch.manual_seed(0)
    net = _mlp(torch, cfg["width"], cfg["depth"], cfg["d_in"], cfg["classes"])
    ddp_bytes = [0]
    if cfg.get("wrapper") == "fsdp2":   # each Linear a unit, then the root; FSDP2's own collectives not counted
        from torch.distributed.fsdp import fully_shard
        for m in net:
            if isinstance(m, torch.nn.Linear):
                fully_shard(m)
        model = fully_shard(net)
    else:
        model = DDP(net)

        def hook(state, bucket):   # DDP's gradient all-reduce (the mean over the ranks), its bytes counted
            buf = bucket.buffer()
            ddp_bytes[0] += buf.numel() * buf.element_size()
            fut = reduce_uncounted(buf.div_(world), async_op=True).get_future()
            return fut.then(lambda f: f.value()[0])
        model.register_comm_hook(None, hook)
    if cfg["optimizer"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    else:
        from infogeo.nn import NaturalGradient
        opt = NaturalGradient(model, lr=1e-3, curvature=cfg["optimizer"], placement=cfg["placement"])
    g = torch.Generator().manual_seed(rank)
    X = torch.randn(cfg["batch"], cfg["d_in"], generator=g)
    y = torch.randint(0, cfg["classes"], (cfg["batch"],), generator=g)
    times = []
    for i in range(cfg["steps"] + 1):
        if i == 1:
            sent[0] = ddp_bytes[0] = 0
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
    out = {"median_s": statistics.median(times), "ddp_bytes": ddp_bytes[0] / cfg["steps"],
           "infogeo_bytes": sent[0] / cfg["steps"]}
    # this rank's optimizer state over the parameters' bytes (under placement="memory" each block's moments and
    # factorisation live on one rank), every rank's
    params = list(model.parameters())
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]   # an FSDP2 shard: this rank's part
    exclude = {id(p) for p in params + local} | {p.untyped_storage().data_ptr() for p in local}
    exclude |= {id(p.grad) for p in params if p.grad is not None}
    # over the whole parameters' bytes (a DTensor's numel is the whole parameter's)
    mine = held_bytes(torch, opt, exclude) / sum(p.numel() * p.element_size() for p in params)
    every: List[Any] = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        queue.put({**out, "state_multiples": every})
    dist.destroy_process_group()


def distributed(cfg: Dict[str, Any], world: int) -> Dict[str, Any]:
    import socket

    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(_dist_worker, args=(world, port, cfg, queue), nprocs=world, join=True, start_method="spawn")
    return {**cfg, "world": world, **queue.get()}


# ------------------------------------------------------------------ report
def _plot(rows, key: str, path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for name in OPTIMIZERS:
        rs = sorted((r for r in rows if r["optimizer"] == name and "error" not in r), key=lambda r: r[key])
        if not rs:
            continue
        xs = [r[key] for r in rs]
        for ax, q in zip(axes, ("median_s", "peak_mb", "state_multiple")):
            ax.plot(xs, [r[q] for r in rs], "o-", label=name)
    for ax, lab in zip(axes, ("median step time (s, CPU)", "peak memory (MB)", "optimizer state / parameters")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(lab)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def header(key: str) -> None:
    print(f"{key:>6} {'optimizer':>15} {'params':>10} {'median s':>9} {'mean s':>8} {'peak MB':>8} {'state x':>8} "
          f"{'curv. x':>8}", flush=True)


def row(r, key: str) -> Dict[str, Any]:
    """Print one configuration's line as soon as it is measured (a long sweep shows its progress)."""
    if "error" in r:
        print(f"{r[key]:>6} {r['optimizer']:>15}  failed: {r['error']}", flush=True)
    else:
        print(f"{r[key]:>6} {r['optimizer']:>15} {r['params']:>10} {r['median_s']:>9.4f} {r['mean_s']:>8.4f} "
              f"{r['peak_mb']:>8.0f} {r['state_multiple']:>8.2f} {r['curvature_multiple']:>8.2f}", flush=True)
    return r


def exponents(rows, key: str) -> Dict[str, Dict[str, float]]:
    out = {}
    print(f"fitted exponents against {key} (slope of log-log least squares)")
    for name in OPTIMIZERS:
        rs = [r for r in rows if r["optimizer"] == name and "error" not in r]
        if len(rs) < 2:
            continue
        xs = [r[key] for r in rs]
        out[name] = {q: slope(xs, [r[q] for r in rs]) for q in ("median_s", "mean_s", "peak_mb")}
        out[name]["state_bytes"] = slope(xs, [r["state_multiple"] * r["params"] for r in rs])
        e = out[name]
        print(f"  {name:>10}: median step {e['median_s']:.2f}, mean step {e['mean_s']:.2f}, "
              f"peak memory {e['peak_mb']:.2f}, state bytes {e['state_bytes']:.2f}")
    return out


def main(argv=None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small widths, few steps (a smoke test)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--skip-distributed", action="store_true")
    ap.add_argument("--skip-depth", action="store_true")
    ap.add_argument("--widths", type=int, nargs="*")
    ap.add_argument("--depths", type=int, nargs="*")
    ap.add_argument("--optimizers", nargs="*", choices=OPTIMIZERS)
    ap.add_argument("--ranks", type=int, nargs="*")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(json.loads(args.one))))
        return {}
    q = args.quick
    widths = args.widths or ([32, 64, 128] if q else [256, 512, 1024, 2048])
    depths = args.depths or ([1, 2, 4] if q else [2, 4, 8, 16])
    names = args.optimizers or OPTIMIZERS
    base = {"depth": 3, "batch": 32 if q else 128, "d_in": 64 if q else 256, "classes": 10, "steps": 3 if q else 12,
            "device": args.device}
    os.makedirs(args.out, exist_ok=True)
    result: Dict[str, Any] = {}
    print(f"MLP, depth {base['depth']}, batch {base['batch']}, input {base['d_in']}, {base['steps']} timed steps, "
          f"one thread, device {args.device}")
    header("width")
    rows = [row(in_child({**base, "width": w, "optimizer": o}), "width") for w in widths for o in names]
    result["width"] = rows
    result["width_exponents"] = exponents(rows, "width")
    _plot(rows, "width", os.path.join(args.out, "nn_scale_width.png"), f"MLP depth {base['depth']}, batch {base['batch']}")
    if not args.skip_depth:
        dw = 64 if q else 512
        print(f"\nMLP of width {dw} against depth")
        header("depth")
        rows = [row(in_child({**base, "width": dw, "depth": d, "optimizer": o}), "depth")
                for d in depths for o in names]
        result["depth"] = rows
        result["depth_exponents"] = exponents(rows, "depth")
        _plot(rows, "depth", os.path.join(args.out, "nn_scale_depth.png"), f"MLP width {dw}, batch {base['batch']}")
    if not args.skip_distributed:
        dcfg = {**base, "width": 64 if q else 512, "depth": 2, "device": "cpu", "steps": 3 if q else 10}
        print(f"\nDDP over gloo (CPU), MLP width {dcfg['width']} depth 2, batch {dcfg['batch']} per rank; "
              f"bytes sent into collectives per rank per step")
        print(f"{'ranks':>5} {'optimizer':>14} {'median s':>9} {'DDP MB':>8} {'infogeo MB':>10} {'infogeo/DDP':>11} "
              f"{'state x (max rank)':>18}")
        drows = []
        for world in args.ranks or ([1, 2] if q else [1, 2, 4]):
            for o, placement, wrapper in (("sgd", None, "ddp"), ("kfac", "memory", "ddp"), ("kfac", "comm", "ddp"),
                                          ("diag", "memory", "ddp"), ("kfac", "memory", "fsdp2"),
                                          ("ekfac", "memory", "fsdp2")):
                if wrapper == "fsdp2" and world == 1:
                    continue
                r = distributed({**dcfg, "optimizer": o, "placement": placement, "wrapper": wrapper}, world)
                drows.append(r)
                label = (o if placement is None else f"{o}/{placement}") + ("/FSDP2" if wrapper == "fsdp2" else "")
                ratio = r["infogeo_bytes"] / r["ddp_bytes"] if r["ddp_bytes"] else float("nan")
                print(f"{world:>5} {label:>14} {r['median_s']:>9.4f} {r['ddp_bytes'] / 2**20:>8.2f} "
                      f"{r['infogeo_bytes'] / 2**20:>10.2f} {ratio:>11.2f} {max(r['state_multiples']):>18.2f}")
        result["distributed"] = drows
    with open(os.path.join(args.out, "nn_scale.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
