r"""An eigenbasis for the matrix parameters that have no Kronecker factors of the model's Fisher.

``step_rule="eigen-adam"`` steps in the Kronecker eigenbasis of the Fisher's K-FAC factors wherever a
layer rule gives them (:mod:`infogeo.nn.curvature.layers`).  A weight matrix no rule factors (a recurrent
layer's, a cross-attention's packed projection, a parameter used by several modules) has no
such basis; with ``unfactored="soap"`` it takes the eigenbasis of Shampoo's statistics of its own
mini-batch gradient :math:`\bar g` (``(out, in)``: the parameter flattened after its first axis),

.. math:: L \leftarrow \beta L + (1-\beta)\,\bar g\bar g^T,\qquad
          R \leftarrow \beta R + (1-\beta)\,\bar g^T\bar g,

renewed every step, their eigenvectors every :data:`PERIOD` steps (Gupta et al. 2018; SOAP, Vyas et al.
2025, whose decay :math:`\beta = 0.95` and period these are).  Adam then runs in that basis exactly as
in a Fisher block (:func:`~.eigen_adam.eigen_adam`, the moments carried over to each new basis).  A side
longer than ``max_dim`` keeps the identity (no statistic is formed for it); a parameter with fewer
than two axes, or both sides too long, takes Adam's step on its raw coordinates
(``unfactored="adam"``: every unfactored parameter does).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from ..curvature.factor_eigh import factor_eigh
from ..curvature.kfac import MAX_FACTOR_DIM

__all__ = ["UNFACTORED", "PERIOD", "BETA", "matrix_view", "gradient_basis"]

#: what ``step_rule="eigen-adam"`` does with parameters without Kronecker factors
UNFACTORED = ("soap", "adam")
#: steps between two eigendecompositions of the statistics, and their decay per step (SOAP's)
PERIOD, BETA = 10, 0.95


def matrix_view(g: torch.Tensor) -> Optional[torch.Tensor]:
    """``g`` as an ``(out, in)`` matrix (flattened after its first axis); ``None`` for fewer than two axes or an
    empty tensor."""
    if g.dim() < 2 or g.numel() == 0:
        return None
    return g.reshape(g.shape[0], -1)


def _eigenvectors(S: torch.Tensor, old: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The eigenvectors of a symmetric statistic; the old basis if the decomposition fails (kept, not lost)."""
    try:
        return factor_eigh(S)[1]
    except RuntimeError:   # LAPACK did not converge even in float64
        return old


def gradient_basis(state: Dict[str, torch.Tensor], g: torch.Tensor,
                   max_dim: int = MAX_FACTOR_DIM) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    r"""The eigenbasis ``(U_R, U_L)`` (in :func:`~.eigen_adam.eigen_adam`'s order ``(U_A, U_G)``) of the gradient
    statistics of one matrix ``g`` ``(out, in)``, after updating them with ``g`` (module docstring).

    ``state`` is the parameter's Adam state: it keeps ``L`` and ``R`` (float32 at least) beside the moments;
    the eigenvectors are renewed at the first step and every :data:`PERIOD` steps after it, else the ones in
    use (``state["U_G"]``, ``state["U_A"]``) are returned.  ``None`` stands for the identity of a side longer
    than ``max_dim``.  Moments kept on the parameter's raw coordinates (``unfactored="adam"``, or a checkpoint
    of it) are taken as the matrix view's in the identity basis, from which :func:`~.eigen_adam.change_basis`
    carries them to the eigenbasis.
    """
    if "exp_avg" in state and "L" not in state and "R" not in state:
        for key in ("exp_avg", "exp_avg_sq"):
            state[key] = state[key].reshape(g.shape)
        for basis_key, n in (("U_G", g.shape[0]), ("U_A", g.shape[1])):
            if n <= max_dim:
                state[basis_key] = torch.eye(n, dtype=state["exp_avg"].dtype, device=g.device)
    dtype = torch.promote_types(g.dtype, torch.float32)
    g = g.to(dtype)
    k = int(state["step"]) if "step" in state else 0   # the steps Adam has taken in this state
    bases: List[Optional[torch.Tensor]] = []
    for key, basis_key, n, outer in (("L", "U_G", g.shape[0], lambda: g @ g.T), ("R", "U_A", g.shape[1],
                                                                                  lambda: g.T @ g)):
        if n > max_dim:
            bases.append(None)
            continue
        S = state.get(key)
        if S is None:
            S = state[key] = outer()
        else:
            S.mul_(BETA).add_(outer(), alpha=1 - BETA)
        old = state.get(basis_key)
        bases.append(_eigenvectors(S, old) if old is None or k % PERIOD == 0 else old)
    U_G, U_A = bases
    return U_A, U_G
