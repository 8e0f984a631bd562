r"""Metrics on a network's outputs, :math:`G_z`, to be pulled back to parameters.

A network maps parameters :math:`w` to outputs :math:`z_n = f(w, x_n)` for each
example of a batch.  An :class:`OutputMetric` is a Riemannian metric on the output
space (seed 000, Sec. 5): its pullback :math:`G = \frac1N\sum_n J_n^T G_z(z_n) J_n`
(Eq. 29) is the Gauss-Newton matrix for the Euclidean metric and the network's
Fisher information for a likelihood's Fisher metric (seed 004, Eqs. 39–48).

Outputs have shape ``(N, ..., m)``: the metric acts on the last axis and is
independent across the middle axes (e.g. the positions of a sequence model).
Every method works on any leading shape, so ``mv(z, v)`` broadcasts.

Each metric offers up to three views of :math:`G_z`:

* ``mv(z, v)`` — the product :math:`G_z v` (implicit curvature);
* ``sqrt(z)`` — columns :math:`s_k` with :math:`G_z = \sum_k s_k s_k^T`, stacked on a
  new leading axis (exact diagonal, K-FAC and block curvature: backpack's
  "sqrt-Hessian" propagation);
* ``sample(z, samples, generator)`` — random :math:`s` with
  :math:`\mathbb E[s s^T] = G_z` (the Pullback Sampling Trick, Eqs. 31–32; for a
  likelihood :math:`s = \nabla_z(-\log r(t\mid z))` with :math:`t \sim r(\cdot\mid z)`,
  seed 000's ``*_fisher_metric_sample``).

Likelihood metrics also give ``loss(z, t)`` and ``loss_grad(z, t)``, the per-example
negative log-likelihood and its gradient, for the empirical Fisher (Eq. 33).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Union

import torch

from ..divergences import Divergence
from ..geometry.metric import Metric

__all__ = ["OutputMetric", "EuclideanOutput", "CategoricalFisher", "BernoulliFisher", "GaussianFisher",
           "HeteroscedasticGaussianFisher", "DivergenceOutput", "HessianOutput", "SampledOutput",
           "FactorOutput", "output_metric"]


def _basis_like(z: torch.Tensor) -> torch.Tensor:
    """Identity columns broadcast to ``(m,) + z.shape``: column ``k`` is ``e_k`` at every position."""
    m = z.shape[-1]
    eye = torch.eye(m, dtype=z.dtype, device=z.device)
    return eye.reshape((m,) + (1,) * (z.dim() - 1) + (m,)).expand((m,) + tuple(z.shape))


class OutputMetric(Metric):
    r"""Base class: a metric :math:`G_z` on the last axis of network outputs.

    A subclass implements :meth:`mv` (and, where it has them, :meth:`sqrt`,
    :meth:`sample`, :meth:`loss`); :meth:`matrix`, :meth:`sqrt` and
    :meth:`sample` have generic fallbacks built from :meth:`mv`.

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
            raise TypeError(f"the model must return a tensor for the {self.name}, got {type(z).__name__}")
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

        Generic fallback: :math:`s = \sum_k \epsilon_k s_k` with :math:`\epsilon \sim N(0, I)`.
        """
        S = self.sqrt(z)
        eps = torch.randn((samples, S.shape[0]) + (1,) * z.dim(), dtype=z.dtype, device=z.device,
                          generator=generator)
        return (eps * S.unsqueeze(0)).sum(1)

    def loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-example negative log-likelihood, shape ``(N,)`` (summed over middle axes)."""
        raise NotImplementedError(f"{type(self).__name__} is not a likelihood: it has no loss; "
                                  "the empirical Fisher needs one")

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        r"""Gradient of the per-example loss in :math:`z`, shape ``z.shape`` (autodiff fallback)."""
        zz = z.detach().requires_grad_(True)
        with torch.enable_grad():
            return torch.autograd.grad(self.loss(zz, targets).sum(), zz)[0]

    def check_targets(self, z: torch.Tensor, targets: torch.Tensor) -> None:
        if tuple(targets.shape) != tuple(z.shape):
            raise ValueError(f"targets for the {self.name} must have the outputs' shape {tuple(z.shape)}, "
                             f"got {tuple(targets.shape)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EuclideanOutput(OutputMetric):
    r"""Euclidean metric :math:`G_z = cI` on outputs: the pullback is the Gauss-Newton matrix.

    As a likelihood it is the Gaussian with fixed variance :math:`1/c`:
    loss :math:`\tfrac c2\|z - t\|^2` (the constant is dropped).
    """

    name = "Euclidean output metric"

    def __init__(self, scale: float = 1.0, dim: Optional[int] = None):
        super().__init__(dim)
        if not scale > 0:
            raise ValueError(f"the Euclidean output metric needs scale > 0, got {scale}")
        self.scale = float(scale)

    def mv(self, z, v):
        return self.scale * v

    def matrix(self, z):
        return self.scale * torch.eye(z.shape[-1], dtype=z.dtype, device=z.device).expand(tuple(z.shape) + (z.shape[-1],))

    def sqrt(self, z):
        return math.sqrt(self.scale) * _basis_like(z)

    def sample(self, z, samples=1, generator=None):
        return math.sqrt(self.scale) * torch.randn((samples,) + tuple(z.shape), dtype=z.dtype, device=z.device,
                                                   generator=generator)

    def loss(self, z, targets):
        self.check_targets(z, targets)
        return 0.5 * self.scale * ((z - targets) ** 2).reshape(z.shape[0], -1).sum(1)

    def loss_grad(self, z, targets):
        self.check_targets(z, targets)
        return self.scale * (z - targets)

    def __repr__(self):
        return f"EuclideanOutput(scale={self.scale})"


class GaussianFisher(EuclideanOutput):
    r"""Fisher metric of :math:`N(z, \sigma^2 I)` in its mean: :math:`G_z = I/\sigma^2`."""

    name = "Gaussian Fisher metric"

    def __init__(self, variance: float = 1.0, dim: Optional[int] = None):
        if not variance > 0:
            raise ValueError(f"the Gaussian Fisher metric needs variance > 0, got {variance}")
        super().__init__(1.0 / variance, dim)
        self.variance = float(variance)

    def __repr__(self):
        return f"GaussianFisher(variance={self.variance})"


class CategoricalFisher(OutputMetric):
    r"""Fisher metric of the categorical distribution with logits :math:`z`.

    .. math:: G_z = \operatorname{diag}(p) - pp^T,\qquad p = \operatorname{softmax}(z),

    which is also the Hessian of the cross-entropy in :math:`z` (so the true Fisher
    equals the generalized Gauss-Newton matrix).  Square-root columns
    :math:`s_c = \sqrt{p_c}(e_c - p)`; samples :math:`p - e_t`, :math:`t\sim p`.
    """

    name = "categorical Fisher metric"

    def check(self, z):
        super().check(z)
        if z.shape[-1] < 2:
            raise ValueError(f"the categorical Fisher metric needs logits with at least 2 classes on the "
                             f"last axis, got outputs of shape {tuple(z.shape)}")

    def mv(self, z, v):
        p = torch.softmax(z, dim=-1)
        pv = p * v
        return pv - p * pv.sum(-1, keepdim=True)

    def matrix(self, z):
        p = torch.softmax(z, dim=-1)
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)

    def sqrt(self, z):
        p = torch.softmax(z, dim=-1)
        return p.sqrt().movedim(-1, 0).unsqueeze(-1) * (_basis_like(z) - p)

    def sample(self, z, samples=1, generator=None):
        p = torch.softmax(z, dim=-1)
        flat = p.reshape(-1, p.shape[-1])
        t = torch.multinomial(flat, samples, replacement=True, generator=generator)  # (rows, samples)
        onehot = torch.nn.functional.one_hot(t.T, p.shape[-1]).to(p.dtype).reshape((samples,) + tuple(p.shape))
        return p - onehot

    def check_targets(self, z, targets):
        if targets.dtype in (torch.long, torch.int, torch.int32, torch.int64):
            if tuple(targets.shape) != tuple(z.shape[:-1]):
                raise ValueError(f"class-index targets must have shape {tuple(z.shape[:-1])}, got {tuple(targets.shape)}")
            if targets.numel() and (targets.min() < 0 or targets.max() >= z.shape[-1]):
                raise ValueError(f"class-index targets must lie in [0, {z.shape[-1]}), got range "
                                 f"[{int(targets.min())}, {int(targets.max())}]")
        else:
            super().check_targets(z, targets)

    def _onehot(self, z, targets):
        self.check_targets(z, targets)
        if targets.is_floating_point():
            return targets
        return torch.nn.functional.one_hot(targets, z.shape[-1]).to(z.dtype)

    def loss(self, z, targets):
        t = self._onehot(z, targets)
        return -(t * torch.log_softmax(z, dim=-1)).reshape(z.shape[0], -1).sum(1)

    def loss_grad(self, z, targets):
        return torch.softmax(z, dim=-1) - self._onehot(z, targets)


