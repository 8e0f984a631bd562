r"""Metrics on a network's outputs, :math:`G_z`, to be pulled back to parameters.

A network maps parameters :math:`w` to outputs :math:`z_n = f(w, x_n)` for each
example of a batch.  An :class:`OutputMetric` is a Riemannian metric on the output
space; its pullback :math:`G = \frac1N\sum_n J_n^T G_z(z_n) J_n` is the Gauss-Newton
matrix for the Euclidean metric and the network's Fisher information for a
likelihood's Fisher metric (Amari 1998; Martens 2020; Kunstner et al. 2019).

Outputs have shape ``(N, *middle, m)``: the metric acts on the last axis and is
independent across the middle axes (e.g. the positions of a sequence model, the
pixels of a segmentation).  The loss of a batch is the per-position loss summed
over the middle axes and averaged over the :math:`N` examples; torch losses with
other reductions are mapped onto this convention by :mod:`.losses`.  Every method
works on any leading shape, so ``mv(z, v)`` broadcasts.

Each metric offers up to three views of :math:`G_z`:

* ``mv(z, v)`` — the product :math:`G_z v` (implicit curvature);
* ``sqrt(z)`` — columns :math:`s_k` with :math:`G_z = \sum_k s_k s_k^T`, stacked on a
  new leading axis (exact diagonal, K-FAC and block curvature: the "square-root
  Hessian" propagation of Dangel et al. 2020);
* ``sample(z, samples, generator)`` — random :math:`s` with
  :math:`\mathbb E[s s^T] = G_z`: for a likelihood :math:`s = \nabla_z(-\log r(t\mid z))`
  with :math:`t \sim r(\cdot\mid z)` (the Monte Carlo Fisher of Martens & Grosse 2015).

Likelihood metrics also give ``position_loss(z, t)``, ``loss(z, t)`` and
``loss_grad(z, t)``: the negative log-likelihood per position, per example, and its
gradient, for the empirical Fisher (Kunstner et al. 2019).
"""
from __future__ import annotations

from .base import DiagonalOutputMetric, OutputMetric
from .euclidean import EuclideanOutput, GaussianFisher
from .generic import DivergenceOutput, FactorOutput, HessianOutput, SampledOutput
from .likelihoods import (BernoulliFisher, BernoulliProbabilityFisher, CategoricalFisher, CategoricalLogProbFisher,
                          GaussianVarianceFisher, HeteroscedasticGaussianFisher)
from .losses import LossOutput, from_loss
from .resolve import output_metric
from .weighted import WeightedOutput

__all__ = ["OutputMetric", "DiagonalOutputMetric", "EuclideanOutput", "CategoricalFisher", "BernoulliFisher",
           "GaussianFisher", "HeteroscedasticGaussianFisher", "BernoulliProbabilityFisher", "DivergenceOutput", "HessianOutput", "SampledOutput",
           "FactorOutput", "output_metric", "CategoricalLogProbFisher", "GaussianVarianceFisher", "WeightedOutput",
           "LossOutput", "from_loss"]
