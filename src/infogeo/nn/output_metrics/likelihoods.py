r"""Fisher metrics of the categorical, Bernoulli and learned-variance Gaussian likelihoods on outputs."""
from __future__ import annotations

import torch

from .base import DiagonalOutputMetric, OutputMetric, _basis_like

__all__ = ["CategoricalFisher", "BernoulliFisher", "HeteroscedasticGaussianFisher"]


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
