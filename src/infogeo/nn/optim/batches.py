"""The batches a step's curvature is built on, and the parameter spaces on them.

The curvature kinds built by a forward of their own (``dense``, ``implicit``) record nothing during the user's forward: the step runs the model again on the batch.  That batch is
each one the user's backward reached since the last step, with the positions its loss kept (read off its gradient:
:class:`~infogeo.nn.output_metrics.ignored.KeptPositions`).  Micro-batches accumulated before ``step()`` give the
curvature of their union (pooled by batch size, as the recorded kinds pool theirs), and a forward whose output is
never back-propagated (monitoring with autograd enabled) is no part of the step.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .. import distributed as dd
from .._layers import training_with_dropout
from ..batch import Batch
from ..output_metrics.base import OutputMetric
from ..output_metrics.ignored import KeptPositions
from ..space import ParameterSpace

__all__ = ["BatchSpaces", "BackpropagatedBatches", "empty_batch", "gradients_reset"]


class BatchSpaces:
    """The parameter spaces of the model on its batches, one kept per batch signature and re-pointed at new data of
    the same shapes, so that the output-shape probe and the checks run once per signature, not every step."""

    def __init__(self, module: torch.nn.Module, names: List[str], output_metric: Any, *, cg_max_iter: int,
                 output_fn: Optional[Callable], implicit: bool):
        self.module, self.names, self.output_metric = module, names, output_metric
        self.cg_max_iter, self.output_fn, self.implicit = cg_max_iter, output_fn, implicit
        self._kept: Dict[tuple, ParameterSpace] = {}

    def get(self, inputs: Any, targets: Optional[torch.Tensor] = None, fresh: bool = False) -> ParameterSpace:
        """The space on the batch ``inputs`` (``targets``, or ``fresh``: one of its own, not kept)."""
        if inputs is None:
            raise ValueError("the preconditioner has seen no batch: run the model's forward (with autograd) "
                             "and backward before step(), or pass inputs=x")
        batch = Batch.of(inputs)
        key = batch.signature()
        space = self._kept.get(key)
        if space is None or targets is not None or fresh:
            with training_with_dropout():
                space = ParameterSpace(self.module, self.output_metric, data=batch, targets=targets,
                                       params=self.names, cg_max_iter=self.cg_max_iter, output_fn=self.output_fn)
            if targets is None and not fresh:
                self._kept = {key: space}
            return space
        space.batch, space._outputs = batch, None
        space.metric.clear_cache()  # type: ignore[attr-defined]  # the space's NetworkMetric
        return space

    def let_go(self, space: ParameterSpace) -> None:
        """The kept space lets go of its batch once the statistics are built (else held until the next refresh), its
        tensors kept on the meta device (a stray use fails); an implicit curvature is the space itself."""
        if not self.implicit and any(s is space for s in self._kept.values()):
            space.batch = space.batch.map(lambda a: a.to("meta"))
            space._outputs = None
            space.metric.clear_cache()  # type: ignore[attr-defined]  # a linearisation holds the batch's graph


class BackpropagatedBatches:
    """The inputs of the forwards a backward reached since the last step, each with its kept positions."""

    def __init__(self, metric: OutputMetric):
        self._metric = metric
        self.entries: List[Tuple[Batch, KeptPositions]] = []

    def read(self, z: torch.Tensor, grad: torch.Tensor, inputs: Batch) -> None:
        """Called from the user's backward with the outputs, the loss gradient at them and that forward's inputs."""
        kept = KeptPositions(self._metric)
        kept.read(z, grad)
        self.entries.append((inputs, kept))

    def clear(self) -> None:
        self.entries = []

    def pooled(self, build: Callable[[Batch, KeptPositions, bool], Tuple[Any, int]]) -> Tuple[Any, int]:
        """The statistics of the union of the batches, ``build(inputs, kept, alone)`` giving each one's and its
        size (``alone``: the only one, which may reuse a kept parameter space; else each needs its own, as an
        implicit curvature stays bound to its batch)."""
        pooled, total = None, 0
        for inputs, kept in self.entries:
            new, n = build(inputs, kept, len(self.entries) == 1)
            pooled, total = (new, n) if pooled is None else (pooled.pooled(new, total, n), total + n)
        return pooled, total


def gradients_reset(params: Sequence[torch.nn.Parameter]) -> bool:
    """Whether every parameter's gradient is ``None`` (``zero_grad()``, torch's default ``set_to_none=True``): what
    was recorded from earlier backward passes belongs to gradients no step will take (a batch skipped by the loop or
    by a ``GradScaler`` overflow, an adversarial example's clean pass)."""
    return bool(params) and all(p.grad is None for p in params)


def empty_batch() -> ValueError:
    """The error of a batch of 0 examples, with advice that does not deadlock a process group."""
    if dd.world_size() > 1:   # skipping the forward on one rank would leave the gradients' collectives waiting
        return ValueError("this rank's batch is empty (0 examples): a curvature needs at least one example on every "
                          "rank; give every rank examples at every step (DistributedSampler pads the last batch; or "
                          "drop_last=True), as the gradients' all-reduce (DDP) or reduce-scatter (FSDP2) needs every "
                          "rank's backward")
    return ValueError("the batch is empty (0 examples): a curvature needs at least one example; skip empty "
                      "batches before the forward pass")
