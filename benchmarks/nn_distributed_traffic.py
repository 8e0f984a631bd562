"""Bytes infogeo's natural gradient communicates per step under DDP and FSDP2, against DDP's gradient all-reduce.

Run with torchrun (gloo on CPU is enough: the bytes do not depend on the backend)::

    torchrun --nproc_per_node=2 benchmarks/nn_distributed_traffic.py
    torchrun --nproc_per_node=4 benchmarks/nn_distributed_traffic.py

Counted: the collectives ``NaturalGradient.step()`` issues (statistics all-reduce, or under FSDP2 with
``"memory"`` their reduce to each block's owner, agreements, broadcasts of directions or factorisations, and under
FSDP2 the all-gather of the sharded gradients), as bytes *received per rank* with the usual ring costs: all-reduce
of ``n`` bytes ``2n(R-1)/R``, all-gather to ``n`` bytes ``n(R-1)/R``, broadcast ``n`` on the ranks that receive it
and reduce ``n(R-1)`` on its root (both averaged over the ranks).  The reference is DDP's own all-reduce of the gradients,
``2bP(R-1)/R`` for ``P`` parameters of ``b`` bytes.  FSDP2's own all-gathers of the parameters and
reduce-scatters of the gradients (forward and backward) are not counted: they replace DDP's.
Rank 0 prints the table (means over the steps, and their range over the refresh cycle).
"""
from __future__ import annotations

import contextlib
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import infogeo as ig  # noqa: E402
from infogeo.nn import fsdp  # noqa: E402

F = torch.nn.functional
STEPS, BATCH, WIDTHS = 30, 64, (64, 256, 256, 10)


class Counter:
    """Bytes received per rank by the collectives issued while :attr:`on`."""

    def __init__(self):
        self.on, self.bytes = False, 0.0
        R = dist.get_world_size()
        orig = {k: getattr(dist, k) for k in ("all_reduce", "broadcast", "all_gather", "reduce")}

        def all_reduce(t, *a, **k):
            if self.on:
                self.bytes += 2 * t.numel() * t.element_size() * (R - 1) / R
            return orig["all_reduce"](t, *a, **k)

        def broadcast(t, *a, **k):
            if self.on:
                self.bytes += t.numel() * t.element_size() * (R - 1) / R
            return orig["broadcast"](t, *a, **k)

        def reduce(t, *a, **k):   # the mirror of a broadcast
            if self.on:
                self.bytes += t.numel() * t.element_size() * (R - 1) / R
            return orig["reduce"](t, *a, **k)

        def all_gather(out, t, *a, **k):
            if self.on:
                self.bytes += t.numel() * t.element_size() * (R - 1)
            return orig["all_gather"](out, t, *a, **k)
        dist.all_reduce, dist.broadcast, dist.all_gather, dist.reduce = all_reduce, broadcast, all_gather, reduce
        gather = fsdp.gather

        def counted_gather(tensors):
            if self.on:
                self.bytes += sum(t.numel() * t.element_size() * (R - 1) / R for t in tensors.values()
                                  if fsdp.is_dtensor(t))
            return gather(tensors)
        fsdp.gather = counted_gather

    @contextlib.contextmanager
    def counting(self):
        self.on = True
        try:
            yield
        finally:
            self.on = False


def model():
    torch.manual_seed(0)
    layers = []
    for a, b in zip(WIDTHS[:-1], WIDTHS[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])


def run(mode: str, placement: str, counter: Counter, curvature: str = "kfac"):
    net = model()
    P = sum(p.numel() for p in net.parameters())
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for m in net.modules():
            if isinstance(m, torch.nn.Linear):
                fully_shard(m)
        fully_shard(net)
    else:
        net = torch.nn.parallel.DistributedDataParallel(net)
    opt = ig.nn.NaturalGradient(net, curvature=curvature, placement=placement, fisher="mc")
    g = torch.Generator().manual_seed(dist.get_rank())
    per_step = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, WIDTHS[0], generator=g)
        y = torch.randint(0, WIDTHS[-1], (BATCH,), generator=g)
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        before = counter.bytes
        with counter.counting():
            opt.step()
        per_step.append(counter.bytes - before)
    return P, per_step


def main():
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    R = dist.get_world_size()
    counter = Counter()
    rows = []
    for curvature in ("kfac", "ekfac"):
        for mode in ("ddp", "fsdp2"):
            for placement in ("memory", "comm"):
                P, per_step = run(mode, placement, counter, curvature)
                ddp = 2 * 4 * P * (R - 1) / R
                rows.append((curvature, mode, placement, P, statistics.mean(per_step), min(per_step), max(per_step),
                             ddp))
    if dist.get_rank() == 0:
        print(f"{R} ranks, MLP {WIDTHS}, NaturalGradient's default step rule for each curvature, Monte Carlo "
              f"Fisher, float32, {STEPS} steps (its default refresh schedule)")
        print(f"{'curvature':9} {'mode':6} {'placement':9} {'params':>8} {'bytes/step mean':>16} {'min':>10} "
              f"{'max':>10} {'DDP all-reduce':>15} {'ratio':>6}")
        for curvature, mode, placement, P, mean, lo, hi, ddp in rows:
            print(f"{curvature:9} {mode:6} {placement:9} {P:8d} {mean:16.0f} {lo:10.0f} {hi:10.0f} {ddp:15.0f} "
                  f"{mean / ddp:6.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
