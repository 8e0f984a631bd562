r"""Step rules of :class:`~.natural_gradient.NaturalGradient`: how far to move along the natural-gradient direction.

The :class:`~.preconditioner.Preconditioner` owns the curvature (statistics, damping, solve) and returns
the direction :math:`\delta = (C+\lambda I)^{-1} g`; a step rule owns the learning rate, the
step length and the momentum.

``"graft"`` (the default): the direction of a momentum average of natural-gradient directions, the
length of Adam's step, per parameter tensor :math:`\ell` (grafting, Agarwal et al. 2020, "Disentangling
adaptive gradient methods from learning rates"; the way Shampoo is run in practice, Anil et al. 2020)::

.. math:: m_\ell \leftarrow \beta_1 m_\ell + (1-\beta_1) g_\ell,\quad
          v_\ell \leftarrow \beta_2 v_\ell + (1-\beta_2) g_\ell^2,\quad
          u_\ell \leftarrow \beta_1 u_\ell + (1-\beta_1)\delta_\ell,

.. math:: w_\ell \leftarrow w_\ell - \eta\,\big\|\hat m_\ell / (\sqrt{\hat v_\ell} + \epsilon)\big\|\;
          \frac{u_\ell}{\|u_\ell\|}

(hats: Adam's bias corrections, Kingma & Ba 2015).  The curvature chooses the direction within each
layer (its scale cancels, so neither the damping's absolute size nor a trust region decides the
length), Adam's statistics choose each layer's step length, and :math:`\eta` means what it means for
Adam: the learning rate changes every step's length, and Adam's usual values apply.

``"clip"``: the exact natural-gradient step :math:`w \leftarrow w - \eta\nu\delta` with KL clipping
:math:`\nu` (Ba et al. 2017) and heavy-ball momentum (torch SGD's rule), the definition of
Martens & Grosse (2015) as K-FAC optimizers run it.  Its trust region, not :math:`\eta`, decides the
length whenever :math:`\tfrac12\eta^2\delta^T(C+\lambda I)\delta` exceeds ``kl_clip``.
"""
from __future__ import annotations

from typing import Dict, Tuple

import torch

__all__ = ["STEP_RULES", "graft", "heavy_ball"]

#: the step rules NaturalGradient accepts
STEP_RULES = ("graft", "clip")


def heavy_ball(state: Dict[str, torch.Tensor], d: torch.Tensor, lr: float, momentum: float) -> torch.Tensor:
    r"""The step :math:`-\eta b` with :math:`b \leftarrow \mu b + d` (torch SGD's momentum; :math:`b = d` without)."""
    if momentum:
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = state["momentum_buffer"] = d.detach().clone()
        else:
            buf.mul_(momentum).add_(d)
        d = buf
    return d * -lr


def graft(state: Dict[str, torch.Tensor], g: torch.Tensor, d: torch.Tensor, lr: float,
          betas: Tuple[float, float], eps: float) -> torch.Tensor:
    r"""The grafted step of one parameter tensor (module docstring): Adam's length, the averaged direction ``d``.

    ``g`` is the raw gradient, ``d`` the natural-gradient direction; ``state`` holds ``exp_avg``,
    ``exp_avg_sq``, ``direction_avg`` and the step count ``graft_step``.
    """
    b1, b2 = betas
    if "exp_avg" not in state:
        state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(g), torch.zeros_like(g)
        state["direction_avg"] = torch.zeros_like(d)
        state["graft_step"] = torch.zeros((), dtype=torch.float64)
    state["graft_step"] += 1
    k = float(state["graft_step"])
    m, v, u = state["exp_avg"], state["exp_avg_sq"], state["direction_avg"]
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    u.mul_(b1).add_(d, alpha=1 - b1)
    adam = (m / (1 - b1 ** k)) / ((v / (1 - b2 ** k)).sqrt_().add_(eps))
    length, norm = torch.linalg.vector_norm(adam), torch.linalg.vector_norm(u)
    if not (norm > 0 and torch.isfinite(norm)):
        return adam * -lr   # no direction yet (a zero gradient): Adam's own step
    return u * (-lr * length / norm)
