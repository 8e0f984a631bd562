"""A convolutional network with BatchNorm, trained by natural gradient in a plain torch loop.

The digits (8x8 images) are classified by two 3x3 convolutions, each followed by BatchNorm in
training mode and ReLU, and a linear read-out.  ``ig.nn.NaturalGradient`` (K-FAC, default
settings, Monte Carlo Fisher) is compared with its empirical-Fisher variant and with Adam at
a good fixed rate, on the same initialisation and minibatches of 64.  BatchNorm normalises with
the statistics of each minibatch, which couples the examples; the optimizer counts those
statistics as constants, as K-FAC optimizers do (see the nn guide).

Every ``eval_every`` iterations the whole training set is evaluated with the model in
``eval()`` mode (running statistics), and the optimiser's cumulative wall time recorded.
What it showed on one CPU thread: Adam leads for about one and a half epochs (the trust region
holds the first natural-gradient steps back); after six epochs the natural gradient's training
loss is 0.0003 against Adam's 0.0053 (test accuracy 99.2 % against 98.3 %), for about twice
Adam's optimiser time per step on this small network.

    python examples/nn_cnn_batchnorm.py --out figures           # six epochs, about 15 s on one CPU thread
    python examples/nn_cnn_batchnorm.py --quick --out figures   # three epochs
"""
from __future__ import annotations

import importlib.util
import logging
import time
from pathlib import Path
from typing import Any, Callable, Dict

import torch

import infogeo as ig

F = torch.nn.functional
logger = logging.getLogger(__name__)

_spec = importlib.util.spec_from_file_location("nn_digits", Path(__file__).resolve().parent / "nn_digits.py")
nn_digits = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nn_digits)

BATCH = 64
METHODS: Dict[str, Callable[[torch.nn.Module], torch.optim.Optimizer]] = {
    "natural gradient (K-FAC, clipped step)": lambda m: ig.nn.NaturalGradient(m, lr=0.1, step_rule="clip"),
    "natural gradient (empirical Fisher)": lambda m: ig.nn.NaturalGradient(m, lr=0.1, fisher="empirical",
                                                                         step_rule="clip"),
    "Adam (lr 1e-2)": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2),
}


def cnn(seed: int = 0, width: int = 16) -> torch.nn.Sequential:
    """Conv-BN-ReLU, strided Conv-BN-ReLU, linear read-out, for 1x8x8 inputs."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, width, 3, padding=1), torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
        torch.nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), torch.nn.BatchNorm2d(2 * width), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(2 * width * 16, 10))


def evaluate(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> Dict[str, float]:
    """Loss and accuracy in ``eval()`` mode (BatchNorm's running statistics), the model put back in training mode."""
    model.eval()
    try:
        with torch.no_grad():
            out = model(X)
            return {"loss": float(F.cross_entropy(out, y)), "accuracy": float((out.argmax(1) == y).float().mean())}
    finally:
        model.train()


def fit(make: Callable[[torch.nn.Module], torch.optim.Optimizer], X: torch.Tensor, y: torch.Tensor,
        epochs: int, eval_every: int = 5, seed: int = 0) -> Dict[str, Any]:
    """Minibatch training (shuffled each epoch, seeded): ``iteration``, ``loss``, ``time`` lists and ``model``."""
    model = cnn(seed)
    opt = make(model)
    gen = torch.Generator().manual_seed(seed + 1)
    rec: Dict[str, Any] = {"iteration": [0], "loss": [evaluate(model, X, y)["loss"]], "time": [0.0], "model": model}
    it, elapsed = 0, 0.0
    for epoch in range(epochs):
        perm = torch.randperm(len(X), generator=gen)
        for i in range(0, len(X), BATCH):
            idx = perm[i:i + BATCH]
            t0 = time.perf_counter()
            opt.zero_grad()
            F.cross_entropy(model(X[idx]), y[idx]).backward()
            opt.step()
            elapsed += time.perf_counter() - t0
            it += 1
            if it % eval_every == 0 or (i + BATCH >= len(X) and epoch == epochs - 1):   # and the last iteration
                rec["iteration"].append(it)
                rec["loss"].append(evaluate(model, X, y)["loss"])
                rec["time"].append(elapsed)
    return rec


def main(argv=None) -> Dict[str, Any]:
    a = nn_digits.example_args(__doc__, argv)
    Xtr, ytr, Xte, yte = nn_digits.load_digits()
    Xtr, Xte = Xtr.reshape(-1, 1, 8, 8), Xte.reshape(-1, 1, 8, 8)
    epochs = 3 if a.quick else 6   # natural gradient overtakes Adam during the second epoch
    runs: Dict[str, Dict[str, Any]] = {}
    summary: Dict[str, Any] = {}
    for label, make in METHODS.items():
        r = runs[label] = fit(make, Xtr, ytr, epochs)
        test = evaluate(r["model"], Xte, yte)
        summary[label] = {"initial_loss": r["loss"][0], "loss": r["loss"][-1], "test_accuracy": test["accuracy"],
                          "time": r["time"][-1]}
        print(f"{label:<38} {r['iteration'][-1]:4d} iterations, training loss {r['loss'][-1]:.4f}, "
              f"test accuracy {test['accuracy']:.4f}, {r['time'][-1]:5.2f} s")
    path = nn_digits.plot_curves(runs, Path(a.out) / "nn_cnn_batchnorm.png",
                                 "digits CNN with BatchNorm (training mode): natural gradient vs Adam")
    summary["figures"] = [str(path)]
    return summary


if __name__ == "__main__":
    main()
