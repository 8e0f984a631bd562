r"""K-FAC solves on small batches from the batch's own rows, instead of the assembled gradient.

For a Linear layer the gradient the user's backward leaves is a sum of outer products,
:math:`\bar V = \sum_r b_r \bar a_r^T` over the rows :math:`r` (examples, and positions
for inputs with middle axes), with :math:`b_r` the gradient at the layer's output and
:math:`\bar a_r = [a_r, 1]` its input.  Under the factored Tikhonov inverse
(Martens & Grosse 2015, Sec. 6.3) the K-FAC direction is

.. math:: G_\gamma^{-1}\bar V A_\gamma^{-1} = (b\,G_\gamma^{-1})^T(\bar a\,A_\gamma^{-1}),

:math:`R(\text{out}^2 + \text{in}^2 + \text{out}\cdot\text{in})` multiply-adds instead of
:math:`\text{out}\cdot\text{in}\,(\text{out}+\text{in})`: about three times fewer for a
1024-wide layer at batch 128.  The rows are recorded by hooks on the forward pass (a
reference to the input, and the output gradient when the backward passes it), only
while that pays.

The route is taken only when the gradient in ``.grad`` is the one those rows give: a
random sketch :math:`\bar V v` is compared with :math:`b^T(\bar a v)`, within the rounding
error of computing either (a probabilistic bound in the spirit of Higham & Mary 2019).
Anything else added to or done to ``.grad`` after the backward (a penalty in the loss,
clipping, unscaling, gradient accumulation across steps) fails the check, and that layer
is solved from ``.grad`` as before.  Under ``torch.distributed`` the gradient is the mean
over the ranks, so every rank's rows are gathered first (while the whole batch's rows stay
below the limit) and the checks are agreed over the ranks: all take the same route.
"""
from __future__ import annotations

import zlib
from typing import Dict, List, Optional, Sequence

import torch

from .. import distributed as dd
from ..curvature.blocks import structure
from ..curvature.kron import KronBlock
from ..curvature.layers import rule_for

__all__ = ["RowCapture"]

#: safety factor of the rounding bound of the sketch comparison
_ROUNDING_SAFETY = 8.0


#: the share of the two products' multiply-adds the rows may cost: the route's check (a sketch of the gradient,
#: a few passes over the rows) and the capture of the rows cost the rest.  Measured on a digits classifier
#: (64-256-256-10, batch 128, eigen-adam): at even cost (1.0) the 256-wide layer took the rows and the step
#: took 3.63 ms against 3.32 ms from ``.grad``
_ROW_SHARE = 0.5


def _max_rows(n_out: int, n_in: int) -> int:
    """The largest row count for which the row route costs at most :data:`_ROW_SHARE` of the two products'
    multiply-adds."""
    return int(_ROW_SHARE * n_out * n_in * (n_out + n_in)) // (n_out * n_out + n_in * n_in + n_out * n_in) - 1


def _scale(x: torch.Tensor) -> torch.Tensor:
    """The largest absolute entry of ``x`` (1 where it is 0 or not finite), to square ``x`` without under- or
    overflow; a tensor, so that reading it needs no synchronisation with the device."""
    m = x.abs().amax()
    return torch.where(torch.isfinite(m) & (m > 0), m, torch.ones_like(m))


