"""eigen-adam's rotations with bfloat16 bases in bfloat16 (the device's native products) against float32.

``NaturalGradient``'s default step rule holds its eigenbases in bfloat16 (``state_dtype="auto"``); where the device
multiplies bfloat16 natively, products of at least ``infogeo.nn._params.NARROW_PRODUCT`` multiply-adds with such a
basis run in bfloat16 (``held_product``).  This benchmark trains two copies of each race workload with the defaults
on the same batches, one with those products and one with every product in float32
(``_params.NARROW_PRODUCTS = False``), the steps interleaved in one process (one torch thread, CPU time of each
whole step), and prints the ratio of the medians and of the totals, with the losses at a quarter, half and all
of the run.  Goal: the bfloat16 products never slower (ratio of medians <= 1.02) and the losses alike.

    python benchmarks/held_products.py [--workloads classifier autoencoder ...] [--steps 160] [--quick]

Measured on the 2-core development CPU (AVX512-BF16), 160 steps (the transformer 50): classifier 0.87-0.88,
autoencoder 0.95, transformer 0.92, CNN 0.99-1.00, masked model 1.00 (ratios of medians, two runs; other work
on the machine).  On a device without native bfloat16 products both copies compute alike (ratio about 1).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _race_workloads import WORKLOADS  # noqa: E402

import infogeo as ig  # noqa: E402
from infogeo.nn import _params  # noqa: E402


def compare(name: str, steps: int) -> dict:
    """Both copies of workload ``name`` trained ``steps`` steps, interleaved; CPU ms per step and losses."""
    w = WORKLOADS[name]
    runs = {}
    for mode in ("bfloat16", "float32"):
        task = w.build(0)
        runs[mode] = (task, ig.nn.NaturalGradient(task.model, output_metric=w.output_metric))
    batches = [next(runs["float32"][0].batches) for _ in range(steps)]
    ms = {m: [] for m in runs}
    losses = {m: [] for m in runs}
    try:
        for k, (X, y) in enumerate(batches):
            for mode in (("float32", "bfloat16") if k % 2 else ("bfloat16", "float32")):
                _params.NARROW_PRODUCTS = None if mode == "bfloat16" else False
                task, opt = runs[mode]

                def closure():
                    opt.zero_grad()
                    loss = task.loss(task.model(X), y)
                    loss.backward()
                    return loss
                t = time.thread_time()
                loss = opt.step(closure)
                ms[mode].append((time.thread_time() - t) * 1e3)
                losses[mode].append(float(loss))
    finally:
        _params.NARROW_PRODUCTS = None
    return {"ms": ms, "losses": losses}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=["classifier", "autoencoder", "cnn", "masked", "transformer"])
    ap.add_argument("--steps", type=int, default=160, help="steps per workload (the transformer a third of them)")
    ap.add_argument("--quick", action="store_true", help="a smoke test: the classifier, 6 steps")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    native = _params.multiplies_bfloat16(torch.device("cpu"))
    print(f"native bfloat16 products on this CPU: {native}")
    names, steps = (["classifier"], 6) if args.quick else (args.workloads, args.steps)
    ok = True
    for name in names:
        n = max(4, steps // 3) if name == "transformer" else steps
        r = compare(name, n)
        ms, losses = r["ms"], r["losses"]
        med = statistics.median(ms["bfloat16"]) / statistics.median(ms["float32"])
        tot = sum(ms["bfloat16"]) / sum(ms["float32"])
        at = [max(1, n // 4), max(1, n // 2), n]
        loss = {m: [statistics.fmean(losses[m][max(0, i - 5):i]) for i in at] for m in losses}
        verdict = "PASS" if med <= 1.02 else "FAIL"
        ok &= med <= 1.02
        print(f"{name:12s} {n:4d} steps  ms/step bfloat16 {statistics.median(ms['bfloat16']):7.2f}  float32 "
              f"{statistics.median(ms['float32']):7.2f}  ratio of medians {med:.3f} (totals {tot:.3f}) {verdict}  "
              f"losses at {at}: " + "  ".join(f"{m} " + ", ".join(f"{x:.4g}" for x in loss[m]) for m in loss))
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
