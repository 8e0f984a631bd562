"""Step time of ``ig.nn.NaturalGradient`` (K-FAC, default refresh periods) against SGD, Adam and kfac-pytorch.

A step is the whole training-loop step: ``zero_grad``, forward, loss, backward, ``step``.
K-FAC steps come in three kinds under the default periods (statistics every
``P_s = 10`` steps, factorisations every ``P_i = 100``): a *plain* step (apply the
factored inverse), a *statistics* step (plus the Monte Carlo backward and the factor
products), and an *inverse* step (plus the factorisations).  Each kind is timed on its own
(the optimizer's step counter is set to a step of that kind), and the amortised step time is

    t = t_plain + (t_stats - t_plain) / P_s + (t_inverse - t_stats) / P_i.

kfac-pytorch (``KFACPreconditioner`` followed by SGD, the loop its documentation gives) runs
at the same periods, damping 1e-3, KL clip 1e-3 and learning rate, with its default
``compute_method="eigen"`` (damping added to the Kronecker eigenvalues, four products a step)
and with ``"inverse"`` (damped factor inverses, two products: the same form as ours); its
step counter is set the same way.  It is not on the package index: the columns appear when
it is installed from its repository (``pip install --no-deps .`` in a checkout).  kfac-pytorch
takes its gradient factor from the gradients of the user's own loss (backward hooks), that is,
the empirical Fisher; ours defaults to the Monte Carlo Fisher (an extra backward per refresh),
so a second line times ours with ``fisher="empirical"`` too, the peer's statistic.

All timings of one configuration are interleaved (every optimizer and kind in each round, in
rotating order) and the medians over the rounds are reported, in one process with one torch
thread.  Targets (issue 14): amortised K-FAC / SGD <= 1.5 at batch 1024 and <= 3 at batch 128 on
the MLP 784-1024-1024-10; ours / kfac-pytorch <= 0.8.

    python benchmarks/nn_step.py [--rounds 7] [--quick] [--device cuda]

Measured on the 2-core development CPU, otherwise idle (one thread; three runs of 7 rounds:
times from the second run, ratios the medians of the three runs' ratios):

* MLP, batch 128: SGD 16.0 ms, K-FAC plain / statistics / inverse 38.5 / 61.7 / 184.0 ms,
  amortised 42.0 ms: 2.62x SGD (PASS); 0.21x kfac-pytorch[eigen], 0.38x [inverse].
* MLP, batch 1024: SGD 108.1 ms, K-FAC 191.5 / 299.1 / 426.4 ms, amortised 203.5 ms: 1.96x SGD
  (FAIL); 0.71x kfac-pytorch[eigen], 0.97x [inverse] (empirical Fisher: 0.96x).
* small CNN, batch 128: SGD 17.9 ms, K-FAC 18.6 / 51.7 / 55.3 ms, amortised 22.0 ms: 1.22x SGD;
  0.92x / 0.92x kfac-pytorch (empirical Fisher, statistics step 42.6 ms: 0.91x [inverse]).

Why batch 1024 misses: an SGD step of this MLP is about 4.9 G multiply-adds (forward, and the
backward's weight and input gradients), and applying a Kronecker-factored inverse to the
gradient costs out*in*(out+in) per layer, 3.6 G in all; the row route (three products with the
batch's rows) pays only below about two thirds of the width.  So the plain step alone is at
least 1.73x SGD at equal speed per multiply-add, before the statistics.  At batch 128 the row
route brings the preconditioning to 1.4 G multiply-adds instead of 3.6 G.  The CNN's plain step
costs what SGD's does for both libraries, so the ratio is bounded below by about 0.77 however
cheap the statistics.  Ours cost 0.80x the peer's (0.57x with the empirical Fisher: the patch
matrix is copied from a channels-last view, and the empirical Fisher needs no second backward),
but at a refresh every 10 steps they still add 3.3 ms to an amortised step: the second moment of
the second layer's 25088 x 144 patch matrix alone is 0.5 G multiply-adds.
"""
from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import infogeo as ig  # noqa: E402

F = torch.nn.functional
TARGETS = {("mlp", 1024): 1.5, ("mlp", 128): 3.0}
PEER_TARGET = 0.8

