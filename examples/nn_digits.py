"""Natural gradient (K-FAC) vs Adam vs SGD on scikit-learn's digits: a classifier and a deep autoencoder.

Two problems on the 8×8 digits bundled with scikit-learn (no download), pixels
scaled to [0, 1], a fixed 80/20 train/test split:

* a classifier, MLP 64-128-10 (tanh), cross-entropy, categorical Fisher metric;
* a deep autoencoder 64-48-24-8-24-48-64 (tanh, logits out), the classic K-FAC
  benchmark shape scaled to digits, Bernoulli cross-entropy summed over pixels,
  Bernoulli Fisher metric.

``NaturalGradient`` runs the classic K-FAC recipe: Kronecker-factored curvature
(Monte Carlo true Fisher, EMA, refreshed every few steps), step size and momentum
from the damped quadratic model under the exact metric, Levenberg–Marquardt damping.
Adam and SGD with momentum use fixed learning rates (``benchmarks/nn_training.py``
tunes Adam over a grid).  Training-loss curves against iterations and against
optimiser wall time (loss evaluations excluded) are written as PNG files.

    python examples/nn_digits.py --out figures           # default sizes (about 20 s on one CPU thread)
    python examples/nn_digits.py --quick --out figures   # a few seconds
"""
from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import infogeo as ig  # noqa: E402

F = torch.nn.functional
logger = logging.getLogger(__name__)

#: layer sizes and output metric of each problem
PROBLEMS = {
    "classifier": dict(sizes=(64, 128, 10), output_metric="categorical"),
    "autoencoder": dict(sizes=(64, 48, 24, 8, 24, 48, 64), output_metric="bernoulli"),
}
METHODS = ("kfac", "adam", "sgd")
#: fixed learning rates of the example (1e-2 is among the best Adam rates of the benchmark's grid on the autoencoder)
DEFAULT_LR = {"classifier": {"adam": 3e-3, "sgd": 0.1}, "autoencoder": {"adam": 1e-2, "sgd": 0.03}}
#: K-FAC settings: initial damping (Levenberg-Marquardt adapts it, down to min_damping: without a floor the
#: mini-batch model is trusted ever more and the autoencoder eventually jumps), curvature / inverse refresh period
KFAC_OPTIONS = {"classifier": dict(damping=1.0, min_damping=1e-3, period=5),
                "autoencoder": dict(damping=1.0, min_damping=1e-3, period=5)}


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """Digits as float32 in [0, 1]: ``(X_train, y_train, X_test, y_test)`` for a fixed random split."""
    from sklearn.datasets import load_digits as _load
    d = _load()
    X = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target)
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(seed))
    n_train = int(round((1 - test_fraction) * len(X)))
    return X[perm[:n_train]], y[perm[:n_train]], X[perm[n_train:]], y[perm[n_train:]]


def mlp(sizes, seed: int = 0) -> torch.nn.Sequential:
    """Linear layers of the given widths with tanh between them (PyTorch's default initialisation, seeded)."""
    torch.manual_seed(seed)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


