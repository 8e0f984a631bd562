"""Natural vs plain reweighted wake-sleep: a Helmholtz machine on binarised 8×8 digits.

A Helmholtz machine with two stochastic binary hidden layers (64-32-16: a generative sigmoid
belief network p and a recognition network q) is trained on scikit-learn's 8×8 digits,
thresholded at 8 of 16, by reweighted wake-sleep (Bornschein & Bengio 2015) with K = 5
importance samples from q per digit, with and without the natural gradient:
each network's gradient preconditioned by its per-unit block Fisher
F_j = E[σ'(a_j) h̃ h̃ᵀ] (moving average, Tikhonov damping, inverse by Sherman–Morrison
steps; Várady, Volpi, Malagò & Ay 2022).  Both take plain SGD steps, each with its own
step size, the same initialisation, the same mini-batches and the same sampling seed.

Both train for 30 epochs, alternating epoch by epoch; then plain wake-sleep goes on until it
has used as much training time as the natural one (at most 240 epochs).  Training time is
the CPU time of this process (one torch thread, evaluation excluded), so other programs on a
shared machine do not inflate it.

Figures: the training loss (the mean negative K-sample bound over each epoch) and the
held-out log-likelihood (importance-sampled with 1000 samples from q per test digit) against
epochs and against training time, and digits drawn from each trained model next to test digits.

    python examples/natural_wake_sleep.py --out figures           # default sizes (a few CPU minutes)
    python examples/natural_wake_sleep.py --quick --out figures   # a few seconds
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Dict

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from infogeo.nn.helmholtz import HelmholtzMachine, ReweightedWakeSleep  # noqa: E402
from nn_digits import example_args, load_digits  # noqa: E402

SIZES = (64, 32, 16)
#: SGD step sizes of the two methods (each the best of a small grid at the default sizes)
LR = {"natural": 0.2, "plain": 1.0}
#: the natural method's Fisher blocks: 4 samples per step into a moving average of weight 0.02 per step,
#: Tikhonov damping 0.1 (chosen with the step size on a small grid, 15 epochs)
NATURAL = dict(fisher_samples=4, decay=0.02, damping=0.1)
SAMPLES = 5          # K, importance samples per digit during training
EVAL_SAMPLES = 1000  # importance samples per test digit for the log-likelihood estimate


def binarised_digits(seed: int = 0):
    """Train and test digits, pixels thresholded at 8 of 16 (the example's fixed 80/20 split)."""
    Xtr, _, Xte, _ = load_digits(seed=seed)   # pixels / 16
    return (Xtr >= 0.5).float(), (Xte >= 0.5).float()


def start(method: str, Xte: torch.Tensor, eval_samples: int, seed: int = 0) -> Dict[str, Any]:
    """A fresh machine (the same initialisation for every method), its trainer and its record at epoch 0."""
    hm = HelmholtzMachine(SIZES, seed=seed)
    options = NATURAL if method == "natural" else {}
    rws = ReweightedWakeSleep(hm, lr=LR[method], natural=method == "natural", samples=SAMPLES, seed=seed,
                              **options)
    run = {"machine": hm, "trainer": rws, "order": torch.Generator().manual_seed(seed + 1),
           "eval": torch.Generator().manual_seed(seed + 2), "epoch": [0], "time": [0.0], "loss": [float("nan")]}
    run["test_ll"] = [float(hm.log_likelihood(Xte, eval_samples, run["eval"]).mean())]
    return run


def epoch(run: Dict[str, Any], Xtr: torch.Tensor, Xte: torch.Tensor, batch: int, eval_samples: int) -> None:
    """One pass over ``Xtr`` in shuffled mini-batches; records the mean negative K-sample bound of the
    epoch (``loss``), the held-out log-likelihood estimate (``test_ll``, nats per digit) and the
    cumulative training time: CPU seconds of this process (evaluation excluded), which other programs
    sharing the machine do not inflate."""
    perm = torch.randperm(len(Xtr), generator=run["order"])
    bounds = []
    t0 = time.process_time()
    for i in range(0, len(Xtr) - batch + 1, batch):
        bounds.append(run["trainer"].step(Xtr[perm[i:i + batch]]))
    run["time"].append(run["time"][-1] + time.process_time() - t0)
    run["epoch"].append(run["epoch"][-1] + 1)
    run["loss"].append(-sum(bounds) / len(bounds))
    run["test_ll"].append(float(run["machine"].log_likelihood(Xte, eval_samples, run["eval"]).mean()))


def train(Xtr: torch.Tensor, Xte: torch.Tensor, epochs: int, batch: int, eval_samples: int,
          seed: int = 0) -> Dict[str, Dict[str, Any]]:
    """Both methods for ``epochs`` epochs, alternating epoch by epoch (so that a shared machine's load
    falls on both alike); then plain wake-sleep goes on until it has used as much training time as
    the natural one (at most eight times as many epochs)."""
    runs = {m: start(m, Xte, eval_samples, seed) for m in ("natural", "plain")}
    for _ in range(epochs):
        for run in runs.values():
            epoch(run, Xtr, Xte, batch, eval_samples)
    plain = runs["plain"]
    while plain["time"][-1] < runs["natural"]["time"][-1] and plain["epoch"][-1] < 8 * epochs:
        epoch(plain, Xtr, Xte, batch, eval_samples)
    return runs


def plot_curves(runs: Dict[str, Dict[str, Any]], path: Path) -> Path:
    """Training loss (top) and held-out log-likelihood (bottom) against epochs (left) and seconds (right)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey="row")
    for label, r in runs.items():
        for col, x in enumerate(("epoch", "time")):
            axes[0, col].plot(r[x][1:], r["loss"][1:], label=label)
            axes[1, col].plot(r[x], r["test_ll"], marker=".", label=label)
    axes[0, 0].set_ylabel("training loss: -log (1/K) Σ_k w_k, K = 5")
    axes[1, 0].set_ylabel(f"held-out log p(x), IS with K = {EVAL_SAMPLES}")
    for ax in axes[1]:
        lo = min(min(r["test_ll"][1:]) for r in runs.values())
        hi = max(max(r["test_ll"]) for r in runs.values())
        ax.set_ylim(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo))
    axes[1, 0].set_xlabel("epoch")
    axes[1, 1].set_xlabel("training time (CPU seconds, one thread)")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0, 0].legend()
    fig.suptitle(f"Helmholtz machine {'-'.join(map(str, SIZES))} on binarised digits: "
                 "natural vs plain reweighted wake-sleep")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_samples(runs: Dict[str, Dict[str, Any]], Xte: torch.Tensor, path: Path, n: int = 40) -> Path:
    """A grid of test digits and, per method, digits drawn from the trained generative model."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = {"held-out digits": Xte[:n]}
    gen = torch.Generator().manual_seed(0)
    for label, r in runs.items():
        panels[f"drawn from p ({label})"] = r["machine"].sample(n, gen)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.3))
    for ax, (title, X) in zip(axes, panels.items()):
        rows, cols = 5, n // 5
        tiles = torch.nn.functional.pad(X.reshape(n, 8, 8), (1, 1, 1, 1), value=0.25)   # grey frame per digit
        grid = tiles.reshape(rows, cols, 10, 10).permute(0, 2, 1, 3).reshape(10 * rows, 10 * cols)
        ax.imshow(grid.numpy(), cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None) -> Dict[str, Any]:
    a = example_args(__doc__, argv)   # the options "--out" and "--quick" (the docs build looks for the latter)
    Xtr, Xte = binarised_digits()
    epochs, batch, eval_samples = 30, 20, EVAL_SAMPLES
    if a.quick:  # a third of the training digits, two epochs, a coarser log-likelihood estimate
        Xtr, epochs, eval_samples = Xtr[:480], 2, 100
    runs = train(Xtr, Xte, epochs, batch, eval_samples)
    summary: Dict[str, Any] = {}
    print(f"{'method':<8} {'epochs':>6} {'seconds':>8} {'train loss':>10} {'held-out log p(x)':>18}")
    for method, r in runs.items():
        summary[f"{method}_epochs"] = r["epoch"]
        summary[f"{method}_test_ll"] = r["test_ll"]
        summary[f"{method}_time"] = r["time"]
        summary[f"{method}_loss"] = r["loss"]
        print(f"{method:<8} {r['epoch'][-1]:6d} {r['time'][-1]:8.2f} {r['loss'][-1]:10.3f} {r['test_ll'][-1]:18.3f}")
    print("held-out log p(x) per epoch (training seconds so far):")
    for e in range(0, epochs + 1, max(1, epochs // 10)):
        print(f"  epoch {e:3d}: " + ", ".join(f"{m} {r['test_ll'][e]:8.3f} ({r['time'][e]:5.1f} s)"
                                               for m, r in runs.items()))
    print("held-out log p(x) at equal training time:")
    nat, pla = runs["natural"], runs["plain"]
    for e in range(max(1, epochs // 5), epochs + 1, max(1, epochs // 5)):
        t = nat["time"][e]
        k = max(i for i, s in enumerate(pla["time"]) if s <= t)   # plain's last epoch within natural's time
        print(f"  {t:6.1f} s: natural {nat['test_ll'][e]:8.3f} (epoch {e}), "
              f"plain {pla['test_ll'][k]:8.3f} (epoch {k}, {pla['time'][k]:.1f} s)")
    out = Path(a.out)
    summary["figures"] = [str(plot_curves(runs, out / "natural_wake_sleep_curves.png")),
                          str(plot_samples(runs, Xte, out / "natural_wake_sleep_samples.png"))]
    return summary


if __name__ == "__main__":
    main()