try:   # kfac-pytorch is not on the package index: installed from its repository when available
    import kfac
    import kfac.preconditioner
    PEER_METHODS = {"kfac-pytorch[eigen]": "eigen", "kfac-pytorch[inverse]": "inverse"}
except ImportError:
    kfac, PEER_METHODS = None, {}


_spec = importlib.util.spec_from_file_location(
    "nn_digits", Path(__file__).resolve().parents[1] / "examples" / "nn_digits.py")
nn_digits = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nn_digits)
mlp = nn_digits.mlp   # Linear layers with tanh between them


def cnn(width: int = 16) -> torch.nn.Module:
    """A small CNN for 28x28 inputs: two 3x3 convolutions (the second strided), 4x4 average pooling, a read-out."""
    return torch.nn.Sequential(torch.nn.Conv2d(1, width, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(2 * width * 16, 10))


def make_step(model, opt, X, y, pre=None) -> Callable[[], None]:
    def step():
        opt.zero_grad()
        F.cross_entropy(model(X), y).backward()
        if pre is not None:      # kfac-pytorch: precondition, then its SGD steps
            pre.step()
        opt.step()
    return step


def kfac_kind(opt: "ig.nn.NaturalGradient", kind: str) -> None:
    """Set the step counter so that the next step is of ``kind`` ("plain", "stats" or "inverse")."""
    pre = opt.preconditioner
    ps, pi = pre.estimate.curvature_update_period, pre.estimate.inverse_update_period
    k = {"plain": 10 * pi + 1, "stats": 10 * pi + ps, "inverse": 10 * pi}[kind]
    pre.state["step"] = k
    pre.recorder.armed = k % ps == 0


def peer_kind(pre, kind: str) -> None:
    """The same for kfac-pytorch's step counter (its hooks read it during the forward and backward)."""
    pre._steps = {"plain": 10 * PERIODS[1] + 1, "stats": 10 * PERIODS[1] + PERIODS[0], "inverse": 10 * PERIODS[1]}[kind]


PERIODS = (10, 100)   # ours' defaults, given to kfac-pytorch too
KINDS = ("plain", "stats", "inverse")


def amortised(med: Dict[str, float], prefix: str) -> float:
    ps, pi = PERIODS
    p, s, i = (med[prefix + k] for k in KINDS)
    return p + (s - p) / ps + (i - s) / pi


def bench(name: str, build: Callable[[], torch.nn.Module], shape, batch: int, rounds: int,
          device: str = "cpu") -> Dict[str, float]:
    torch.manual_seed(0)
    X = torch.randn((batch,) + tuple(shape), device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    peers = list(PEER_METHODS) if kfac is not None else []
    models = {k: build().to(device) for k in ["sgd", "adam", "kfac", "kfac-emp"] + peers}
    opts = {"sgd": torch.optim.SGD(models["sgd"].parameters(), lr=1e-3),
            "adam": torch.optim.Adam(models["adam"].parameters(), lr=1e-4),
            "kfac": ig.nn.NaturalGradient(models["kfac"], lr=1e-3),
            "kfac-emp": ig.nn.NaturalGradient(models["kfac-emp"], lr=1e-3, fisher="empirical")}
    assert (opts["kfac"].preconditioner.estimate.curvature_update_period,
            opts["kfac"].preconditioner.estimate.inverse_update_period) == PERIODS
    steps = {k: make_step(models[k], opts[k], X, y) for k in opts}
    setters = {k: (lambda o: (lambda kind: kfac_kind(o, kind)))(opts[k]) for k in ("kfac", "kfac-emp")}
    for method in peers:
        m = models[method]
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)
        pre = kfac.preconditioner.KFACPreconditioner(
            m, factor_update_steps=PERIODS[0], inv_update_steps=PERIODS[1], damping=1e-3, kl_clip=1e-3, lr=1e-3,
            compute_method=PEER_METHODS[method], loglevel=logging.DEBUG)   # its set-up report, at a level not shown
        steps[method] = make_step(m, opt, X, y, pre)
        setters[method] = (lambda p: (lambda kind: peer_kind(p, kind)))(pre)
    for k in steps:    # warm-up; the K-FACs get their curvature and factorisation
        for _ in range(2 if torch.device(device).type == "cuda" else 1):   # and CUDA its kernels
            steps[k]()
    labels = ["sgd", "adam"] + [f"{k}:{kind}" for k in setters for kind in KINDS]
    times: Dict[str, list] = {k: [] for k in labels}
    for r in range(rounds):
        order = labels[r % len(labels):] + labels[:r % len(labels)]
        for label in order:
            key, _, kind = label.partition(":")
            if kind:
                setters[key](kind)
            sync()
            t0 = time.perf_counter()
            steps[key]()
            sync()    # a GPU's queued kernels belong to the step that launched them
            times[label].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in setters:
        med[k] = amortised(med, k + ":")
    return med


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="small models (a smoke test)")
    ap.add_argument("--device", default="cpu", help="torch device, e.g. cuda (steps timed to completion)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    width = 64 if a.quick else 1024
    configs = [("mlp", lambda: mlp((784, width, width, 10)), (784,), 128),
               ("mlp", lambda: mlp((784, width, width, 10)), (784,), 1024 if not a.quick else 256),
               ("cnn", lambda: cnn(4 if a.quick else 16), (1, 28, 28), 128)]
    rows = []
    peers = list(PEER_METHODS) if kfac is not None else []
    head = "".join(f"{'/' + p:>14}" for p in peers) or "  (kfac-pytorch not installed: no peer column)"
    print(f"{'model':<6}{'batch':>6}{'SGD ms':>9}{'Adam ms':>9}{'plain':>9}{'stats':>9}{'inverse':>10}"
          f"{'K-FAC ms':>10}{'/SGD':>7}{'/Adam':>7}{head}  targets")
    for name, build, shape, batch in configs:
        m = bench(name, build, shape, batch, a.rounds, a.device)
        ratio = m["kfac"] / m["sgd"]
        target = TARGETS.get((name, batch)) if not a.quick else None
        verdicts = [] if target is None else [f"/SGD <= {target}: {'PASS' if ratio <= target else 'FAIL'}"]
        peer_ratios = {p: m["kfac"] / m[p] for p in peers}
        for p, r in peer_ratios.items():
            if not a.quick:
                verdicts.append(f"/{p.split('[')[1][:-1]} <= {PEER_TARGET}: {'PASS' if r <= PEER_TARGET else 'FAIL'}")
        print(f"{name:<6}{batch:>6}{1e3 * m['sgd']:>9.1f}{1e3 * m['adam']:>9.1f}{1e3 * m['kfac:plain']:>9.1f}"
              f"{1e3 * m['kfac:stats']:>9.1f}{1e3 * m['kfac:inverse']:>10.1f}{1e3 * m['kfac']:>10.1f}{ratio:>7.2f}"
              f"{m['kfac'] / m['adam']:>7.2f}" + "".join(f"{peer_ratios[p]:>14.2f}" for p in peers)
              + "  " + "; ".join(verdicts))
        emp = {p: m["kfac-emp"] / m[p] for p in peers}
        print(f"{'':<12}K-FAC, fisher='empirical' (the peer's statistic): plain / stats / inverse "
              f"{1e3 * m['kfac-emp:plain']:.1f} / {1e3 * m['kfac-emp:stats']:.1f} / {1e3 * m['kfac-emp:inverse']:.1f} ms, "
              f"amortised {1e3 * m['kfac-emp']:.1f} ms, {m['kfac-emp'] / m['sgd']:.2f}x SGD"
              + "".join(f", {r:.2f}x {p}" for p, r in emp.items()))
        for p in peers:
            print(f"{'':<12}{p}: plain / stats / inverse {1e3 * m[p + ':plain']:.1f} / {1e3 * m[p + ':stats']:.1f}"
                  f" / {1e3 * m[p + ':inverse']:.1f} ms, amortised {1e3 * m[p]:.1f} ms")
        rows.append(dict(model=name, batch=batch, ratio_sgd=ratio, ratio_adam=m["kfac"] / m["adam"],
                         **{f"ratio_{p}": r for p, r in peer_ratios.items()},
                         **{f"ratio_empirical_{p}": r for p, r in emp.items()}, **m))
    return rows


if __name__ == "__main__":
    main()
