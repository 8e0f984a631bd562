r"""Fisher metrics of the categorical, Bernoulli and learned-variance Gaussian likelihoods on outputs."""
from __future__ import annotations

import math
import warnings
from typing import Optional

import torch

from .base import DiagonalOutputMetric, OutputMetric, _basis_like

__all__ = ["CategoricalFisher", "CategoricalLogProbFisher", "BernoulliFisher", "HeteroscedasticGaussianFisher",
           "GaussianVarianceFisher"]


#: elements of the float64 cumulative sums formed at once when drawing classes (8 MiB)
_DRAW_CHUNK = 1 << 20
#: output shapes whose class axis was pointed out as ambiguous (once each)
_SQUARE_SAID: set = set()


def draw_classes(p: torch.Tensor, samples: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    r"""``(rows, samples)`` class indices, row :math:`r` drawn ``samples`` times from the probabilities ``p[r]``
    (``p`` of shape ``(rows, K)``, rows summing to one up to rounding).

    By inversion of the cumulative distribution: with :math:`c_k = \sum_{j\le k} p_j` (float64) and
    :math:`u \sim U[0, c_K)`, the class is the first :math:`k` with :math:`c_k > u`, so class :math:`k` is
    drawn with probability :math:`p_k / c_K`.  One uniform per draw and one cumulative sum per row: a
    draw over a 50,257-token vocabulary costs a sum over it, where ``torch.multinomial``'s one
    exponential variate per class costs several times more.
    """
    rows, K = p.shape
    out = torch.empty(rows, samples, dtype=torch.long, device=p.device)
    step = max(1, _DRAW_CHUNK // max(K, 1))
    for s in range(0, rows, step):
        c = torch.cumsum(p[s:s + step], -1, dtype=torch.float64)   # a new tensor: p is not changed
        u = torch.rand(c.shape[0], samples, dtype=torch.float64, device=p.device, generator=generator)
        torch.searchsorted(c, u.mul_(c[:, -1:]), right=True, out=out[s:s + step])
    return out.clamp_max_(K - 1)   # a u rounded up to c_K


def _minus_drawn(base: torch.Tensor, p: torch.Tensor, samples: int,
                 generator: Optional[torch.Generator]) -> torch.Tensor:
    r""":math:`\text{base} - e_t` for ``samples`` classes :math:`t \sim p` per row, shape ``(samples, *p.shape)``
    (one entry changed per row in place of subtracting a one-hot tensor)."""
    K = p.shape[-1]
    t = draw_classes(p.reshape(-1, K), samples, generator).T.unsqueeze(-1)       # (samples, rows, 1)
    out = base.reshape(1, -1, K).expand(samples, -1, -1).clone()
    out.scatter_add_(-1, t, out.new_full(t.shape, -1.0))
    return out.reshape((samples,) + tuple(p.shape))


class CategoricalFisher(OutputMetric):
    r"""Fisher metric of the categorical distribution with logits :math:`z`.

    .. math:: G_z = \operatorname{diag}(p) - pp^T,\qquad p = \operatorname{softmax}(z),

    which is also the Hessian of the cross-entropy in :math:`z` (so the true Fisher
    equals the generalized Gauss-Newton matrix).  Square-root columns
    :math:`s_c = \sqrt{p_c}(e_c - p)`; samples :math:`p - e_t`, :math:`t\sim p`.

    Parameters
    ----------
    label_smoothing : float
        :math:`\varepsilon \in [0, 1)`: class-index targets :math:`y` become the distribution
        :math:`q = (1-\varepsilon)e_y + \varepsilon/C` in the loss :math:`-q^T\log p`, as in
        ``torch.nn.CrossEntropyLoss``.  The Hessian in :math:`z` (so the metric) does not change.
    """

    flat_means_ignored = True

    name = "categorical Fisher metric"

    def __init__(self, dim: Optional[int] = None, label_smoothing: float = 0.0):
        super().__init__(dim)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must lie in [0, 1), got {label_smoothing}")
        self.label_smoothing = float(label_smoothing)

    def check(self, z: torch.Tensor) -> None:
        super().check(z)
        if z.shape[-1] < 2:
            raise ValueError(f"the categorical Fisher metric needs logits with at least 2 classes on the "
                             f"last axis, got outputs of shape {tuple(z.shape)}")

    def mv(self, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(z, dim=-1)
        pv = p * v
        return pv - p * pv.sum(-1, keepdim=True)

    def matrix(self, z: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(z, dim=-1)
        return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)

    def sqrt(self, z: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(z, dim=-1)
        return p.sqrt().movedim(-1, 0).unsqueeze(-1) * (_basis_like(z) - p)

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        p = torch.softmax(z, dim=-1)
        return _minus_drawn(p, p, samples, generator)

    def check_targets(self, z: torch.Tensor, targets: torch.Tensor) -> None:
        if targets.dtype in (torch.long, torch.int, torch.int32, torch.int64):
            axis_1 = z.dim() >= 3 and tuple(targets.shape) == (z.shape[0],) + tuple(z.shape[2:])   # torch's layout
            if tuple(targets.shape) != tuple(z.shape[:-1]):
                raise ValueError(f"class-index targets must have shape {tuple(z.shape[:-1])}, got "
                                 f"{tuple(targets.shape)}" + (": the targets of outputs with their classes on axis "
                                 "1 (torch's (N, C, ...) layout), while the metric takes them on the last axis; "
                                 "permute the outputs (output_fn=lambda z: z.movedim(1, -1))" if axis_1 else ""))
            if axis_1 and tuple(z.shape) not in _SQUARE_SAID:   # (N, C, T) with T = C: either layout fits
                _SQUARE_SAID.add(tuple(z.shape))
                warnings.warn(f"outputs {tuple(z.shape)} have as many entries on axis 1 as on the last: the classes "
                              f"are taken on the last axis (a torch loss takes them on axis 1 for outputs of three or "
                              f"more axes); if the model returns (N, C, ...), permute in output_fn "
                              f"(output_fn=lambda z: z.movedim(1, -1))", UserWarning, stacklevel=3)
            if targets.numel() and (targets.min() < 0 or targets.max() >= z.shape[-1]):
                raise ValueError(f"class-index targets must lie in [0, {z.shape[-1]}), got range "
                                 f"[{int(targets.min())}, {int(targets.max())}]")
        else:
            super().check_targets(z, targets)

    def _onehot(self, z, targets):
        self.check_targets(z, targets)
        t = targets.to(z.dtype) if targets.is_floating_point() else \
            torch.nn.functional.one_hot(targets, z.shape[-1]).to(z.dtype)
        if self.label_smoothing:
            t = (1 - self.label_smoothing) * t + self.label_smoothing / z.shape[-1]
        return t

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = self._onehot(z, targets)
        return -(t * torch.log_softmax(z, dim=-1)).sum(-1)

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.softmax(z, dim=-1) - self._onehot(z, targets)


class BernoulliFisher(DiagonalOutputMetric):
    r"""Fisher metric of independent Bernoullis with logits :math:`z`: :math:`G_z = \operatorname{diag}(\sigma(1-\sigma))`.

    Samples :math:`\sigma(z) - t`, :math:`t\sim\mathrm{Bernoulli}(\sigma(z))`; this is also the
    Hessian of the binary cross-entropy in :math:`z`.
    """

    flat_means_ignored = True

    name = "Bernoulli Fisher metric"

    def diag(self, z: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(z)
        return s * (1 - s)

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        s = torch.sigmoid(z).expand((samples,) + tuple(z.shape))
        return s - torch.bernoulli(s, generator=generator)

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        return torch.nn.functional.binary_cross_entropy_with_logits(z, targets.to(z.dtype), reduction="none").sum(-1)

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        return torch.sigmoid(z) - targets.to(z.dtype)


class BernoulliProbabilityFisher(DiagonalOutputMetric):
    r"""Fisher metric of independent Bernoullis with probabilities :math:`z \in (0, 1)` as outputs (a sigmoid in the
    model, ``nn.BCELoss``): :math:`G_z = \operatorname{diag}(1/(z(1-z)))`, the Bernoulli Fisher in its mean
    coordinates (the expected Hessian of the binary cross-entropy in :math:`z`; the Hessian itself depends on the
    targets).  Samples :math:`(z - t)/(z(1-z))`, :math:`t\sim\mathrm{Bernoulli}(z)`.
    """

    name = "Bernoulli Fisher metric (probabilities)"

    def check(self, z: torch.Tensor) -> None:
        super().check(z)
        if z.device.type != "meta" and z.numel() and not bool(((z > 0) & (z < 1)).all()):
            raise ValueError("the Bernoulli metric of probabilities needs outputs strictly between 0 and 1 (a "
                             "sigmoid's); for logits use 'bernoulli' or BCEWithLogitsLoss")

    def diag(self, z: torch.Tensor) -> torch.Tensor:
        return 1.0 / (z * (1 - z))

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        p = z.expand((samples,) + tuple(z.shape))
        return (p - torch.bernoulli(p, generator=generator)) / (p * (1 - p))

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        return torch.nn.functional.binary_cross_entropy(z, targets.to(z.dtype), reduction="none").sum(-1)

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        return (z - targets.to(z.dtype)) / (z * (1 - z))


class _MeanAndSpreadOutput(DiagonalOutputMetric):
    """Outputs whose last axis holds :math:`d` means, then :math:`d` spread parameters; targets are the means' shape."""

    spread = "spread"

    def check(self, z: torch.Tensor) -> None:
        super().check(z)
        if z.shape[-1] % 2:
            raise ValueError(f"the {self.name} needs outputs [mean, {self.spread}] with an even last axis, "
                             f"got shape {tuple(z.shape)}")

    def check_targets(self, z: torch.Tensor, targets: torch.Tensor) -> None:
        want = tuple(z.shape[:-1]) + (z.shape[-1] // 2,)
        if tuple(targets.shape) != want:
            raise ValueError(f"targets for the {self.name} must have shape {want}, got {tuple(targets.shape)}")


class HeteroscedasticGaussianFisher(_MeanAndSpreadOutput):
    r"""Fisher metric of :math:`N(\mu, \operatorname{diag}(e^{s}))` with outputs :math:`z = [\mu, s]` (learned variance).

    The last axis holds :math:`d` means then :math:`d` log-variances.  In these
    coordinates the Fisher is diagonal, :math:`G_z = \operatorname{diag}(e^{-s}, \tfrac12)`;
    the loss is :math:`\tfrac12 s + \tfrac12 (t-\mu)^2 e^{-s}` per coordinate (constant dropped).
    """

    name = "Gaussian (learned variance) Fisher metric"
    spread = "log-variance"

    def diag(self, z: torch.Tensor) -> torch.Tensor:
        d = z.shape[-1] // 2
        s = z[..., d:]
        return torch.cat([torch.exp(-s), torch.full_like(s, 0.5)], dim=-1)

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        d = z.shape[-1] // 2
        mu, s = z[..., :d], z[..., d:]
        sd = torch.exp(0.5 * s)
        eps = torch.randn((samples,) + tuple(mu.shape), dtype=z.dtype, device=z.device, generator=generator)
        t = mu + sd * eps
        return self.loss_grad(z.expand((samples,) + tuple(z.shape)), t)

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        d = z.shape[-1] // 2
        mu, s = z[..., :d], z[..., d:]
        return (0.5 * s + 0.5 * (targets - mu) ** 2 * torch.exp(-s)).sum(-1)

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        d = z.shape[-1] // 2
        mu, s = z[..., :d], z[..., d:]
        r2 = (targets - mu) ** 2 * torch.exp(-s)
        return torch.cat([(mu - targets) * torch.exp(-s), 0.5 - 0.5 * r2], dim=-1)


def _class_targets(name: str, z: torch.Tensor, targets: torch.Tensor) -> None:
    if targets.is_floating_point() or tuple(targets.shape) != tuple(z.shape[:-1]):
        raise ValueError(f"the {name} needs class-index targets of shape {tuple(z.shape[:-1])}, "
                         f"got {targets.dtype} of shape {tuple(targets.shape)}")
    if targets.numel() and (targets.min() < 0 or targets.max() >= z.shape[-1]):
        raise ValueError(f"class-index targets must lie in [0, {z.shape[-1]}), got range "
                         f"[{int(targets.min())}, {int(targets.max())}]")


class CategoricalLogProbFisher(DiagonalOutputMetric):
    r"""Fisher metric of the categorical distribution with log-probabilities :math:`z` (``NLLLoss`` inputs).

    With :math:`p = e^{z}` and loss :math:`-z_y`, the score is :math:`-e_y`, so
    :math:`G_z = \mathbb E_{y\sim p}[e_y e_y^T] = \operatorname{diag}(p)`.  Pulled back through
    ``log_softmax`` it is :math:`\operatorname{diag}(p) - pp^T` on the logits, the same metric as
    :class:`CategoricalFisher`.  (The loss is linear in :math:`z`, so its Gauss-Newton matrix
    would vanish; the Fisher is the metric of this likelihood.)
    """

    flat_means_ignored = True

    name = "categorical (log-probability) Fisher metric"

    def diag(self, z: torch.Tensor) -> torch.Tensor:
        return torch.exp(z)

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        p = torch.exp(z)
        return _minus_drawn(torch.zeros_like(p), p, samples, generator)

    def check_targets(self, z: torch.Tensor, targets: torch.Tensor) -> None:
        _class_targets(self.name, z, targets)

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        return -torch.gather(z, -1, targets.unsqueeze(-1)).squeeze(-1)

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        return -torch.nn.functional.one_hot(targets, z.shape[-1]).to(z.dtype)


class GaussianVarianceFisher(_MeanAndSpreadOutput):
    r"""Fisher metric of :math:`N(\mu, \operatorname{diag}\sigma^2)` with outputs :math:`z = [\mu, \sigma^2]` (``GaussianNLLLoss``).

    The last axis holds :math:`d` means then :math:`d` variances (as passed to
    ``GaussianNLLLoss(input=z[..., :d], target, var=z[..., d:])``).  In these coordinates
    :math:`G_z = \operatorname{diag}(1/\sigma^2,\ 1/(2\sigma^4))`, with :math:`\sigma^2` clamped at
    ``eps`` like the loss; the per-coordinate loss is
    :math:`\tfrac12(\log\sigma^2 + (y-\mu)^2/\sigma^2)` (plus :math:`\tfrac12\log 2\pi` with ``full``).
    """

    name = "Gaussian (mean, variance) Fisher metric"
    spread = "variance"

    def __init__(self, eps: float = 1e-6, full: bool = False, dim: Optional[int] = None):
        super().__init__(dim)
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.eps, self.full = float(eps), bool(full)

    def _split(self, z):
        d = z.shape[-1] // 2
        return z[..., :d], z[..., d:].clamp_min(self.eps)

    def diag(self, z: torch.Tensor) -> torch.Tensor:
        _, var = self._split(z)
        return torch.cat([1 / var, 0.5 / var ** 2], dim=-1)

    def sample(self, z: torch.Tensor, samples: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        mu, var = self._split(z)
        eps = torch.randn((samples,) + tuple(mu.shape), dtype=z.dtype, device=z.device, generator=generator)
        return self.loss_grad(z.expand((samples,) + tuple(z.shape)), mu + var.sqrt() * eps)

    def position_loss(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.check_targets(z, targets)
        mu, var = self._split(z)
        ell = 0.5 * (torch.log(var) + (targets - mu) ** 2 / var)
        if self.full:
            ell = ell + 0.5 * math.log(2 * math.pi)
        return ell.sum(-1)

    def loss_grad(self, z: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        mu, var = self._split(z)
        r2 = (targets - mu) ** 2
        return torch.cat([(mu - targets) / var, 0.5 / var - 0.5 * r2 / var ** 2], dim=-1)

