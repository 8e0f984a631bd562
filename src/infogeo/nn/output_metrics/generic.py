r"""Output metrics given by the user: a divergence, a product, a sampler, or fixed factor columns."""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch

from ...divergences import Divergence
from .base import OutputMetric

__all__ = ["DivergenceOutput", "HessianOutput", "SampledOutput", "FactorOutput"]


def _flat_apply(fn: Callable, z: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """vmap a per-vector function over all leading axes of ``z`` (and of ``others``, broadcast)."""
    shape = torch.broadcast_shapes(z.shape, *(o.shape for o in others))
    m = shape[-1]
    args = [a.expand(shape).reshape(-1, m) for a in (z,) + others]
    out = torch.func.vmap(fn)(*args)
    return out.reshape(tuple(shape[:-1]) + tuple(out.shape[1:]))


class DivergenceOutput(OutputMetric):
    r"""The metric of any output dissimilarity :math:`\rho(u, z)`: :math:`G_z = \nabla^2_u\rho(u, z)|_{u=z}`.

    ``DivergenceOutput(ig.Bregman(phi))`` gives :math:`\nabla^2\phi(z)` (the Hessian metric of a Bregman divergence, Amari 2016);
    any :class:`~infogeo.divergences.Divergence` (or function ``rho(u, w)`` of two
    vectors written with torch ops) works, differentiated by ``torch.func``.
    """

    name = "divergence output metric"

    def __init__(self, divergence: Union[Divergence, Callable[[Any, Any], Any]], dim: Optional[int] = None):
        super().__init__(dim)
        self.divergence = Divergence.from_function(divergence)

    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _flat_apply(lambda zi, vi: self.divergence.hvp_at_diagonal(zi, vi), z, v)

    def matrix(self, z: torch.Tensor) -> torch.Tensor:
        return _flat_apply(lambda zi: torch.func.hessian(lambda u: self.divergence(u, zi))(zi), z)

    def __repr__(self):
        return f"DivergenceOutput({self.divergence!r})"


class HessianOutput(OutputMetric):
    r"""A user-defined metric given by its product: ``hvp(z, v)`` returns :math:`G_z v`.

    ``hvp`` receives outputs and vectors of the same (broadcast) shape ``(..., m)``.
    A typical choice is the Hessian of a convex loss in the outputs.
    """

    name = "user-defined output metric"

    def __init__(self, hvp: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], dim: Optional[int] = None):
        super().__init__(dim)
        self._hvp = hvp

    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        shape = torch.broadcast_shapes(z.shape, v.shape)
        out = self._hvp(z.expand(shape), v.expand(shape))
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"the user's output hvp returned shape {tuple(out.shape)}, expected {tuple(shape)}")
        return out


class SampledOutput(OutputMetric):
    r"""A metric known only through a sampler: ``sampler(z, generator)`` returns :math:`s` with
    :math:`\mathbb E[ss^T] = G_z` (e.g. the score of a target drawn from the model).

    Supports only Monte Carlo curvature (``method="mc"``).
    """

    name = "sampled output metric"

    def __init__(self, sampler: Callable[..., torch.Tensor], dim: Optional[int] = None):
        super().__init__(dim)
        self.sampler = sampler

    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("an output metric given by a sampler supports only Monte Carlo curvature "
                                  "(method='mc'); give an hvp (HessianOutput) for exact products")

    def sqrt(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("an output metric given by a sampler supports only Monte Carlo curvature "
                                  "(method='mc')")

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        out = torch.stack([self.sampler(z, generator) for _ in range(samples)])
        if tuple(out.shape[1:]) != tuple(z.shape):
            raise ValueError(f"the sampler returned shape {tuple(out.shape[1:])}, expected the outputs' shape {tuple(z.shape)}")
        return out


class FactorOutput(OutputMetric):
    r""":math:`G_z = \sum_k s_k s_k^T` for fixed columns ``factors`` of shape ``(K, N, ..., m)``.

    The Monte Carlo Fisher (sampled columns scaled by :math:`1/\sqrt S`) and the
    empirical Fisher (one column: the loss gradient) are of this form.
    """

    name = "factor output metric"

    def __init__(self, factors: torch.Tensor):
        super().__init__(None)
        self.factors = factors

    def check(self, z: torch.Tensor) -> None:
        super().check(z)
        if tuple(self.factors.shape[1:]) != tuple(z.shape):
            raise ValueError(f"factors of shape {tuple(self.factors.shape)} do not fit outputs of shape {tuple(z.shape)}")

    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        S = self.factors
        lead = v.dim() - (S.dim() - 1)
        Sx = S.reshape(S.shape[:1] + (1,) * lead + tuple(S.shape[1:]))
        return (Sx * (Sx * v).sum(-1, keepdim=True)).sum(0)

    def sqrt(self, z: torch.Tensor) -> torch.Tensor:
        return self.factors