def loss(problem: str, out: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (classifier) or Bernoulli cross-entropy summed over pixels, mean over the batch."""
    if problem == "classifier":
        return F.cross_entropy(out, y)
    return F.binary_cross_entropy_with_logits(out, x, reduction="sum") / len(x)


def make_optimizer(method: str, model: torch.nn.Module, problem: str, lr: Optional[float] = None):
    """``"kfac"`` (natural gradient, classic K-FAC recipe), ``"adam"`` or ``"sgd"`` (momentum 0.9)."""
    if method == "kfac":
        opts = KFAC_OPTIONS[problem]
        # layers of at most 128 units: the damping added exactly to the Kronecker eigenvalues costs
        # little here, and reaches a lower loss than the factored damping in the same iterations
        return ig.nn.NaturalGradient(model.parameters(), lr=1.0 if lr is None else lr, curvature="kfac",
                                     damping=opts["damping"], min_damping=opts["min_damping"], model=model,
                                     output_metric=PROBLEMS[problem]["output_metric"], quadratic_model=True,
                                     adaptive_damping=True, ema_decay=0.95, kl_clip=None, inverse="eigen",
                                     curvature_update_period=opts["period"], inverse_update_period=opts["period"])
    lr = DEFAULT_LR[problem][method] if lr is None else lr
    if method == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    if method == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def fit(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn, X: torch.Tensor, y: torch.Tensor,
        iterations: int, batch: int, seed: int = 0, target: Optional[float] = None,
        eval_every: int = 1) -> Dict[str, Any]:
    """Mini-batch training of ``model`` on ``loss_fn(out, x, y)`` (batches drawn with replacement, seeded).

    At the start and every ``eval_every`` iterations the loss on the whole training set is recorded
    with the optimiser's cumulative wall time (the evaluations themselves are not timed).  With a
    ``target`` training stops at the first evaluation whose loss is ``<= target``; a non-finite loss
    stops it too.  Every optimiser gets the same ``opt.step(closure)``: the natural gradient's
    curvature statistics come from hooks on the closure's own forward and backward.

    Returns a dict with ``iteration``, ``loss``, ``time`` (lists) and ``model``.
    """
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        initial = float(loss_fn(model(X), X, y))
    rec: Dict[str, Any] = {"iteration": [0], "loss": [initial], "time": [0.0], "model": model}
    elapsed = 0.0
    for it in range(1, iterations + 1):
        idx = torch.randint(0, len(X), (batch,), generator=gen)
        xb, yb = X[idx], y[idx]
        t0 = time.perf_counter()

        def closure():
            opt.zero_grad()
            value = loss_fn(model(xb), xb, yb)
            value.backward()
            return value
        opt.step(closure)
        elapsed += time.perf_counter() - t0
        if it % eval_every == 0 or it == iterations:
            with torch.no_grad():
                value = float(loss_fn(model(X), X, y))
            rec["iteration"].append(it)
            rec["loss"].append(value)
            rec["time"].append(elapsed)
            if not math.isfinite(value):  # diverged: nothing more to learn from this run
                logger.warning("training diverged at iteration %d", it)
                break
            if target is not None and value <= target:
                break
    return rec


def train(problem: str, method: str, X: torch.Tensor, y: torch.Tensor, iterations: int, batch: int,
          seed: int = 0, lr: Optional[float] = None, target: Optional[float] = None,
          eval_every: int = 1) -> Dict[str, Any]:
    """Train ``problem``'s network (initialisation ``seed``) with ``method``; see :func:`fit`."""
    model = mlp(PROBLEMS[problem]["sizes"], seed)
    opt = make_optimizer(method, model, problem, lr)
    return fit(model, opt, lambda out, xb, yb: loss(problem, out, xb, yb), X, y, iterations, batch, seed=seed,
               target=target, eval_every=eval_every)


def accuracy(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of examples whose largest logit is the label."""
    with torch.no_grad():
        return float((model(X).argmax(1) == y).float().mean())


def plot_curves(runs: Dict[str, Dict[str, Any]], path: Path, title: str, target: Optional[float] = None,
                zoom: Optional[float] = None) -> Path:
    """One PNG: training loss against iterations (left) and optimiser wall time (right), one line per run.

    ``target`` draws a horizontal line; ``zoom`` limits the loss axis to ``[min, zoom * min]``.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, r in runs.items():
        axes[0].semilogy(r["iteration"], r["loss"], label=label)
        axes[1].semilogy(r["time"], r["loss"], label=label)
    lowest = min(min(r["loss"]) for r in runs.values())
    for ax in axes:
        if target is not None:
            ax.axhline(target, color="gray", linestyle=":", linewidth=1)
        if zoom is not None and lowest > 0:
            ax.set_ylim(0.98 * lowest, zoom * lowest)
    axes[0].set_xlabel("iteration")
    axes[1].set_xlabel("optimiser wall time (s)")
    axes[0].set_ylabel("training loss (whole training set)")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot(results: Dict[str, Dict[str, Dict[str, Any]]], out: Path, title: str = "digits",
         target: Optional[float] = None) -> list:
    """:func:`plot_curves` per problem, ``out/nn_digits_<problem>.png`` (autoencoder zoomed on its
    interesting range, ``target`` drawn there); returns the paths."""
    return [plot_curves(runs, out / f"nn_digits_{problem}.png",
                        f"{title} {problem}: natural gradient (K-FAC) vs Adam vs SGD",
                        target=target if problem == "autoencoder" else None,
                        zoom=2.0 if problem == "autoencoder" else None)
            for problem, runs in results.items()]


def example_args(doc: str, argv=None) -> argparse.Namespace:
    """The examples' command line, ``--out DIR`` and ``--quick``; sets one torch thread (timings, fairness)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="figures", help="folder for the PNG figures (default: figures)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a few seconds, for CI)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    return a


def main(argv=None) -> Dict[str, Any]:
    a = example_args(__doc__, argv)
    Xtr, ytr, Xte, yte = load_digits()
    iters = {"classifier": 60 if a.quick else 300, "autoencoder": 100 if a.quick else 600}
    batch = 128 if a.quick else 256
    results: Dict[str, Dict[str, Any]] = {}
    summary: Dict[str, Any] = {}
    for problem in PROBLEMS:
        results[problem] = {}
        for method in METHODS:
            r = train(problem, method, Xtr, ytr, iters[problem], batch)
            results[problem][method] = r
            summary[f"{problem}_{method}_loss"] = r["loss"][-1]
            summary[f"{problem}_{method}_initial_loss"] = r["loss"][0]
            extra = ""
            if problem == "classifier":
                summary[f"classifier_{method}_test_accuracy"] = accuracy(r["model"], Xte, yte)
                extra = f", test accuracy {summary[f'classifier_{method}_test_accuracy']:.4f}"
            print(f"{problem:<12} {method:<5} {r['iteration'][-1]:4d} iterations, training loss "
                  f"{r['loss'][-1]:8.4f}, {r['time'][-1]:5.2f} s{extra}")
    summary["figures"] = [str(p) for p in plot(results, Path(a.out))]
    return summary


if __name__ == "__main__":
    main()
