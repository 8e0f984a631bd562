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

from .base import DiagonalOutputMetric, OutputMetric
from .euclidean import EuclideanOutput, GaussianFisher
from .generic import DivergenceOutput, FactorOutput, HessianOutput, SampledOutput
from .likelihoods import BernoulliFisher, CategoricalFisher, HeteroscedasticGaussianFisher
from .resolve import output_metric

__all__ = ["OutputMetric", "DiagonalOutputMetric", "EuclideanOutput", "CategoricalFisher", "BernoulliFisher",
           "GaussianFisher", "HeteroscedasticGaussianFisher", "DivergenceOutput", "HessianOutput", "SampledOutput",
           "FactorOutput", "output_metric"]
