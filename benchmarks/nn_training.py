"""Training benchmark on digits: how many iterations (and how much wall time) Adam needs to reach
the loss K-FAC natural gradient reaches on the deep autoencoder, and the classifier's test accuracy.

    python benchmarks/nn_training.py [--full]

Targets: Adam iterations / K-FAC iterations >= 3 on the autoencoder; classifier test accuracy >= 97%.
"""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("nn_digits", Path(__file__).resolve().parents[1] / "examples" / "nn_digits.py")
nn_digits = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nn_digits)


def first_reach(losses, target):
    return next((i + 1 for i, l in enumerate(losses) if l <= target), None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args(argv)
    res = nn_digits.run(full=a.full, quiet=False)
    k, ad = res[("autoencoder", "kfac")], res[("autoencoder", "adam")]
    target = k["loss"][-1]
    n_k = first_reach(k["loss"], target)
    n_a = first_reach(ad["loss"], target)
    print(f"\nautoencoder: K-FAC reaches {target:.3f} in {n_k} iterations ({k['time'][n_k - 1]:.2f} s)")
    if n_a is None:
        print(f"  Adam does not reach it in {len(ad['loss'])} iterations: ratio > {len(ad['loss']) / n_k:.2f} "
              f"(wall time ratio > {ad['time'][-1] / k['time'][n_k - 1]:.2f})")
    else:
        print(f"  Adam needs {n_a}: iteration ratio {n_a / n_k:.2f}, wall time ratio "
              f"{ad['time'][n_a - 1] / k['time'][n_k - 1]:.2f}")
    print(f"classifier test accuracy (K-FAC): {res[('classifier', 'kfac')]['test_accuracy']:.4f}")


if __name__ == "__main__":
    main()
