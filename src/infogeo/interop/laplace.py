r"""laplace-torch backends built on infogeo's network curvature.

laplace-torch (Daxberger et al. 2021, "Laplace Redux") takes the curvature of a
network's loss from a pluggable backend, a subclass of its ``CurvatureInterface``
with three structures: ``full`` (a dense matrix), ``kron`` (Kronecker factors per
layer, K-FAC) and ``diag``.  This module provides two such backends:

* :class:`InfogeoGGN` -- the generalized Gauss-Newton matrix, which for laplace's
  two likelihoods (softmax cross-entropy, unit-variance Gaussian) equals the Fisher
  information (Martens 2020, Sec. 9); ``stochastic=True`` gives its Monte Carlo
  estimate with ``num_samples`` sampled targets per input;
* :class:`InfogeoEF` -- the empirical Fisher (Kunstner et al. 2019).

Usage::

    from laplace import Laplace
    from infogeo.interop.laplace import InfogeoGGN
    la = Laplace(model, "classification", hessian_structure="kron", backend=InfogeoGGN)
    la.fit(train_loader)

Conventions (those of laplace-torch).  laplace works with the *summed* loss
:math:`\mathcal L = c\sum_n \ell(f(x_n), y_n)` with ``CrossEntropyLoss(reduction="sum")``
and :math:`c = 1` for classification, ``MSELoss(reduction="sum")`` and :math:`c = 1/2`
for regression.  infogeo's :class:`~infogeo.nn.ParameterSpace` averages over the
batch, so the curvature of a batch of :math:`M` inputs is multiplied by :math:`M`.
The empirical Fisher follows laplace's definition
:math:`c\sum_n \nabla\ell_n\nabla\ell_n^T` with :math:`\ell_n` the *torch* loss, which for
regression is :math:`2\times` the empirical Fisher of the Gaussian log-likelihood.

For ``kron``, each layer that infogeo's K-FAC factors gives laplace the factors
:math:`[B, A]` of its weight and :math:`[B]` of its bias, where :math:`B = \sum_n b_nb_n^T`
(output pseudo-gradients, summed over the batch) and :math:`A` is the mean input
second moment rescaled by :math:`M/N` (``N`` the size of the data set), so that laplace's
sum over batches is the K-FAC of the whole data set (Ritter et al. 2018).  The
weight-bias cross terms are dropped, as laplace's ``Kron`` structure requires.  A
one-dimensional parameter that K-FAC keeps as a diagonal block becomes one dense
factor; a matrix-shaped parameter K-FAC cannot factor (an ``Embedding``, say) is
refused with an error naming it.

laplace-torch is imported on first use (``pip install laplace-torch``, see the
``laplace`` extra).
"""
from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Dict, List, Optional, Tuple

import torch

try:  # laplace-torch is optional: the module imports without it, the classes need it
    from laplace.curvature import CurvatureInterface, EFInterface, GGNInterface
    from laplace.utils import Kron
except ImportError as _err:  # pragma: no cover - exercised only without laplace-torch
    _IMPORT_ERROR: Optional[ImportError] = _err

    class CurvatureInterface:  # type: ignore[no-redef]
        def __init__(self, *args, **kwargs):
            raise ImportError("infogeo.interop.laplace needs laplace-torch: pip install laplace-torch "
                              f"(import failed: {_IMPORT_ERROR})")

    GGNInterface = EFInterface = CurvatureInterface  # type: ignore[misc]
else:
    _IMPORT_ERROR = None

__all__ = ["InfogeoGGN", "InfogeoEF"]

_STRUCTURES = ("full", "kron", "diag")


