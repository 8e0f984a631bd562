"""The optimizer race: steps and time to a target loss, infogeo's natural gradient against its peers.

For each workload (``_race_workloads.py``: digits MLP classifier, digits autoencoder, character
transformer, digits CNN, masked-character attention model) and each seed, every contestant
(``_race_optimizers.py``) trains from the same initialisation on the same mini-batches at every
learning rate of its grid (four values for each tuned optimizer; infogeo's natural gradient also
once with its defaults), the runs interleaved (seed, then grid position, then contestant in an order
rotated per seed) in one process on one torch thread.  The training loss is evaluated on fixed data
every ``steps/30`` steps (not timed).

* Targets: tuned AdamW's median final training loss (its best rate by that loss) is the *tight*
  target; its median loss at 20 % of the budget the *loose* one.
* For each contestant and rate: steps, wall time and CPU time of the steps (``time.thread_time``: the
  machine is shared, CPU time is what the steps cost) to reach each target; unreached counts as
  infinite, so a median is finite only when most seeds reach it.  Each contestant is scored at the rate
  with the least median CPU time to the tight target (then the loose one, then the final loss).
* Reported: per contestant its best rate, median steps / CPU s / wall s to both targets with the
  spread over seeds, final training and validation loss, ms per step, and peak memory (RSS growth
  while running 30 steps in a forked child, sampled every millisecond); per infogeo contestant the
  ratio to the best peer (medians of the per-seed ratios, with their range; on a seed where the peer did
  not reach the target and infogeo did, the peer's whole run stands in for its time, an upper bound on that
  ratio; 0.00 only where the peer diverged); PASS/FAIL against the
  goals of issue 22: the best infogeo variant <= 0.8x the best tuned peer's CPU time to the tight
  target on at least 4 of 5 workloads and never above 1.2x; ``NG defaults`` <= 1.0x tuned AdamW.

    python benchmarks/optimizer_race.py [--quick] [--workloads classifier ...] [--only "NG eigen" AdamW ...]
                                        [--seeds 0 1 2] [--steps 0.5] [--grid 3] [--evals 15] [--out DIR]
                                        [--save runs.pkl [--train-only]] [--merge a.pkl b.pkl ...] [--device cuda]

``--device cuda`` runs the races on a GPU: the time to a target is then the steps' wall time, synchronised
after every step, and peak memory is not measured (it forks).

``--quick`` is the CI smoke test (a few steps, one seed, one rate per contestant).  On a loaded machine:
``--steps`` a fraction of each budget, ``--grid N`` the top N rates of every grid (the same size for every
contestant), ``--evals`` fewer loss evaluations; ``--save`` / ``--merge`` pool seeds raced in separate
processes (e.g. ``--seeds 0 --save s0.pkl`` in one, ``--seeds 1 --save s1.pkl`` in another, then
``--merge s0.pkl s1.pkl --out DIR`` scores them together).  On many cores, one process per workload, seed
and contestant: ``--only SOAP --seeds 1 --train-only --save w-SOAP-1.pkl`` (``--train-only`` trains without
scoring, so AdamW is raced only in its own processes), then one ``--merge`` per workload.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import pickle
import statistics
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _race_optimizers import CONTESTANTS, available, build  # noqa: E402
from _race_workloads import WORKLOADS, Task, Workload, evaluate  # noqa: E402

INF = float("inf")
#: where the races run (``--device``); on CUDA the "cpu" clock is the wall time of each step, synchronised
DEVICE = torch.device("cpu")


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def on_device(task: Task) -> Task:
    """The task with its model, batches and evaluation sets on :data:`DEVICE`."""
    if DEVICE.type == "cpu":
        return task
    stream = ((x.to(DEVICE), y.to(DEVICE)) for x, y in task.batches)
    return Task(task.model.to(DEVICE), stream, task.loss,
                [(x.to(DEVICE), y.to(DEVICE)) for x, y in task.train_eval],
                [(x.to(DEVICE), y.to(DEVICE)) for x, y in task.val_eval])


def train(c, workload: Workload, seed: int, lr: Optional[float], steps: int, eval_every: int) -> Dict[str, Any]:
    """One run: the loss curve (``step``, ``cpu``, ``wall``, ``loss``) and the final losses."""
    task = on_device(workload.build(seed))
    model = task.model
    step = build(c, model, lr, workload)
    curve = {"step": [0], "cpu": [0.0], "wall": [0.0], "loss": [evaluate(task, task.train_eval)]}
    cpu = wall = 0.0
    diverged = False
    for k in range(1, steps + 1):
        x, y = next(task.batches)

        def closure():
            loss = task.loss(model(x), y)
            loss.backward()
            return loss
        _sync()
        c0, w0 = time.thread_time(), time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step(closure)
        _sync()
        w1 = time.perf_counter() - w0
        cpu += w1 if DEVICE.type == "cuda" else time.thread_time() - c0
        wall += w1
        if k % eval_every == 0 or k == steps:
            loss = evaluate(task, task.train_eval)
            curve["step"].append(k)
            curve["cpu"].append(cpu)
            curve["wall"].append(wall)
            curve["loss"].append(loss if math.isfinite(loss) else INF)
            if not math.isfinite(loss) or loss > 1e3 * max(curve["loss"][0], 1e-12):
                diverged = True
                break
    final = INF if diverged else curve["loss"][-1]
    val = INF if diverged else evaluate(task, task.val_eval)
    return {"curve": curve, "final": final, "val": val, "diverged": diverged, "steps": k,
            "ms_per_step": 1e3 * cpu / k, "seed": seed}


def reach(curve: Dict[str, List[float]], target: float, diverged: bool = False) -> Dict[str, Any]:
    """Steps, CPU and wall seconds at the first evaluation with loss ``<= target`` (infinite if none; then
    ``whole``: the run's own steps and seconds, which the target would have taken more than, unless it diverged)."""
    for i, loss in enumerate(curve["loss"]):
        if loss <= target:
            return {"steps": curve["step"][i], "cpu": curve["cpu"][i], "wall": curve["wall"][i]}
    if diverged or not math.isfinite(curve["loss"][-1]):   # it would never have reached the target
        return {"steps": INF, "cpu": INF, "wall": INF}
    whole = {"steps": curve["step"][-1], "cpu": curve["cpu"][-1], "wall": curve["wall"][-1]}
    return {"steps": INF, "cpu": INF, "wall": INF, "whole": whole}


def peak_memory(c, workload: Workload, lr: Optional[float], steps: int = 30) -> float:
    """MB of resident-memory growth over ``steps`` training steps, in a forked child (``nan`` if unavailable)."""
    if not hasattr(os, "fork") or not os.path.exists("/proc/self/statm"):
        return float("nan")
    page = os.sysconf("SC_PAGE_SIZE")

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: build, sample the RSS while stepping, report the growth
        os.close(r)
        try:
            task = workload.build(0)
            step = build(c, task.model, lr, workload)
            base, peak, done = rss(), [0], threading.Event()

            def sample():
                while not done.is_set():
                    peak[0] = max(peak[0], rss())
                    time.sleep(0.001)
            t = threading.Thread(target=sample, daemon=True)
            t.start()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for _ in range(steps):
                    x, y = next(task.batches)
                    step(lambda: task.loss(task.model(x), y).backward())
            done.set()
            t.join()
            os.write(w, str(max(peak[0], rss()) - base).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return int(out) / 2 ** 20 if out else float("nan")


def med(values: List[float]) -> float:
    return statistics.median(values) if values else INF


def spread(values: List[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "-"
    missing = "" if len(finite) == len(values) else f" ({len(finite)}/{len(values)})"
    return f"{min(finite):.3g}-{max(finite):.3g}{missing}"


def score(runs: Dict[float, List[Dict[str, Any]]], tight: float, loose: float) -> Dict[str, Any]:
    """Per rate, the per-seed reaches; the best rate (CPU to tight, then loose, then final loss)."""
    table = {}
    for lr, seeds in runs.items():
        t = [reach(r["curve"], tight, r["diverged"]) for r in seeds]
        lo = [reach(r["curve"], loose, r["diverged"]) for r in seeds]
        table[lr] = {"tight": t, "loose": lo, "final": [r["final"] for r in seeds], "val": [r["val"] for r in seeds],
                     "ms": [r["ms_per_step"] for r in seeds], "runs": seeds}
    best = min(table, key=lambda lr: (med([x["cpu"] for x in table[lr]["tight"]]),
                                      med([x["cpu"] for x in table[lr]["loose"]]), med(table[lr]["final"])))
    return {"best_lr": best, "per_lr": table, **table[best]}


def ratio(ours: List[Dict[str, Any]], theirs: List[Dict[str, Any]], key: str) -> Dict[str, float]:
    """Median and range of the per-seed ratios ours/theirs of ``key`` (inf where ours did not reach).  Where
    theirs did not reach and ours did, their whole run stands in for their time: the ratio is then an upper
    bound (theirs needed more), so a censored seed never flatters ours."""
    rs = []
    for a, b in zip(ours, theirs):
        x, y = a[key], b[key] if math.isfinite(b[key]) else b.get("whole", {}).get(key, INF)
        rs.append(INF if not math.isfinite(x) else x / y if math.isfinite(y) and y > 0 else 0.0)
    return {"median": med(rs), "lo": min(rs), "hi": max(rs)}


def fmt_ratio(r: Dict[str, float]) -> str:
    if not math.isfinite(r["median"]):
        return "  -  "
    hi = f"{r['hi']:.2f}" if math.isfinite(r["hi"]) else "inf"
    return f"{r['median']:.2f} [{r['lo']:.2f}, {hi}]"


def race(workload: Workload, names: List[str], seeds: List[int], steps: int, eval_every: int,
         quick: bool, memory: bool, grid: Optional[int] = None,
         runs: Optional[Dict[str, Dict[Any, List[Dict[str, Any]]]]] = None, scored: bool = True) -> Dict[str, Any]:
    """Train every contestant on ``seeds`` (``runs``: those already trained, e.g. by other processes) and score
    (``scored=False``: only train, for a later ``--merge``)."""
    contestants = [CONTESTANTS[n] for n in names]
    grids = {c.name: (c.grid[len(c.grid) // 2:len(c.grid) // 2 + 1] if quick else c.grid[-grid:] if grid else c.grid)
             for c in contestants}
    runs = runs if runs is not None else {}
    for c in contestants:
        runs.setdefault(c.name, {})
    width = max(len(g) for g in grids.values())
    for s, seed in enumerate(seeds):
        order = contestants[s % len(contestants):] + contestants[:s % len(contestants)]
        for i in range(width):
            for c in order:
                if i < len(grids[c.name]):
                    lr = grids[c.name][i]
                    runs[c.name].setdefault(lr, []).append(train(c, workload, seed, lr, steps, eval_every))
        print(f"  seed {seed} done", flush=True)
    if not scored:
        return {"runs": runs}
    return score_runs(workload, contestants, runs, steps, eval_every, memory)


def score_runs(workload, contestants, runs, steps, eval_every, memory) -> Dict[str, Any]:
    """Targets from tuned AdamW, each contestant scored at its best rate (and its peak memory there)."""
    best_adam = min(runs["AdamW"], key=lambda lr: med([r["final"] for r in runs["AdamW"][lr]]))
    adam_runs = runs["AdamW"][best_adam]
    tight = med([r["final"] for r in adam_runs])
    k20 = max(1, round(0.2 * steps / eval_every))
    loose = med([r["curve"]["loss"][min(k20, len(r["curve"]["loss"]) - 1)] for r in adam_runs])
    scores = {c.name: score(runs[c.name], tight, loose) for c in contestants}
    for c in contestants:
        sc = scores[c.name]
        sc["memory_mb"] = peak_memory(c, workload, sc["best_lr"]) if memory else float("nan")
    return {"tight": tight, "loose": loose, "scores": scores, "steps": steps, "runs": runs}


def report(workload: Workload, result: Dict[str, Any], names: List[str]) -> Dict[str, Any]:
    """Print the workload's table and ratios; return the ratios and verdicts."""
    sc, tight, loose = result["scores"], result["tight"], result["loose"]
    print(f"\n== {workload.name}: {workload.describe}; {result['steps']} steps")
    print(f"   targets: tight {tight:.4g} (tuned AdamW's final training loss), loose {loose:.4g} (its loss at 20 %)")
    head = (f"{'optimizer':<13} {'lr':>7} | {'steps tight':>11} {'CPU s tight':>17} {'wall s':>6} | "
            f"{'steps loose':>11} {'CPU s loose':>17} | {'final train':>11} {'val':>8} | {'ms/step':>7} {'MB':>6}")
    print(head)
    for n in names:
        s = sc[n]
        lr = "default" if s["best_lr"] is None else f"{s['best_lr']:.0e}"
        st, ct, wt = ([x[k] for x in s["tight"]] for k in ("steps", "cpu", "wall"))
        sl, cl = ([x[k] for x in s["loose"]] for k in ("steps", "cpu"))
        print(f"{n:<13} {lr:>7} | {med(st):>11.4g} {med(ct):>7.3g} {spread(ct):>9} {med(wt):>6.3g} | "
              f"{med(sl):>11.4g} {med(cl):>7.3g} {spread(cl):>9} | {med(s['final']):>11.4g} {med(s['val']):>8.4g} | "
              f"{med(s['ms']):>7.2f} {s['memory_mb']:>6.1f}")
    peers = [n for n in names if not CONTESTANTS[n].infogeo]
    out: Dict[str, Any] = {}
    if not peers:
        return out
    for level in ("tight", "loose"):
        best = min(peers, key=lambda n: (med([x["cpu"] for x in sc[n][level]]), med(sc[n]["final"])))
        out[f"best_peer_{level}"] = best
        for n in names:
            if not CONTESTANTS[n].infogeo:
                continue
            mine = sc[n][level]
            for k in ("steps", "cpu"):
                out[f"{n}/{level}/{k}"] = ratio(mine, sc[best][level], k)
            out[f"{n}/{level}/cpu_vs_adamw"] = ratio(mine, sc["AdamW"][level], "cpu")
    print(f"   ratios infogeo / best peer (tight: {out['best_peer_tight']}, loose: {out['best_peer_loose']}); "
          f"median [range] of per-seed ratios")
    print(f"   {'infogeo':<13} | {'steps tight':>19} {'CPU tight':>19} | {'steps loose':>19} {'CPU loose':>19} | "
          f"{'CPU tight / AdamW':>19}")
    for n in names:
        if CONTESTANTS[n].infogeo:
            print(f"   {n:<13} | {fmt_ratio(out[f'{n}/tight/steps']):>19} {fmt_ratio(out[f'{n}/tight/cpu']):>19} | "
                  f"{fmt_ratio(out[f'{n}/loose/steps']):>19} {fmt_ratio(out[f'{n}/loose/cpu']):>19} | "
                  f"{fmt_ratio(out[f'{n}/tight/cpu_vs_adamw']):>19}")
    return out


def plot(workload: Workload, result: Dict[str, Any], names: List[str], out: Path) -> Path:
    """Loss against steps and against CPU seconds: each contestant at its best rate, median over seeds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for n in names:
        s = result["scores"][n]
        curves = [r["curve"] for r in s["runs"]]
        m = min(len(c["loss"]) for c in curves)
        loss = [statistics.median(c["loss"][i] for c in curves) for i in range(m)]
        cpu = [statistics.median(c["cpu"][i] for c in curves) for i in range(m)]
        style = "-" if CONTESTANTS[n].infogeo else "--"
        lr = "default" if s["best_lr"] is None else f"{s['best_lr']:g}"
        axes[0].plot(curves[0]["step"][:m], loss, style, label=f"{n} (lr {lr})")
        axes[1].plot(cpu, loss, style, label=n)
    for ax, xl in zip(axes, ("steps", "CPU seconds of the steps" if DEVICE.type == "cpu" else
                                   f"wall seconds of the steps ({DEVICE.type}, synchronised)")):
        ax.axhline(result["tight"], color="k", lw=0.6, ls=":")
        ax.axhline(result["loose"], color="gray", lw=0.6, ls=":")
        ax.set_yscale("log")
        ax.set_xlabel(xl)
        ax.set_ylabel("training loss")
    lo = min(min(r["curve"]["loss"]) for s in result["scores"].values() for r in s["runs"]) * 0.8
    for ax in axes:
        ax.set_ylim(bottom=max(lo, 1e-6 * result["tight"]))
    axes[0].legend(fontsize=7)
    title = f"{workload.name}: {workload.describe} (median of seeds; dotted: tight and loose targets)"
    fig.suptitle(textwrap.fill(title, 150), fontsize=9)   # long descriptions wrap instead of running off the figure
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"race_{workload.name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def verdict(ratios: Dict[str, Dict[str, Any]], names: List[str]) -> Dict[str, Any]:
    """Issue 22's goals over the workloads raced."""
    # the natural gradient's variants: infogeo's Shampoo and SOAP (gradient metrics) are raced, not counted here
    # (tuned: a contestant run only at its defaults, as "NG defaults", is scored against AdamW below)
    ng = [n for n in names
          if CONTESTANTS[n].infogeo and CONTESTANTS[n].fisher and tuple(CONTESTANTS[n].grid) != (None,)]
    if not ng:
        print("\nno tuned natural-gradient variant raced (\"NG eigen\", ...): the 0.8x goal is not scored")
    best = {w: min((r[f"{n}/tight/cpu"]["median"] for n in ng), default=INF) for w, r in ratios.items() if r}
    core = [v for w, v in best.items() if WORKLOADS[w].core]   # the goal counts issue 22's five workloads
    wins = sum(v <= 0.8 for v in core)
    never = all(v <= 1.2 for v in best.values())
    need = min(4, len(core))
    if ng:
        print("\nbest infogeo variant / best tuned peer, CPU time to the tight target: "
              + ", ".join(f"{w} {v:.2f}" for w, v in best.items()))
        print(f"  <= 0.8x on {wins} of {len(core)} of issue 22's workloads (goal >= {need}): "
              f"{'PASS' if wins >= need else 'FAIL'}; "
              f"never above 1.2x: {'PASS' if never else 'FAIL'}")
    out = {"best_ratio": best, "wins": wins, "never_above_1.2": never}
    if "NG defaults" in names:
        d = {w: r["NG defaults/tight/cpu_vs_adamw"]["median"] for w, r in ratios.items() if r}
        ok = all(v <= 1.0 for v in d.values())
        print("NG defaults / tuned AdamW, CPU time to the tight target: "
              + ", ".join(f"{w} {v:.2f}" for w, v in d.items()) + f"  (goal <= 1.0 everywhere): "
              f"{'PASS' if ok else 'FAIL'}")
        out["defaults_vs_adamw"] = d
    return out


def merge(paths) -> Dict[str, Any]:
    """Runs of several ``--save`` pickles pooled per workload, contestant and rate, in seed order (the per-seed
    ratios pair runs by position); a run present in several (AdamW, raced in every process to set the targets)
    is kept once."""
    by_seed: Dict[str, Any] = {}
    for path in paths:
        with open(path, "rb") as f:
            for wname, wruns in pickle.load(f).items():
                for cname, by_lr in wruns.items():
                    for lr, rs in by_lr.items():
                        slot = by_seed.setdefault(wname, {}).setdefault(cname, {}).setdefault(lr, {})
                        for r in rs:
                            slot.setdefault(r["seed"], r)
    return {w: {c: {lr: [rs[k] for k in sorted(rs)] for lr, rs in by_lr.items()} for c, by_lr in wr.items()}
            for w, wr in by_seed.items()}


def main(argv=None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: a few steps, one seed, one rate each")
    ap.add_argument("--workloads", nargs="*", default=[n for n, w in WORKLOADS.items() if w.core],
                    choices=list(WORKLOADS), help="default: the five of issue 22 (also: gru, gpt2, encoder, depthwise)")
    ap.add_argument("--only", nargs="*", default=None, help="contestants (AdamW is always raced: it sets the targets)")
    ap.add_argument("--seeds", type=int, nargs="*", default=None)
    ap.add_argument("--steps", type=float, default=1.0, help="fraction of each workload's budget")
    ap.add_argument("--out", default=None, help="folder for the plots and the JSON results")
    ap.add_argument("--evals", type=int, default=None,
                    help="evaluations of the training loss per run (default: the workload's, about 30)")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    ap.add_argument("--device", default="cpu",
                    help="torch device (on cuda the time to target is the synchronised wall time of the steps)")
    ap.add_argument("--grid", type=int, default=None, help="race only the top N rates of every grid")
    ap.add_argument("--save", default=None, help="pickle the runs here (to --merge those of several processes)")
    ap.add_argument("--train-only", action="store_true",
                    help="train and --save the runs, score nothing (AdamW is then raced only if named)")
    ap.add_argument("--merge", nargs="*", default=None,
                    help="pickles of --save: their runs are pooled (seeds or contestants of separate processes) and scored, "
                         "after training --seeds (default: none)")
    a = ap.parse_args(argv)
    global DEVICE
    DEVICE = torch.device(a.device)
    torch.set_num_threads(1)
    seeds = a.seeds if a.seeds is not None else ([] if a.merge else [0] if a.quick else [0, 1, 2])
    pooled = merge(a.merge or ())
    names = [n for n in (a.only or list(CONTESTANTS)) if n in CONTESTANTS]
    if a.train_only and not a.save:
        ap.error("--train-only needs --save")
    if "AdamW" not in names and not a.train_only:
        names.insert(0, "AdamW")
    missing = [n for n in names if not available(CONTESTANTS[n])]
    if missing:
        print(f"not installed, skipped: {', '.join(missing)}")
    names = [n for n in names if n not in missing]
    all_ratios, results = {}, {}
    for wname in a.workloads:
        w = WORKLOADS[wname]
        if w.needs is not None and importlib.util.find_spec(w.needs) is None:
            print(f"\n{wname}: needs {w.needs}, not installed: skipped")
            continue
        steps = 6 if a.quick else max(5, int(round(a.steps * w.steps)))
        eval_every = 2 if a.quick else max(1, int(round(a.steps * w.eval_every)))
        if a.evals and not a.quick:
            eval_every = max(1, steps // a.evals)
        t0 = time.perf_counter()
        print(f"\n{wname}: {len(names)} contestants, seeds {seeds}", flush=True)
        memory = not (a.quick or a.no_memory or DEVICE.type != "cpu")   # the measurement forks: CPU only
        result = race(w, names, seeds, steps, eval_every, a.quick, memory=memory, grid=a.grid,
                      runs=pooled.get(wname), scored=not a.train_only)
        results[wname] = result
        if a.train_only:
            continue
        all_ratios[wname] = report(w, result, names)
        print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
        if a.out:
            print(f"   plot: {plot(w, result, names, Path(a.out))}")
    if a.save:
        with open(a.save, "wb") as f:
            pickle.dump({w: r["runs"] for w, r in results.items()}, f)
    if a.train_only:
        return {"results": results, "names": names}
    summary = verdict(all_ratios, names)
    if a.out:
        slim = {w: {"tight": r["tight"], "loose": r["loose"], "ratios": all_ratios[w],
                    "scores": {n: {k: v for k, v in s.items() if k not in ("runs", "per_lr")}
                               | {"per_lr_final": {str(lr): t["final"] for lr, t in s["per_lr"].items()}}
                               for n, s in r["scores"].items()}}
                for w, r in results.items()}
        Path(a.out, "race.json").write_text(json.dumps({"summary": summary, "workloads": slim}, indent=1,
                                                       default=str))
    return {"ratios": all_ratios, "results": results, "summary": summary, "names": names}


if __name__ == "__main__":
    main()
