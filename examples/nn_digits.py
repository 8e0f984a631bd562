"""Natural gradient (K-FAC) vs SGD vs Adam on scikit-learn's bundled digits.

Two problems: a classifier (MLP 64-128-10, categorical Fisher) and a deep
autoencoder (64-48-24-8-24-48-64, Bernoulli Fisher on pixels in [0, 1]).  Loss
against iterations and wall time is saved as PNG files in ``--out``.

    python examples/nn_digits.py --out figures          # small, < 60 s on a CPU
    python examples/nn_digits.py --full --out figures   # more iterations
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import infogeo as ig  # noqa: E402

F = torch.nn.functional


def load_digits():
    from sklearn.datasets import load_digits as _load
    d = _load()
    X = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(X), generator=g)
    n_train = int(0.8 * len(X))
    return X[perm[:n_train]], y[perm[:n_train]], X[perm[n_train:]], y[perm[n_train:]]


def mlp(sizes, seed=0):
    torch.manual_seed(seed)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


def train(problem, method, iters, batch, X, y, seed=0):
    """Minibatch training; returns (losses on the full training set, wall times, model)."""
    if problem == "classifier":
        model = mlp((64, 128, 10), seed)
        loss_fn = lambda out, xb, yb: F.cross_entropy(out, yb)  # noqa: E731
        metric = "categorical"
    else:
        model = mlp((64, 48, 24, 8, 24, 48, 64), seed)
        loss_fn = lambda out, xb, yb: F.binary_cross_entropy_with_logits(out, xb, reduction="sum") / len(xb)  # noqa: E731
        metric = "bernoulli"
    if method == "kfac":
        opt = ig.nn.NaturalGradient(model.parameters(), lr=0.3 if problem == "classifier" else 0.5,
                                    curvature="kfac", damping=1e-2 if problem == "classifier" else 1e-1,
                                    model=model, output_metric=metric, kl_clip=1e-2 if problem == "classifier" else 1.0,
                                    inverse_update_period=1, ema_decay=0.9)
    elif method == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(seed + 1)
    losses, times, t0 = [], [], time.perf_counter()
    for _ in range(iters):
        idx = torch.randint(0, len(X), (batch,), generator=g)
        xb, yb = X[idx], y[idx]

        def closure():
            opt.zero_grad()
            loss = loss_fn(model(xb), xb, yb)
            loss.backward()
            return loss
        if method == "kfac":
            opt.step(closure, inputs=xb)
        else:
            opt.step(closure)
        times.append(time.perf_counter() - t0)
        with torch.no_grad():
            losses.append(float(loss_fn(model(X), X, y)))
    return losses, times, model


def run(full=False, out=None, quiet=False):
    torch.set_num_threads(1)
    Xtr, ytr, Xte, yte = load_digits()
    iters = {"classifier": 400 if full else 120, "autoencoder": 1500 if full else 300}
    batch = 256 if full else 128
    results = {}
    for problem in ("classifier", "autoencoder"):
        for method in ("kfac", "adam", "sgd"):
            losses, times, model = train(problem, method, iters[problem], batch, Xtr, ytr)
            entry = {"loss": losses, "time": times}
            if problem == "classifier":
                with torch.no_grad():
                    entry["test_accuracy"] = float((model(Xte).argmax(1) == yte).float().mean())
            results[(problem, method)] = entry
            if not quiet:
                extra = f", test accuracy {entry['test_accuracy']:.3f}" if "test_accuracy" in entry else ""
                print(f"{problem:<12}{method:<6} final loss {losses[-1]:.4f} in {times[-1]:.1f} s{extra}")
    if out is not None:
        plot(results, Path(out))
    return results


def plot(results, out: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)
    for problem in ("classifier", "autoencoder"):
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        for method in ("kfac", "adam", "sgd"):
            r = results[(problem, method)]
            axes[0].semilogy(r["loss"], label=method)
            axes[1].semilogy(r["time"], r["loss"], label=method)
        axes[0].set_xlabel("iteration")
        axes[1].set_xlabel("wall time (s)")
        axes[0].set_ylabel("training loss")
        axes[0].legend()
        fig.suptitle(f"digits {problem}: natural gradient (K-FAC) vs Adam vs SGD")
        fig.tight_layout()
        fig.savefig(out / f"nn_digits_{problem}.png", dpi=100)
        plt.close(fig)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--out", default=None, help="folder for the PNG figures")
    a = ap.parse_args()
    run(a.full, a.out)
