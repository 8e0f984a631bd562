r"""Step rules of :class:`~.natural_gradient.NaturalGradient`: how far to move along the natural-gradient direction.

The :class:`~.preconditioner.Preconditioner` owns the curvature (statistics, damping, solve) and returns
the direction :math:`\delta = (C+\lambda I)^{-1} g`; a step rule owns the learning rate, the
step length and the momentum.

``"graft"`` (the default with curvatures that have no Kronecker eigenbasis, and under FSDP2): the direction
of a momentum average of natural-gradient directions, the length of Adam's step, per parameter tensor
:math:`\ell` (grafting, Agarwal et al. 2020, "Disentangling adaptive gradient methods from learning rates";
the way Shampoo is run in practice, Anil et al. 2020)::

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

``"eigen-adam"`` (the default with K-FAC), Adam in the Kronecker eigenbasis of the Fisher's factors, is
:mod:`.eigen_adam`'s; the Adam moments and their directions, fused over parameters, are shared from here.
"""
from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, cast

import torch

from .._params import working

__all__ = ["STEP_RULES", "OWN", "started_afresh", "graft", "grafted", "LastSteps", "heavy_ball", "adam_moments",
           "adam_directions", "cautious_mask", "CAUTIOUS_FLOOR"]

#: the step rules NaturalGradient accepts
STEP_RULES = ("graft", "clip", "eigen-adam")
#: the key of the optimizer's own entry, in its first parameter's state beside that parameter's step-rule state
OWN = "natural_gradient"


def started_afresh(state: MutableMapping[str, Any]) -> None:
    """A parameter's step-rule state emptied (its moments started afresh), the optimizer's own entry kept."""
    for key in [k for k in state if k != OWN]:
        del state[key]


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
    g, d = working(g), working(d)   # half-precision moments lose eps (1e-8) and small squares to underflow
    if "exp_avg" not in state:
        state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(g), torch.zeros_like(g)
        state["direction_avg"] = torch.zeros_like(d)
        state["graft_step"] = torch.zeros((), dtype=torch.float64)
    state["direction_avg"].mul_(betas[0]).add_(d, alpha=1 - betas[0])
    adam_moments([state], [g], betas, step="graft_step")
    return grafted(state, lr, betas, eps)


def grafted(state: Dict[str, torch.Tensor], lr: float, betas: Tuple[float, float], eps: float) -> torch.Tensor:
    """The step :func:`graft` took last, from its state alone (the same operations, so the same bits)."""
    u = state["direction_avg"]
    adam = adam_directions([state], betas, eps, step="graft_step")[0]
    length, norm = torch.linalg.vector_norm(adam), torch.linalg.vector_norm(u)
    # chosen on the device, not by a Python branch: reading ``norm`` would wait for the GPU at every parameter
    has_direction = (norm > 0) & torch.isfinite(norm)
    return torch.where(has_direction, u * (-lr * length / norm), adam * -lr)   # else Adam's own step


class LastSteps(Mapping):
    """``{name: the last step taken}``, each recomputed when read (to undo a step) by a function of the step
    rule's state instead of kept: that state determines it until the rule's next step, so holding the step
    would be one parameter copy more.  The functions repeat the step's operations on the same tensors, so
    the recomputed step has the same bits."""

    def __init__(self) -> None:
        self._of: Dict[str, Callable[[], torch.Tensor]] = {}

    def record(self, name: str, recompute: Callable[[], torch.Tensor]) -> None:
        self._of[name] = recompute

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._of[name]()

    def __iter__(self) -> Iterator[str]:
        return iter(self._of)

    def __len__(self) -> int:
        return len(self._of)


def adam_moments(states: Sequence[Dict[str, torch.Tensor]], gs: Sequence[torch.Tensor],
                 betas: Tuple[float, float], step: str = "step") -> None:
    """Adam's moments ``exp_avg``, ``exp_avg_sq`` of every state updated in place with its ``g``, and its step
    count (the entry ``step``) counted: one fused (``torch._foreach_*``) operation per moment for all of them."""
    if not states:
        return
    b1, b2 = betas
    ms, vs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
    torch._foreach_mul_(ms, b1)
    torch._foreach_add_(ms, list(gs), alpha=1 - b1)
    torch._foreach_mul_(vs, b2)
    torch._foreach_addcmul_(vs, list(gs), list(gs), value=1 - b2)
    torch._foreach_add_([s[step] for s in states], 1)


#: the smallest fraction of a tensor's coordinates a cautious mask rescales by (:func:`cautious_mask`): fewer kept
#: coordinates are not scaled up beyond 1000x
CAUTIOUS_FLOOR = 1e-3