class DiagonalOutputMetric(OutputMetric):
    """An output metric that is diagonal in :math:`z`: subclasses give :meth:`diag`; the rest follows."""

    def diag(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def mv(self, z, v):
        return self.diag(z) * v

    def matrix(self, z):
        return torch.diag_embed(self.diag(z))

    def sqrt(self, z):
        return self.diag(z).sqrt().movedim(-1, 0).unsqueeze(-1) * _basis_like(z)


class BernoulliFisher(DiagonalOutputMetric):
    r"""Fisher metric of independent Bernoullis with logits :math:`z`: :math:`G_z = \operatorname{diag}(\sigma(1-\sigma))`.

    Samples :math:`\sigma(z) - t`, :math:`t\sim\mathrm{Bernoulli}(\sigma(z))`; this is also the
    Hessian of the binary cross-entropy in :math:`z`.
    """

    name = "Bernoulli Fisher metric"

    def diag(self, z):
        s = torch.sigmoid(z)
        return s * (1 - s)

    def sample(self, z, samples=1, generator=None):
        s = torch.sigmoid(z).expand((samples,) + tuple(z.shape))
        return s - torch.bernoulli(s, generator=generator)

    def loss(self, z, targets):
        self.check_targets(z, targets)
        return torch.nn.functional.binary_cross_entropy_with_logits(
            z, targets.to(z.dtype), reduction="none").reshape(z.shape[0], -1).sum(1)

    def loss_grad(self, z, targets):
        self.check_targets(z, targets)
        return torch.sigmoid(z) - targets.to(z.dtype)


class HeteroscedasticGaussianFisher(DiagonalOutputMetric):
    r"""Fisher metric of :math:`N(\mu, \operatorname{diag}(e^{s}))` with outputs :math:`z = [\mu, s]` (learned variance).

    The last axis holds :math:`d` means then :math:`d` log-variances.  In these
    coordinates the Fisher is diagonal, :math:`G_z = \operatorname{diag}(e^{-s}, \tfrac12)`;
    the loss is :math:`\tfrac12 s + \tfrac12 (t-\mu)^2 e^{-s}` per coordinate (constant dropped).
    """

    name = "Gaussian (learned variance) Fisher metric"

    def check(self, z):
        super().check(z)
        if z.shape[-1] % 2:
            raise ValueError(f"the learned-variance Gaussian Fisher metric needs outputs [mean, log-variance] "
                             f"with an even last axis, got shape {tuple(z.shape)}")

    def diag(self, z):
        d = z.shape[-1] // 2
        s = z[..., d:]
        return torch.cat([torch.exp(-s), torch.full_like(s, 0.5)], dim=-1)

    def sample(self, z, samples=1, generator=None):
        d = z.shape[-1] // 2
        mu, s = z[..., :d], z[..., d:]
        sd = torch.exp(0.5 * s)
        eps = torch.randn((samples,) + tuple(mu.shape), dtype=z.dtype, device=z.device, generator=generator)
        t = mu + sd * eps
        return self.loss_grad(z.expand((samples,) + tuple(z.shape)), t)

    def check_targets(self, z, targets):
        want = tuple(z.shape[:-1]) + (z.shape[-1] // 2,)
        if tuple(targets.shape) != want:
            raise ValueError(f"targets for the learned-variance Gaussian must have shape {want}, got {tuple(targets.shape)}")

    def loss(self, z, targets):
        self.check_targets(z, targets)
        d = z.shape[-1] // 2
        mu, s = z[..., :d], z[..., d:]
        return (0.5 * s + 0.5 * (targets - mu) ** 2 * torch.exp(-s)).reshape(z.shape[0], -1).sum(1)

    def loss_grad(self, z, targets):
        d = z.shape[-1] // 2
        mu, s = z[..., :d], z[..., d:]
        r2 = (targets - mu) ** 2 * torch.exp(-s)
        return torch.cat([(mu - targets) * torch.exp(-s), 0.5 - 0.5 * r2], dim=-1)


def _flat_apply(fn: Callable, z: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """vmap a per-vector function over all leading axes of ``z`` (and of ``others``, broadcast)."""
    shape = torch.broadcast_shapes(z.shape, *(o.shape for o in others))
    m = shape[-1]
    args = [a.expand(shape).reshape(-1, m) for a in (z,) + others]
    out = torch.func.vmap(fn)(*args)
    return out.reshape(tuple(shape[:-1]) + tuple(out.shape[1:]))


class DivergenceOutput(OutputMetric):
    r"""The metric of any output dissimilarity :math:`\rho(u, z)`: :math:`G_z = \nabla^2_u\rho(u, z)|_{u=z}`.

    ``DivergenceOutput(ig.Bregman(phi))`` gives :math:`\nabla^2\phi(z)` (seed 000, Eq. 30);
    any :class:`~infogeo.divergences.Divergence` (or function ``rho(u, w)`` of two
    vectors written with torch ops) works, differentiated by ``torch.func``.
    """

    name = "divergence output metric"

    def __init__(self, divergence: Union[Divergence, Callable[[Any, Any], Any]], dim: Optional[int] = None):
        super().__init__(dim)
        self.divergence = Divergence.from_function(divergence)

    def mv(self, z, v):
        return _flat_apply(lambda zi, vi: self.divergence.hvp_at_diagonal(zi, vi), z, v)

    def matrix(self, z):
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

    def mv(self, z, v):
        shape = torch.broadcast_shapes(z.shape, v.shape)
        out = self._hvp(z.expand(shape), v.expand(shape))
        if tuple(out.shape) != tuple(shape):
            raise ValueError(f"the user's output hvp returned shape {tuple(out.shape)}, expected {tuple(shape)}")
        return out


class SampledOutput(OutputMetric):
    r"""A metric known only through a sampler: ``sampler(z, generator)`` returns :math:`s` with
    :math:`\mathbb E[ss^T] = G_z` (seed 000's ``*_fisher_metric_sample``).

    Supports only Monte Carlo curvature (``method="mc"``).
    """

    name = "sampled output metric"

    def __init__(self, sampler: Callable[..., torch.Tensor], dim: Optional[int] = None):
        super().__init__(dim)
        self.sampler = sampler

    def mv(self, z, v):
        raise NotImplementedError("an output metric given by a sampler supports only Monte Carlo curvature "
                                  "(method='mc'); give an hvp (HessianOutput) for exact products")

    def sqrt(self, z):
        raise NotImplementedError("an output metric given by a sampler supports only Monte Carlo curvature "
                                  "(method='mc')")

    def sample(self, z, samples=1, generator=None):
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

    def check(self, z):
        super().check(z)
        if tuple(self.factors.shape[1:]) != tuple(z.shape):
            raise ValueError(f"factors of shape {tuple(self.factors.shape)} do not fit outputs of shape {tuple(z.shape)}")

    def mv(self, z, v):
        S = self.factors
        lead = v.dim() - (S.dim() - 1)
        Sx = S.reshape(S.shape[:1] + (1,) * lead + tuple(S.shape[1:]))
        return (Sx * (Sx * v).sum(-1, keepdim=True)).sum(0)

    def sqrt(self, z):
        return self.factors


_NAMED = {
    "categorical": CategoricalFisher, "softmax": CategoricalFisher, "cross_entropy": CategoricalFisher,
    "bernoulli": BernoulliFisher, "sigmoid": BernoulliFisher,
    "euclidean": EuclideanOutput, "gauss-newton": EuclideanOutput, "gauss_newton": EuclideanOutput,
    "mse": EuclideanOutput, "gaussian": GaussianFisher,
    "gaussian_learned": HeteroscedasticGaussianFisher, "heteroscedastic": HeteroscedasticGaussianFisher,
}


def output_metric(spec: Union[str, OutputMetric, Divergence, Callable]) -> OutputMetric:
    """Resolve a name (``"categorical"``, ``"bernoulli"``, ``"euclidean"``, ``"gaussian"``,
    ``"gaussian_learned"``), an :class:`OutputMetric`, or a divergence to an output metric."""
    if isinstance(spec, OutputMetric):
        return spec
    if isinstance(spec, str):
        key = spec.lower()
        if key not in _NAMED:
            raise ValueError(f"unknown output metric {spec!r}; expected one of {sorted(set(_NAMED))} "
                             "or an OutputMetric / Divergence object")
        return _NAMED[key]()
    if isinstance(spec, Divergence) or callable(spec):
        return DivergenceOutput(spec)
    raise TypeError(f"output_metric must be a name, an OutputMetric or a Divergence, got {type(spec).__name__}")