class _InfogeoInterface(CurvatureInterface):
    """Shared set-up: one :class:`~infogeo.nn.ParameterSpace` per batch, scaled to laplace's summed loss."""

    method = "exact"

    def __init__(self, model: torch.nn.Module, likelihood: Any, last_layer: bool = False,
                 subnetwork_indices: Optional[torch.LongTensor] = None, dict_key_x: str = "input_ids",
                 dict_key_y: str = "labels", stochastic: bool = False, num_samples: int = 1,
                 kfac_options: Optional[Dict[str, Any]] = None):
        super().__init__(model, likelihood, last_layer, subnetwork_indices, dict_key_x, dict_key_y)
        self.stochastic = bool(stochastic)
        self.num_samples = int(num_samples)
        if self.num_samples < 1:
            raise ValueError(f"num_samples must be a positive integer, got {num_samples}")
        self.kfac_options = dict(kfac_options or {})

    # ------------------------------------------------------------------ set-up
    @property
    def _output_metric(self) -> str:
        return "euclidean" if str(self.likelihood) in ("regression", "Likelihood.REGRESSION") else "categorical"

    @property
    def _regression(self) -> bool:
        return self._output_metric == "euclidean"

    def _space(self, x: Any, y: torch.Tensor):
        """The parameter space of this batch and the network's outputs ``f``."""
        from ..nn import ParameterSpace
        if isinstance(x, MutableMapping):
            raise TypeError("the infogeo laplace backend takes tensor inputs; dictionary inputs "
                            "(e.g. Hugging Face batches) are not supported, use laplace's own backends")
        if self.last_layer:
            f, phi = self.model.forward_with_features(x)
            module, data = self.model.last_layer, phi.detach()
        else:
            module, data = self.model, x
            with torch.no_grad():
                f = self.model(x)
        targets = y if self.method == "empirical" else None
        space = ParameterSpace(module, self._output_metric, data=data, targets=targets)
        return space, f.detach()

    def _curvature(self, space, kind: str, mc_samples: Optional[int] = None, **options):
        if self.method == "empirical":
            return space.curvature(kind, "empirical", **options)
        if self.stochastic:
            samples = self.num_samples if mc_samples is None else int(mc_samples)
            return space.curvature(kind, "mc", samples=samples, **options)
        return space.curvature(kind, "exact", **options)

    def _scale(self, batch: int) -> float:
        """From infogeo's batch mean to laplace's ``c * sum`` convention (see the module docstring)."""
        if self.method == "empirical" and self._regression:
            return 2.0 * batch          # c * |grad (f - y)^2|^2 = (1/2) * 4 * |grad NLL|^2
        return float(batch)

    def _loss(self, f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.factor * self.lossfunc(f, y)).detach()

    def _select(self, H: torch.Tensor) -> torch.Tensor:
        idx = self.subnetwork_indices
        if idx is None:
            return H
        idx = idx.to(H.device)
        return H[idx] if H.dim() == 1 else H[idx][:, idx]

    def _check_structure(self, space) -> None:
        P = sum(p.numel() for p in self.params)
        if space.layout.size != P:
            raise ValueError(f"the parameter space has {space.layout.size} coordinates but laplace expects {P}; "
                             "every trainable parameter must be one of the network's coordinates")

    # ------------------------------------------------------------------ structures
    def full(self, x: Any, y: torch.Tensor, **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        """Loss and the dense curvature ``(P, P)`` in ``model.parameters()`` order."""
        space, f = self._space(x, y)
        self._check_structure(space)
        H = self._curvature(space, "dense", kwargs.get("mc_samples")).to_dense() * self._scale(len(f))
        return self._loss(f, y), self._select(H.detach())

    def diag(self, x: Any, y: torch.Tensor, **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        """Loss and the diagonal of the curvature, a vector of length ``P``."""
        space, f = self._space(x, y)
        self._check_structure(space)
        d = space.layout.flatten(self._curvature(space, "diag", kwargs.get("mc_samples")).diagonal()) * self._scale(len(f))
        return self._loss(f, y), self._select(d.detach())

    def kron(self, x: Any, y: torch.Tensor, N: int, **kwargs: Any) -> Tuple[torch.Tensor, "Kron"]:
        """Loss and laplace's ``Kron`` of infogeo's K-FAC, scaled for a data set of ``N`` points."""
        if self.subnetwork_indices is not None:
            raise ValueError("laplace's subnetwork Laplace uses the 'full' structure; kron is not defined for it")
        space, f = self._space(x, y)
        self._check_structure(space)
        options = dict(self.kfac_options)
        if "kfac_approx" in kwargs:  # laplace's name for K-FAC's weight-sharing variant ("expand" / "reduce")
            options["kfac_approx"] = kwargs["kfac_approx"]
        C = self._curvature(space, "kfac", kwargs.get("mc_samples"), **options)
        M = len(f)
        factors = _kron_factors(C, space, M / float(N), self._scale(M))
        module = self.model.last_layer if self.last_layer else self.model
        names = [n for n, p in module.named_parameters() if p.requires_grad]
        return self._loss(f, y), Kron([factors[n] for n in names])


def _kron_factors(C, space, a_scale: float, b_scale: float) -> Dict[str, List[torch.Tensor]]:
    """laplace's factor lists per parameter name from a K-FAC curvature's blocks."""
    from ..nn.curvature import DiagBlock, KronBlock
    out: Dict[str, List[torch.Tensor]] = {}
    for block in C.blocks:
        if isinstance(block, KronBlock):
            if block.transposed or block.A.dim() == 1 or block.G.dim() == 1:
                raise ValueError(f"laplace's kron structure needs dense Kronecker factors of an (out, in) weight for "
                                 f"{block.names}, but infogeo's K-FAC keeps a diagonal factor or a transposed weight "
                                 "there (an Embedding, a vocabulary-sized side, Hugging Face Conv1D, a transposed convolution); use "
                                 "hessian_structure='diag' or 'full'")
            B = block.G * b_scale
            n_in = block.A.shape[0] - (block.bias is not None)
            if block.weight is not None:
                out[block.weight] = [B.detach(), (block.A[:n_in, :n_in] * a_scale).detach()]
            if block.bias is not None:
                out[block.bias] = [(B * block.A[n_in, n_in]).detach()]
        elif isinstance(block, DiagBlock):
            for name in block.names:
                d = block.d[name]
                if d.dim() > 1:
                    raise ValueError(f"laplace's kron structure needs Kronecker factors for parameter {name!r} "
                                     f"of shape {tuple(d.shape)}, but infogeo's K-FAC keeps it as a diagonal "
                                     "block; use hessian_structure='diag' or 'full'")
                out[name] = [torch.diag(d.reshape(-1) * b_scale).detach()]
        else:
            raise ValueError(f"laplace's kron structure cannot hold a {type(block).__name__} of {block.names}; "
                             "use hessian_structure='diag' or 'full'")
    missing = [n for n in space.names if n not in out]
    if missing:
        raise ValueError(f"infogeo's K-FAC gave no block for parameters {missing}")
    return out


class InfogeoGGN(_InfogeoInterface, GGNInterface):
    """laplace-torch backend: the generalized Gauss-Newton / Fisher matrix from infogeo.

    Parameters
    ----------
    model, likelihood, last_layer, subnetwork_indices, dict_key_x, dict_key_y
        As for laplace's ``CurvatureInterface``.
    stochastic : bool
        Monte Carlo Fisher (``num_samples`` targets sampled from the model per input)
        instead of the exact GGN.
    num_samples : int
        Samples per input when ``stochastic``.
    kfac_options : dict, optional
        Passed to ``space.curvature("kfac", ...)`` (e.g. the K-FAC inverse).
    """

    method = "exact"


class InfogeoEF(_InfogeoInterface, EFInterface):
    """laplace-torch backend: the empirical Fisher :math:`c\\sum_n\\nabla\\ell_n\\nabla\\ell_n^T` from infogeo."""

    method = "empirical"

    def __init__(self, model: torch.nn.Module, likelihood: Any, last_layer: bool = False,
                 subnetwork_indices: Optional[torch.LongTensor] = None, dict_key_x: str = "input_ids",
                 dict_key_y: str = "labels", kfac_options: Optional[Dict[str, Any]] = None):
        super().__init__(model, likelihood, last_layer, subnetwork_indices, dict_key_x, dict_key_y,
                         kfac_options=kfac_options)
