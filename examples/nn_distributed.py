"""Data-parallel natural gradient (K-FAC) on the digits classifier, over torch.distributed.

Every process holds the model wrapped in ``DistributedDataParallel`` (or, with ``--fsdp``, a shard
of every layer, ``fully_shard``: FSDP2) and trains on its own share of each minibatch;
``ig.nn.NaturalGradient`` notices the process group, averages the curvature statistics over the
processes (one all-reduce per refresh) and divides the eigendecompositions among them.  The plain
training loop is unchanged.  Rank 0 prints the test accuracy and draws the training loss.

    torchrun --nproc_per_node=2 examples/nn_distributed.py --out figures            # 2 CPU processes (gloo)
    torchrun --nproc_per_node=2 examples/nn_distributed.py --fsdp --out figures     # the same, sharded (FSDP2)
    torchrun --nproc_per_node=4 examples/nn_distributed.py --backend nccl --out figures   # 4 GPUs
    python examples/nn_distributed.py --out figures --quick                          # one process
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Dict

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import infogeo as ig  # noqa: E402

_spec = importlib.util.spec_from_file_location("nn_digits", Path(__file__).resolve().parent / "nn_digits.py")
nn_digits = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nn_digits)

F = torch.nn.functional


def main(argv=None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="figures", help="folder for the PNG figure (default: figures)")
    ap.add_argument("--quick", action="store_true", help="few iterations (a few seconds)")
    ap.add_argument("--backend", default="gloo", help="torch.distributed backend: gloo (CPU) or nccl (GPU)")
    ap.add_argument("--fsdp", action="store_true",
                    help="shard the model with fully_shard (FSDP2) instead of DistributedDataParallel")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    launched = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if launched:  # started by torchrun: join its process group
        dist.init_process_group(a.backend)
    rank, world = ig.nn.distributed.rank(), ig.nn.distributed.world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}") if a.backend == "nccl" else torch.device("cpu")
    try:
        Xtr, ytr, Xte, yte = nn_digits.load_digits()
        Xtr, ytr, Xte, yte = Xtr.to(device), ytr.to(device), Xte.to(device), yte.to(device)
        model = nn_digits.mlp(nn_digits.PROBLEMS["classifier"]["sizes"], seed=0).to(device)  # same start everywhere
        if launched and a.fsdp:   # FSDP2: each Linear layer is a unit, its weights sharded over the ranks
            from torch.distributed.fsdp import fully_shard
            for m in model.modules():
                if isinstance(m, torch.nn.Linear):
                    fully_shard(m)
            net = fully_shard(model)
        else:
            net = torch.nn.parallel.DistributedDataParallel(model) if launched else model
        opt = ig.nn.NaturalGradient(net, lr=0.3, curvature="kfac", damping=1e-3, step_rule="clip")
        iterations, batch = (40, 128) if a.quick else (300, 256)
        gen = torch.Generator().manual_seed(1)          # the same batches on every rank ...
        record = {"iteration": [], "loss": []}
        for it in range(1, iterations + 1):
            idx = torch.randint(0, len(Xtr), (batch,), generator=gen).to(device)
            mine = idx[rank::world]                       # ... each rank trains on its share
            opt.zero_grad()
            F.cross_entropy(net(Xtr[mine]), ytr[mine]).backward()
            opt.step()
            if it % 10 == 0 or it == iterations:
                with torch.no_grad():
                    record["iteration"].append(it)
                    record["loss"].append(float(F.cross_entropy(model(Xtr), ytr)))
        accuracy = nn_digits.accuracy(model, Xte, yte)
        summary: Dict[str, Any] = {"world_size": world, "loss": record["loss"][-1], "test_accuracy": accuracy,
                                   "figures": []}
        where = f"{world} process(es){', FSDP2' if launched and a.fsdp else ''}"
        if rank == 0:
            print(f"{where}, {iterations} iterations of batch {batch}: training loss "
                  f"{record['loss'][-1]:.4f}, test accuracy {accuracy:.4f}")
            summary["figures"] = [str(_plot(record, Path(a.out) / "nn_distributed.png", where))]
        return summary
    finally:
        if launched:
            dist.destroy_process_group()


def _plot(record: Dict[str, list], path: Path, where: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.semilogy(record["iteration"], record["loss"], marker="o", markersize=3)
    ax.set_xlabel("iteration")
    ax.set_ylabel("training loss (whole training set)")
    ax.set_title(f"digits classifier, K-FAC on {where}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
