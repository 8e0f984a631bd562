r"""The base class of output metrics :math:`G_z`, and metrics diagonal in :math:`z`."""
from __future__ import annotations

from typing import Optional

import torch

from ...geometry.metric import Metric

__all__ = ["OutputMetric", "DiagonalOutputMetric"]


def _basis_like(z: torch.Tensor) -> torch.Tensor:
    """Identity columns broadcast to ``(m,) + z.shape``: column ``k`` is ``e_k`` at every position."""
    m = z.shape[-1]
    eye = torch.eye(m, dtype=z.dtype, device=z.device)
    return eye.reshape((m,) + (1,) * (z.dim() - 1) + (m,)).expand((m,) + tuple(z.shape))


class OutputMetric(Metric):
    r"""Base class: a metric :math:`G_z` on the last axis of network outputs.

    A subclass implements :meth:`mv` (and, where it has them, :meth:`sqrt`,
    :meth:`sample`, :meth:`position_loss`); :meth:`matrix`, :meth:`sqrt` and
    :meth:`sample` have generic fallbacks built from :meth:`mv`.

    Convention for outputs :math:`z` of shape ``(N, *middle, m)``: the loss of a
    batch is :math:`\mathcal L = \frac1N\sum_n \sum_t \ell(z_{nt}, y_{nt})`, per-position
    losses :math:`\ell` summed over the middle axes (positions :math:`t`) and averaged
    over the :math:`N` examples; :math:`G_z` acts on each position's last axis.

    Parameters
    ----------
    dim : int, optional
        Size :math:`m` of the last output axis, checked by :meth:`check` when given.
    """

    has_matrix = False
    #: human-readable name used in error messages
    name = "output metric"

    def check(self, z: torch.Tensor) -> None:
        """Raise ``ValueError`` if outputs ``z`` (shape ``(N, ..., m)``) do not fit this metric."""
        if not isinstance(z, torch.Tensor):
            raise TypeError(f"the model must return a tensor for the {self.name}, got {type(z).__name__}; "
                            f"output_fn= picks it (e.g. output_fn=lambda out: out.logits)")
        if z.dim() < 2:
            raise ValueError(f"the {self.name} needs outputs of shape (N, ..., m) with a batch axis, "
                             f"got shape {tuple(z.shape)}")
        if not z.is_floating_point():
            raise ValueError(f"the {self.name} needs floating-point outputs, got {z.dtype}")
        if self.dim is not None and z.shape[-1] != self.dim:
            raise ValueError(f"the {self.name} expects outputs with last axis of size {self.dim}, "
                             f"got outputs of shape {tuple(z.shape)}")

    # -------------------------------------------------------------- views
    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        r""":math:`G_z v` on the last axis (leading axes broadcast)."""
        raise NotImplementedError(f"{type(self).__name__} does not define a metric-vector product")

    def matrix(self, z: torch.Tensor) -> torch.Tensor:
        r"""Dense :math:`G_z`, shape ``z.shape + (m,)`` (from :meth:`mv` on basis vectors)."""
        cols = self.mv(z.unsqueeze(0), _basis_like(z))  # (m, ..., m): column k = G e_k
        return cols.movedim(0, -1)

    def sqrt(self, z: torch.Tensor) -> torch.Tensor:
        r"""Columns :math:`s_k` with :math:`G_z = \sum_k s_k s_k^T`, shape ``(K,) + z.shape``.

        Generic fallback: eigendecomposition :math:`G_z = Q\Lambda Q^T`,
        :math:`s_k = \sqrt{\lambda_k} q_k` (negative eigenvalues from round-off are clipped).
        """
        lam, Q = torch.linalg.eigh(self.matrix(z))
        cols = Q * lam.clamp_min(0).sqrt().unsqueeze(-2)  # (..., m, K)
        return cols.movedim(-1, 0)

    def sample(self, z: torch.Tensor, samples: int = 1,
               generator: Optional[torch.Generator] = None) -> torch.Tensor:
        r"""``samples`` independent draws :math:`s` with :math:`\mathbb E[ss^T] = G_z`, shape ``(samples,) + z.shape``.

        Generic fallback: :math:`s = \sum_k \epsilon_k s_k` with :math:`\epsilon \sim N(0, I)`,
        drawn independently at every example and position (the Monte Carlo curvatures
        back-propagate all positions at once and need the cross-position terms to vanish
        in expectation).
        """
        S = self.sqrt(z)
        eps = torch.randn((samples, S.shape[0]) + tuple(z.shape[:-1]) + (1,), dtype=z.dtype, device=z.device,
                          generator=generator)
        return (eps * S.unsqueeze(0)).sum(1)

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        r"""Per-position negative log-likelihood :math:`\ell(z_{nt}, y_{nt})`, shape ``z.shape[:-1]``."""
        raise NotImplementedError(f"{type(self).__name__} is not a likelihood: it has no loss; "
                                  "the empirical Fisher needs one")

    def loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        r"""Per-example loss :math:`\sum_t \ell(z_{nt}, y_{nt})`, shape ``(N,)`` (summed over the middle axes)."""
        return self.position_loss(z, targets).reshape(z.shape[0], -1).sum(1)

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        r"""Gradient of the per-example loss in :math:`z`, shape ``z.shape`` (autodiff fallback)."""
        zz = z.detach().requires_grad_(True)
        with torch.enable_grad():
            return torch.autograd.grad(self.loss(zz, targets).sum(), zz)[0]

    def empirical_factor(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        r"""The empirical Fisher's column per position, shape ``(1,) + z.shape``.

        :math:`s_{nt} = \nabla_{z_{nt}}\ell(z_{nt}, y_{nt})`, so that the pullback of
        :math:`s s^T` is :math:`\frac1N\sum_{n,t} J_{nt}^T \nabla\ell_{nt}\nabla\ell_{nt}^T J_{nt}`
        (one outer product per position, as for the Fisher and the Gauss-Newton matrix).
        """
        return self.loss_grad(z, targets).unsqueeze(0)

    #: whether a position whose loss gradient is exactly zero has no curvature either (a likelihood whose Hessian
    #: vanishes where its gradient does, at saturation), so that a zero gradient marks a position the loss ignores
    flat_means_ignored: bool = False

    def bind(self, z: torch.Tensor, targets: Optional[torch.Tensor] = None) -> "OutputMetric":
        """This metric for one batch of outputs (shape ``z.shape``) and its targets.

        Metrics that depend on the batch (the reduction of a torch loss, its ignored
        positions) return a copy fitted to it; all others return ``self``.
        """
        return self

    def check_targets(self, z: torch.Tensor, targets: torch.Tensor) -> None:
        if tuple(targets.shape) != tuple(z.shape):
            raise ValueError(f"targets for the {self.name} must have the outputs' shape {tuple(z.shape)}, "
                             f"got {tuple(targets.shape)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class DiagonalOutputMetric(OutputMetric):
    """An output metric that is diagonal in :math:`z`: subclasses give :meth:`diag`; the rest follows."""

    def diag(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.diag(z) * v

    def matrix(self, z: torch.Tensor) -> torch.Tensor:
        return torch.diag_embed(self.diag(z))

    def sqrt(self, z: torch.Tensor) -> torch.Tensor:
        return self.diag(z).sqrt().movedim(-1, 0).unsqueeze(-1) * _basis_like(z)