class RowCapture:
    r"""Record the rows :math:`(a_r, b_r)` of Linear layers during the user's forward and backward.

    ``layers`` are ``(path, module, weight_name, bias_name)`` of the candidate layers; a call is recorded when
    its layer rule's rows are the input's own (``rows_are_inputs``: Linear, Hugging Face ``Conv1D``).
    :meth:`record` is called by the forward hook of each layer; :meth:`clear` after every step.
    """

    def __init__(self, layers: Sequence[tuple]):
        self.layers = {path: (mod, w, b) for path, mod, w, b in layers
                       if w is not None and getattr(mod, "weight", None) is not None
                       and mod.weight.dim() == 2}   # a trainable matrix weight; the rule decides at each call
        self.limit = {path: _max_rows(mod.weight.shape[0], mod.weight.shape[1] + (b is not None))
                      for path, (mod, w, b) in self.layers.items()}
        self.by_weight = {w: path for path, (_, w, _) in self.layers.items()}
        self.calls: Dict[str, List[tuple]] = {}
        self.count: Dict[str, int] = {}
        self.refused: set = set()
        self._sketch: Dict[str, torch.Tensor] = {}
        #: while set, output gradients are not recorded (the optimizer's own backward passes)
        self.paused = False
        #: layers whose last solve came from their rows
        self.used: List[str] = []

    @classmethod
    def of(cls, layers: Sequence) -> "RowCapture":
        """For the recorder's layers (:class:`~infogeo.nn.curvature._backprop.Layer`) with only a weight and bias."""
        return cls([(l.path, l.module, l.params.get("weight"), l.params.get("bias"))
                    for l in layers if set(l.params) <= {"weight", "bias"}])

    def record(self, path: str, args: tuple, kwargs: dict, output) -> None:
        """Keep the input of this call of layer ``path`` and a box its output gradient will fill."""
        if path not in self.layers or path in self.refused:
            return
        a = args[0] if len(args) == 1 and not kwargs else None
        if not isinstance(a, torch.Tensor) or not isinstance(output, torch.Tensor) or not output.requires_grad:
            self._refuse(path)
            return
        rows = a.numel() // max(a.shape[-1], 1)
        self.count[path] = self.count.get(path, 0) + rows
        if self.count[path] > self.limit[path]:   # counted first: the cheapest test, and the usual refusal
            self._refuse(path)   # too many rows for the route to pay; memory stays bounded
            return
        if (torch.is_autocast_enabled(a.device.type)
                or not getattr(rule_for(self.layers[path][0], args, kwargs), "rows_are_inputs", False)):
            self._refuse(path)   # not a Linear-type call on its input's last axis, or in another precision
            return
        box: list = []

        def keep(grad: torch.Tensor) -> None:
            if not self.paused:
                box.append(grad)
        output.register_hook(keep)
        self.calls.setdefault(path, []).append((a.detach(), box))

    def _refuse(self, path: str) -> None:
        self.refused.add(path)
        self.calls.pop(path, None)

    def clear(self) -> None:
        self.calls.clear()
        self.count.clear()
        self.refused.clear()

    # ------------------------------------------------------------ solves
    def _local(self, block: KronBlock, grads: Dict[str, torch.Tensor]) -> Optional[tuple]:
        """``(b, a)``: this process's rows of ``block``'s layer, or ``None`` (no rows, or not a factored block)."""
        if not isinstance(block, KronBlock) or block.weight is None:
            return None
        path = self.by_weight.get(block.weight)
        calls = self.calls.get(path) if path is not None else None
        if not calls:
            return None
        dtype = grads[block.weight].dtype
        bs, as_ = [], []
        for a, box in calls:
            if box:   # a call the backward did not pass contributed nothing to the gradient
                b = box[0] if len(box) == 1 else sum(box)
                bs.append(b.reshape(-1, b.shape[-1]).to(dtype))
                as_.append(a.reshape(-1, a.shape[-1]).to(dtype))
        if not bs:
            return None
        return (bs[0] if len(bs) == 1 else torch.cat(bs)), (as_[0] if len(as_) == 1 else torch.cat(as_))

    def _gathered(self, blocks, local: List[Optional[tuple]], device: torch.device) -> List[Optional[tuple]]:
        r"""Under ``torch.distributed``: every rank's rows of the layers all ranks have rows of, within the limit.

        Data-parallel gradients are the mean over the ranks, :math:`\bar V = \frac1W\sum_w b_w^T \bar a_w`,
        so the gathered output gradients are divided by :math:`W`.  The rows are padded to the
        largest count and exchanged in one all-gather per dtype (after one of the counts).
        """
        W = dd.world_size()
        mine = torch.tensor([0 if r is None else r[0].shape[0] for r in local], device=device)
        counts = [c[0].tolist() for c in dd.all_gather([mine])]   # by rank, then block
        out: List[Optional[tuple]] = [None] * len(blocks)
        send, where = [], []
        for i, (block, r) in enumerate(zip(blocks, local)):
            per_rank = [c[i] for c in counts]
            if r is None or min(per_rank) == 0 or sum(per_rank) > self.limit[self.by_weight[block.weight]]:
                continue
            m = max(per_rank)
            send += [torch.nn.functional.pad(t, (0, 0, 0, m - t.shape[0])) for t in r]
            where.append((i, per_rank))
        if not where:
            return out
        parts = dd.all_gather(send)
        for j, (i, per_rank) in enumerate(where):
            b = torch.cat([parts[w][2 * j][:per_rank[w]] for w in range(W)]) / W
            a = torch.cat([parts[w][2 * j + 1][:per_rank[w]] for w in range(W)])
            out[i] = (b, a)
        return out

    def plan(self, blocks, grads: Dict[str, torch.Tensor]) -> List[Optional[tuple]]:
        """Per block, the rows ``(b, a)`` that give its gradient in ``grads`` (gathered over the ranks under
        ``torch.distributed``), else ``None``; the layers' checks are read together (one synchronisation)."""
        blocks = [structure(b) for b in blocks]   # (a block another rank holds: its layer's rows all the same)
        local = [self._local(block, grads) for block in blocks]
        rows = self._gathered(blocks, local, next(iter(grads.values())).device) if dd.world_size() > 1 else local
        checks = [self._agrees(self.by_weight[blk.weight], blk, grads, *r) for blk, r in zip(blocks, rows)
                  if r is not None]
        if checks:
            flags = torch.stack([c.to(checks[0].device) for c in checks]).to(torch.int32)
            if dd.world_size() > 1:   # the same decision on every rank, whatever the rounding
                flags = dd.all_reduce_min(flags)
            agree = iter(flags.tolist())
            rows = [r if r is not None and next(agree) else None for r in rows]
        self.used = [self.by_weight[b.weight] for b, r in zip(blocks, rows) if r is not None]
        return rows

    def _agrees(self, path: str, block: KronBlock, grads, b: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        r"""Whether :math:`\bar V v = b^T(\bar a v)` for a random :math:`v`, within rounding (a boolean tensor:
        the layers' checks are read together, one device synchronisation a step)."""
        W = grads[block.weight]
        W = W.T if block.transposed else W.reshape(b.shape[1], -1)
        bias = grads[block.bias] if block.bias is not None else None
        K = W.shape[1] + (bias is not None)
        v = self._sketch.get(path)
        if v is None or v.shape[0] != K or v.dtype != W.dtype or v.device != W.device:
            gen = torch.Generator().manual_seed(zlib.crc32(path.encode()))
            v = self._sketch[path] = torch.randn(K, generator=gen, dtype=W.dtype).to(W.device)
        vw, v2 = v[:W.shape[1]], v[:W.shape[1]] ** 2
        lhs = W @ vw
        av = a @ vw
        sa = _scale(a)   # the squares below are of rows divided by their largest entry: no underflow, no overflow
        a2v2 = ((a / sa) ** 2) @ v2
        Wv_bound = torch.linalg.vector_norm(W, dim=1) * v.abs().max()   # >= sqrt(sum_j W_ij^2 v_j^2), no copy of W
        if bias is not None:
            lhs = lhs + bias * v[-1]
            av = av + v[-1]
            a2v2 = a2v2 + (v[-1] / sa) ** 2
            Wv_bound = Wv_bound + bias.abs() * v[-1].abs()
        rhs = b.T @ av
        u = torch.finfo(W.dtype).eps / 2
        # rounding of sums of n terms grows like sqrt(n) u times the root sum of squares of the terms
        sb = _scale(b)
        rss = sb * sa * torch.sqrt(((b / sb) ** 2).T @ a2v2)
        tol = _ROUNDING_SAFETY * u * (b.shape[0] + K) ** 0.5 * (rss + Wv_bound)
        return ((lhs - rhs).abs() <= tol).all()

    def solve(self, blocks, grads: Dict[str, torch.Tensor], damping: float,
              plan: Optional[List[Optional[tuple]]] = None) -> Dict[str, torch.Tensor]:
        """Every block's solve, from the rows where they give the gradient (:meth:`plan`), else from ``grads``."""
        plan = self.plan(blocks, grads) if plan is None else plan
        out: Dict[str, torch.Tensor] = {}
        for block, r in zip(blocks, plan):
            out.update(block.solve(grads, damping) if r is None else block.solve_rows(*r, damping))
        return out
