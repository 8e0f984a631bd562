r"""Dense float64 references for a network's curvature, independent of the library's code paths.

Convention (the library's): outputs have shape ``(N, *middle, C)``; each of the
``N * prod(middle)`` positions carries its own loss :math:`\ell(z_{nt}, y_{nt})`;
losses are summed over the middle axes and averaged over ``N``.  So, with
:math:`J_{nt} = \partial z_{nt} / \partial\theta` and the per-position output
Hessian :math:`H_{nt}`,

.. math:: G = \frac1N \sum_n \sum_t J_{nt}^T H_{nt} J_{nt}.

The empirical Fisher and the Monte Carlo estimators replace :math:`H_{nt}` by
:math:`g_{nt} g_{nt}^T` (loss gradient) or by :math:`\frac1S\sum_k s_{knt}s_{knt}^T`.
Everything here is written from these definitions with ``torch.func.jacrev``
and closed-form output Hessians; nothing from ``infogeo`` is imported.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch.func import functional_call, jacrev


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative error ``|a - b| / |b|`` (Frobenius)."""
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def trainable(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def jacobian(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(J, z)``: ``J`` of shape ``(N, T, C, P)`` (positions flattened, parameters in order), ``z`` ``(N, T, C)``."""
    p = trainable(model)
    inputs = tuple(inputs)
    J = jacrev(lambda q: functional_call(model, q, inputs))(p)
    z = functional_call(model, p, inputs).detach()
    N, C = z.shape[0], z.shape[-1]
    Jm = torch.cat([J[n].reshape(z.numel(), -1) for n in p], dim=-1)
    return Jm.reshape(N, -1, C, Jm.shape[-1]), z.reshape(N, -1, C)


def output_hessian(loss: str, z: torch.Tensor, variance: float = 1.0) -> torch.Tensor:
    """Per-position Hessian of the per-position loss in the logits, shape ``z.shape + (C,)``."""
    if loss == "categorical":
        p = torch.softmax(z, -1)
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)
    if loss == "bernoulli":
        s = torch.sigmoid(z)
        return torch.diag_embed(s * (1 - s))
    if loss in ("euclidean", "gaussian"):
        scale = 1.0 if loss == "euclidean" else 1.0 / variance
        return scale * torch.eye(z.shape[-1], dtype=z.dtype).expand(tuple(z.shape) + (z.shape[-1],))
    raise ValueError(loss)


def loss_gradient(loss: str, z: torch.Tensor, targets: torch.Tensor, variance: float = 1.0) -> torch.Tensor:
    """Per-position gradient of the per-position loss in the logits (closed forms), shape of ``z``."""
    if loss == "categorical":
        t = targets if targets.is_floating_point() else torch.nn.functional.one_hot(targets, z.shape[-1]).to(z)
        return torch.softmax(z, -1) - t
    if loss == "bernoulli":
        return torch.sigmoid(z) - targets
    if loss in ("euclidean", "gaussian"):
        scale = 1.0 if loss == "euclidean" else 1.0 / variance
        return scale * (z - targets)
    raise ValueError(loss)


def pullback(J: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    r""":math:`\frac1N\sum_{n,t} J_{nt}^T H_{nt} J_{nt}` for ``J`` ``(N, T, C, P)``, ``H`` ``(N, T, C, C)``."""
    return torch.einsum("ntcp,ntcd,ntdq->pq", J, H, J) / J.shape[0]


def ggn(model: torch.nn.Module, inputs, loss: str, variance: float = 1.0) -> torch.Tensor:
    """Exact GGN / Fisher, ``(P, P)``."""
    J, z = jacobian(model, inputs)
    return pullback(J, output_hessian(loss, z, variance))


def empirical_fisher(model: torch.nn.Module, inputs, loss: str, targets: torch.Tensor,
                     variance: float = 1.0) -> torch.Tensor:
    """Empirical Fisher with one row per position, ``(P, P)``."""
    J, z = jacobian(model, inputs)
    g = loss_gradient(loss, z, _targets_like(targets, z), variance)
    return pullback(J, g.unsqueeze(-1) * g.unsqueeze(-2))


def _targets_like(targets: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    N, T, C = z.shape
    if targets.is_floating_point() and targets.numel() == z.numel():
        return targets.reshape(N, T, C)
    return targets.reshape(N, T)


def from_columns(model: torch.nn.Module, inputs, S: torch.Tensor) -> torch.Tensor:
    r""":math:`\frac1N\sum_{k,n,t} J_{nt}^T s_{knt} s_{knt}^T J_{nt}` for columns ``S`` ``(K, N, *middle, C)``."""
    J, z = jacobian(model, inputs)
    S = S.reshape((S.shape[0],) + tuple(z.shape))
    H = torch.einsum("kntc,kntd->ntcd", S, S)
    return pullback(J, H)


def blocks(M: torch.Tensor, model: torch.nn.Module, groups: List[List[str]]) -> List[torch.Tensor]:
    """Sub-blocks of ``M`` (parameters in ``named_parameters`` order) for groups of parameter names."""
    p = trainable(model)
    offsets, o = {}, 0
    for n, t in p.items():
        offsets[n] = torch.arange(o, o + t.numel())
        o += t.numel()
    out = []
    for g in groups:
        idx = torch.cat([offsets[n] for n in g])
        out.append(M[idx][:, idx])
    return out


def module_groups(model: torch.nn.Module) -> List[List[str]]:
    """Trainable parameter names grouped by the module that owns them directly."""
    groups: Dict[str, List[str]] = {}
    for n in trainable(model):
        groups.setdefault(n.rpartition(".")[0], []).append(n)
    return list(groups.values())


def block_diagonal(M: torch.Tensor, model: torch.nn.Module, groups: Optional[List[List[str]]] = None) -> torch.Tensor:
    """``M`` with every entry outside the per-module blocks set to zero."""
    groups = module_groups(model) if groups is None else groups
    p = trainable(model)
    names = list(p)
    owner = torch.cat([torch.full((p[n].numel(),), next(i for i, g in enumerate(groups) if n in g))
                       for n in names])
    return M * (owner.unsqueeze(0) == owner.unsqueeze(1))
