r"""The damped quadratic model of the loss over a span of directions (Martens & Grosse 2015, Sec. 6–7).

.. math:: M(\delta) = g^T\delta + \tfrac12\,\delta^T (G + \lambda I)\,\delta

with the *exact* pullback metric :math:`G` of the batch, restricted to
:math:`\delta = c_1 d_1 + c_2 d_2`: since :math:`u^TGv = (Ju)^T G_z (Jv)/N`, the
:math:`2\times2` matrix :math:`H_{ij} = (Jd_i)^TG_z(Jd_j)/N + \lambda d_i^Td_j` needs one
Jacobian-vector product per direction (on one
:class:`~infogeo.geometry.linearization.Linearization` of the batch, in forward mode), and the minimiser solves :math:`Hc = -b`,
:math:`b_i = g^Td_i`.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch

from .. import distributed as dd
from ..space import ParameterSpace

__all__ = ["fit", "step"]

Params = Dict[str, torch.Tensor]


def fit(space: ParameterSpace, grads: Params, dirs: List[Params], damping: float
        ) -> Optional[Tuple[List[float], torch.Tensor, torch.Tensor]]:
    r"""Coefficients :math:`c` minimising :math:`M(\sum_i c_i d_i)`, with ``b`` and ``H`` (float64).

    One direction, or two nearly parallel ones, give the 1-D minimiser (the second
    coefficient 0).  Returns ``None`` when the model is not finite or not convex along ``d_1``.
    """
    names = list(grads)
    flat = lambda d: torch.cat([d[n].reshape(-1) for n in names])  # noqa: E731
    # a few products and no J^T u: one forward-mode pass per direction (z comes with them);
    # the model's buffers untouched
    lin = space.linearize(mode="forward")
    Jd = lin.jvp_many(dirs).detach()                       # (m, N, ..., k)
    z = lin.outputs.detach()
    del lin
    GJd = space.output_metric.mv(z.unsqueeze(0), Jd)
    m, N = len(dirs), space.batch_size
    D = torch.stack([flat(d) for d in dirs])
    JGJ = Jd.reshape(m, -1) @ GJd.reshape(m, -1).T / N
    if dd.world_size() > 1:   # the metric of the union batch (the gradients are already the ranks' mean)
        JGJ = dd.all_reduce_mean([JGJ])[0]
    H = (JGJ + damping * (D @ D.T)).double().cpu()
    H = 0.5 * (H + H.T)
    b = (D @ flat(grads)).double().cpu()
    h, bb = H.tolist(), b.tolist()                        # the 2x2 algebra in Python floats: no tiny-op overhead
    if not all(math.isfinite(x) for x in bb + sum(h, [])):
        return None
    det = h[0][0] * h[1][1] - h[0][1] ** 2 if m == 2 else 0.0
    if m == 2 and det > 1e-12 * h[0][0] * h[1][1]:
        c = [(-bb[0] * h[1][1] + bb[1] * h[0][1]) / det, (-bb[1] * h[0][0] + bb[0] * h[0][1]) / det]
    elif h[0][0] > 0:
        c = [-bb[0] / h[0][0]] + [0.0] * (m - 1)
    else:
        return None
    return c, b, H


def step(space: ParameterSpace, grads: Params, delta: Params, previous: Optional[Params], damping: float,
         kl_clip: Optional[float]) -> Optional[Tuple[Params, float]]:
    r"""The step :math:`c_1\Delta + c_2 s_\text{prev}` minimising :math:`M` over the span of the scaled direction
    ``delta`` (:math:`\Delta`) and the previous step, shrunk so that :math:`\tfrac12 c^THc \le` ``kl_clip``;
    returns it with :math:`M` at it (the predicted change of the loss), or ``None`` if :func:`fit` finds no
    finite convex model."""
    dirs = [delta] + ([previous] if previous is not None else [])
    found = fit(space, grads, dirs, damping)
    if found is None:
        return None
    c, b, H = found
    def curv(c):
        return sum(c[i] * c[j] * float(H[i, j]) for i in range(len(c)) for j in range(len(c)))
    q = curv(c)
    if kl_clip is not None and q > kl_clip:
        c = [ci * math.sqrt(kl_clip / q) for ci in c]
    decrease = sum(ci * float(bi) for ci, bi in zip(c, b)) + 0.5 * curv(c)
    steps = {n: c[0] * delta[n] + (c[1] * dirs[1][n] if len(c) > 1 and c[1] else 0.0) for n in delta}
    return steps, decrease