def cautious_mask(directions: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                  null: Optional[Dict[int, Tuple[int, int]]] = None) -> List[torch.Tensor]:
    r"""Each direction :math:`u` with the coordinates where it disagrees in sign with the gradient :math:`g` it was
    updated with set to zero, the rest scaled by the inverse of their share
    (Liang et al. 2024, "Cautious optimizers: improving training with one line of code"):

    .. math:: u \leftarrow \frac{u\odot\mathbb 1[u\odot g > 0]}{\max(\overline{\mathbb 1[u\odot g > 0]},\ 10^{-3})}.

    A coordinate where the averaged step would go uphill on this batch's gradient waits until the two agree
    again: the overshoot of momentum across a valley is not taken, which damps the oscillation a large learning
    rate otherwise brings; the rescaling keeps the mean size of the step.

    Only coordinates where :math:`g` is more than rounding are decided: :math:`|g_i| > n\,\epsilon\max|g|`
    (:math:`n` the longer side, :math:`\epsilon` of the dtype: numpy's rank tolerance), and, with ``null`` (by
    position, the dimensions ``(k_A, k_G)`` of a Kronecker block's factor null spaces: its first columns and rows,
    :func:`.eigen_adam.pool_null`), not those.  Where the gradient cancels exactly (a softmax's outputs sum to
    one, a normalised layer's inputs to zero, a gradient statistic has rank below its side) its rotated
    coordinates are rounding noise of either sign; decided by noise, they would change the share kept, and so the
    whole step, with every rounding (another number of ranks, another eigensolver).  They are left as they are,
    and the share is taken over the others.  Returns new tensors (``grads`` in the same coordinates), computed by
    fused operations over all of them (a few kernels per step, not a few per tensor)."""
    us, gs, null = list(directions), list(grads), null or {}
    if any(u.numel() == 0 for u in us):   # nothing to mask (and no largest entry)
        full = [i for i, u in enumerate(us) if u.numel()]
        done = iter(cautious_mask([us[i] for i in full], [gs[i] for i in full],
                                  {j: null[i] for j, i in enumerate(full) if i in null}))
        return [next(done) if u.numel() else u.clone() for u in us]
    if not us:
        return []
    if len({(u.device, u.dtype) for u in us + gs}) > 1:   # fused where they share a device and dtype
        return [cautious_mask([u], [g], {0: null[i]} if i in null else None)[0]
                for i, (u, g) in enumerate(zip(us, gs))]
    eps = torch.finfo(us[0].dtype).eps
    decided = torch._foreach_abs(gs)
    tol = torch._foreach_mul(_largest(decided), [max(g.shape, default=1) * eps for g in gs])
    torch._foreach_sub_(decided, tol)
    torch._foreach_sign_(decided)
    torch._foreach_clamp_min_(decided, 0.0)   # 1 where |g| > tol
    for i, (ka, kg) in null.items():
        if ka or kg:
            decided[i][:kg] = 0
            decided[i][:, :ka] = 0
    keep = torch._foreach_mul(us, gs)
    torch._foreach_sign_(keep)
    torch._foreach_clamp_min_(keep, 0.0)
    torch._foreach_mul_(keep, decided)   # 1 where decided and u g > 0 (ties dropped)
    live = torch.stack([d.sum() for d in decided])   # (sums: a CPU's _foreach_norm is several times slower)
    # (a tensor with nothing decided, a zero gradient, is left as it is: 0 / 1, not 0 / 0)
    scale = live / torch.maximum(torch.stack([k.sum() for k in keep]), CAUTIOUS_FLOOR * live).clamp_min(1.0)
    torch._foreach_mul_(keep, list(scale.unbind()))
    torch._foreach_sub_(decided, 1.0)
    torch._foreach_sub_(keep, decided)   # + 1 where undecided: left as it is
    torch._foreach_mul_(keep, us)
    return list(keep)


def _largest(ts: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """The largest entry of each (non-empty) tensor: fused where torch has ``_foreach_max``."""
    return list(torch._foreach_max(list(ts))) if hasattr(torch, "_foreach_max") else [t.amax() for t in ts]


def adam_directions(states: Sequence[Dict[str, torch.Tensor]], betas: Tuple[float, float],
                    eps: float, step: str = "step",
                    grads: Optional[Sequence[torch.Tensor]] = None) -> List[torch.Tensor]:
    r""":math:`\hat m/(\sqrt{\hat v}+\epsilon)` of every state's moments (Adam's bias corrections at its step
    count, the entry ``step``), fused over the states that share a step count.  ``grads``: the gradients the
    moments were last updated with, for NAdam's look-ahead first moment
    :math:`\hat m = \beta_1 m/(1-\beta_1^{t+1}) + (1-\beta_1) g/(1-\beta_1^t)` (module docstring)."""
    b1, b2 = betas
    by_step: Dict[float, List[int]] = {}
    for i, s in enumerate(states):
        by_step.setdefault(float(s[step]), []).append(i)
    out: List[torch.Tensor] = [cast(torch.Tensor, None)] * len(states)
    for k, idx in by_step.items():
        if grads is None:
            num = torch._foreach_div([states[i]["exp_avg"] for i in idx], 1 - b1 ** k)
        else:
            num = torch._foreach_mul([states[i]["exp_avg"] for i in idx], b1 / (1 - b1 ** (k + 1)))
            torch._foreach_add_(num, [grads[i] for i in idx], alpha=(1 - b1) / (1 - b1 ** k))
        den = torch._foreach_div([states[i]["exp_avg_sq"] for i in idx], 1 - b2 ** k)
        torch._foreach_sqrt_(den)
        torch._foreach_add_(den, eps)
        torch._foreach_div_(num, den)
        for i, u in zip(idx, num):
            out[i] = u
    return out


