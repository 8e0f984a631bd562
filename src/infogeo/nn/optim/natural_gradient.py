r"""Natural gradient descent for torch modules, a drop-in :class:`torch.optim.Optimizer`.

``NaturalGradient`` is exactly a :class:`~.preconditioner.Preconditioner` followed by
an SGD step: the gradient :math:`g` in ``.grad`` (the differential, a covector) is
turned into :math:`\delta = \nu(C + \lambda I)^{-1}g` (its ``sharp``, trust-region
clipped), and the parameters are retracted along it, :math:`w \leftarrow w - \eta\,\delta`
(with heavy-ball momentum if asked)::

    opt = ig.nn.NaturalGradient(model, lr=0.1, curvature="kfac", damping=1e-3)
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

The curvature statistics come from hooks on that forward and backward (no extra
forward pass).  ``opt.step(closure, inputs=x, targets=y)`` names the batch explicitly
(the curvature then takes one forward pass of its own; ``targets`` only for the
empirical Fisher); a closure is needed for ``adaptive_damping``.

``quadratic_model=True`` is the classic K-FAC recipe (Martens & Grosse 2015,
Sec. 6–7): the step :math:`\alpha\Delta + \mu\delta_\text{prev}` minimises the damped
quadratic model under the exact metric of the batch (:mod:`.quadratic`), over the
span of :math:`\Delta = -\eta_\ell(C+\lambda I)^{-1}g` (each group scaled by its
``lr``) and the previous step; with ``adaptive_damping`` the Levenberg–Marquardt ratio
:math:`\rho` of actual to predicted decrease adapts :math:`\lambda`.

Recovery: a non-finite gradient after a step undoes that step and raises the damping;
with a closure and ``adaptive_damping``, a step that increases the batch loss is undone
and retried with a larger damping (the same curvature).  Nothing is skipped for ever.
"""
from __future__ import annotations

import logging
import math
import warnings
from typing import Any, Callable, Dict, Optional

import torch

from ..space import ParameterSpace
from . import quadratic
from .._params import all_finite
from .preconditioner import Preconditioner

logger = logging.getLogger(__name__)

__all__ = ["NaturalGradient"]

_KEY = "natural_gradient"


class NaturalGradient(torch.optim.Optimizer):
    r"""Natural gradient with K-FAC, EKFAC, diagonal, block, dense or CG curvature (module docstring).

    Parameters
    ----------
    params : torch.nn.Module or iterable
        The model (possibly ``DistributedDataParallel``-wrapped), or ``model.parameters()``
        / parameter groups (each may set ``lr`` and ``momentum``) together with ``model=``.
    lr : float
        Step size :math:`\eta`.
    curvature : {"kfac", "ekfac", "diag", "block", "dense", "cg"}
        Representation of the metric (see :class:`~.preconditioner.Preconditioner`).
    damping : float
        Tikhonov damping :math:`\lambda > 0`.
    model : torch.nn.Module, optional
        The network, when ``params`` are its parameters.
    momentum : float
        Heavy-ball momentum on the natural-gradient direction (torch SGD's rule).
    kl_clip : float or None
        Trust region: the predicted KL of a step, :math:`\tfrac12\eta^2\delta^T(C+\lambda I)\delta`
        (with ``quadratic_model``: :math:`s^T(G+\lambda I)s`), is at most ``kl_clip``.
    quadratic_model, adaptive_damping : bool
        The classic K-FAC recipe (module docstring); ``adaptive_damping`` needs a closure.
    damping_adaptation_period, damping_factor : int, float
        Levenberg–Marquardt: every so many steps multiply :math:`\lambda` by ``damping_factor``
        if :math:`\rho > 3/4`, divide if :math:`\rho < 1/4`.
    min_damping : float, optional
        Damping floor (default ``min(1e-4, damping)``).
    options
        Passed to :class:`~.preconditioner.Preconditioner`: ``fisher``, ``output_metric``,
        ``samples``, ``ema_decay``, ``curvature_update_period``, ``inverse_update_period``,
        ``factor_dtype``, ``placement``, ``seed``, ``cg_max_iter``, ...
    """

    def __init__(self, params: Any, lr: float = 0.1, curvature: str = "kfac", damping: float = 1e-3, *,
                 model: Optional[torch.nn.Module] = None, momentum: float = 0.0, kl_clip: Optional[float] = 1e-3,
                 quadratic_model: bool = False, adaptive_damping: bool = False, damping_adaptation_period: int = 5,
                 damping_factor: float = 0.95 ** 5, min_damping: Optional[float] = None, max_retries: int = 3,
                 **options: Any):
        if isinstance(params, torch.nn.Module):
            if model is not None and model is not params:
                raise ValueError("pass the model once: NaturalGradient(model, ...) or "
                                 "NaturalGradient(model.parameters(), model=model)")
            model, params = params, [p for p in params.parameters() if p.requires_grad]
            if not params:
                raise ValueError("NaturalGradient got no parameters with requires_grad=True")
        if model is None:
            raise ValueError("NaturalGradient needs the network to compute its curvature: pass the module first, "
                             "or model=<the module whose parameters these are>")
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must lie in [0, 1), got {momentum}")
        if quadratic_model and momentum:
            raise ValueError("quadratic_model=True chooses the momentum itself; pass momentum=0")
        if kl_clip is not None and not kl_clip > 0:
            raise ValueError(f"kl_clip must be > 0 or None, got {kl_clip}")
        if int(damping_adaptation_period) < 1 or not 0 < damping_factor < 1:
            raise ValueError("need damping_adaptation_period >= 1 and 0 < damping_factor < 1")
        super().__init__(params, dict(lr=lr, momentum=momentum))
        trainable = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        if not trainable:
            raise ValueError("NaturalGradient got no parameters with requires_grad=True")
        if not damping > 0:
            raise ValueError(f"damping must be > 0 (Tikhonov damping makes the curvature invertible), got {damping}")
        self.preconditioner = Preconditioner(
            model, curvature, damping, params=trainable, lr=self, kl_clip=None if quadratic_model else kl_clip,
            min_damping=min(1e-4, damping) if min_damping is None else min_damping, **options)
        self.model = model
        self.kl_clip, self.quadratic_model = kl_clip, bool(quadratic_model)
        self.adaptive_damping, self.damping_adaptation_period = bool(adaptive_damping), int(damping_adaptation_period)
        self.damping_factor, self.max_retries = float(damping_factor), int(max_retries)
        self.state[_KEY] = {"previous_step": None}

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Groups are fixed once built: the curvature covers the parameters given at construction, and a
        group added later would be stepped along its raw gradient at a natural-gradient learning rate."""
        if hasattr(self, "preconditioner"):
            raise ValueError("NaturalGradient cannot take a parameter group after construction (its curvature "
                             "covers the parameters it was built with); build a new NaturalGradient with all groups")
        super().add_param_group(param_group)

    @property
    def damping(self) -> float:
        r"""Current Tikhonov damping :math:`\lambda`."""
        return self.preconditioner.damping

    # ------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None, *, inputs: Any = None,
             targets: Optional[torch.Tensor] = None):
        """One natural-gradient step; returns the closure's loss (``None`` without a closure)."""
        if self.adaptive_damping and closure is None:
            raise ValueError("adaptive_damping=True needs a closure that re-evaluates the loss")
        pre = self.preconditioner
        if inputs is not None:  # the batch is named: no need to record the closure's forward
            pre.recorder.armed = False
            pre.pending.clear()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with pre.recorder.paused():
            return self._step(closure, loss, inputs, targets)

    def _step(self, closure, loss, inputs, targets):
        pre = self.preconditioner
        raw = pre.grads()
        if not all_finite(raw.values()):
            self._undo("the gradient contains NaN or inf")
            pre.finish_step(False)
            return loss
        keep = self.quadratic_model or self.adaptive_damping
        raw = {n: g.clone() for n, g in raw.items()} if keep else raw
        if not pre._step(inputs, targets, raw):   # (within the step's paused recorder; raw found finite above)
            return loss
        k = pre.state["step"] - 1
        space = pre._space(inputs if inputs is not None else pre.recorder.inputs, targets) \
            if self.quadratic_model else None
        check = self.adaptive_damping and (k + 1) % self.damping_adaptation_period == 0
        for attempt in range(self.max_retries + 1):
            steps, model_decrease = self._update(raw, space)
            if not check:
                break
            with torch.enable_grad():
                new_loss = closure()
            bad = new_loss is None or not math.isfinite(float(new_loss)) or float(new_loss) > float(loss)
            if not bad or attempt == self.max_retries:
                self._adapt_damping(loss, new_loss, model_decrease)
                break
            self._undo(f"the step changed the batch loss {float(loss):.6g} -> {float(new_loss):.6g}")
            delta = pre.direction(raw)
            if delta is None:
                break
            scale = 1.0 if self.quadratic_model else pre.clip_scale(raw, delta)
            for n, p in zip(pre.names, pre.params):
                p.grad.copy_(delta[n] * scale)
        return loss

    def _update(self, raw: Dict[str, torch.Tensor], space: Optional[ParameterSpace]):
        """Move the parameters along the direction in ``.grad``; returns the steps and the model's decrease."""
        pre, st = self.preconditioner, self.state[_KEY]
        lrs = pre._lrs()
        model_decrease = None
        if self.quadratic_model:
            steps, model_decrease = self._quadratic_step(raw, space, lrs)
            for n, p in zip(pre.names, pre.params):
                p.add_(steps[n])
        else:
            steps = {}
            for group in self.param_groups:
                for p in group["params"]:
                    if id(p) not in lrs or p.grad is None or not p.requires_grad:
                        continue
                    d = p.grad
                    if group["momentum"]:
                        buf = self.state[p].get("momentum_buffer")
                        if buf is None:
                            buf = self.state[p]["momentum_buffer"] = torch.clone(d).detach()
                        else:
                            buf.mul_(group["momentum"]).add_(d)
                        d = buf
                    p.add_(d, alpha=-group["lr"])
                    steps[id(p)] = -group["lr"] * d
            steps = {n: steps[id(p)] for n, p in zip(pre.names, pre.params)}
            if self.adaptive_damping:
                C = pre.curvature if pre.curvature is not None else pre.solver
                Cs = C.mv(steps)
                model_decrease = float(sum((raw[n] * steps[n]).sum() + 0.5 * (steps[n] * Cs[n]).sum()
                                           for n in steps))
        st["previous_step"] = steps
        return steps, model_decrease

    def _quadratic_step(self, raw, space, lrs):
        pre, st = self.preconditioner, self.state[_KEY]
        delta = {n: -lrs[id(p)] * p.grad for n, p in zip(pre.names, pre.params)}
        dirs = [delta] + ([st["previous_step"]] if st["previous_step"] is not None else [])
        fit = quadratic.fit(space, raw, dirs, pre.damping)
        if fit is None:
            warnings.warn("NaturalGradient: the quadratic model is not finite or not convex; plain step taken",
                          RuntimeWarning, stacklevel=3)
            return delta, None
        c, b, H = fit
        q = sum(c[i] * c[j] * float(H[i, j]) for i in range(len(c)) for j in range(len(c)))
        if self.kl_clip is not None and q > self.kl_clip:
            c = [ci * math.sqrt(self.kl_clip / q) for ci in c]
        model_decrease = sum(ci * float(bi) for ci, bi in zip(c, b)) + 0.5 * sum(
            c[i] * c[j] * float(H[i, j]) for i in range(len(c)) for j in range(len(c)))
        steps = {n: c[0] * delta[n] + (c[1] * dirs[1][n] if len(c) > 1 and c[1] else 0.0) for n in pre.names}
        return steps, model_decrease

    def _undo(self, why: str) -> None:
        """Undo the last step (if any) and raise the damping; the curvature is kept."""
        pre, st = self.preconditioner, self.state[_KEY]
        prev = st["previous_step"]
        if prev is not None:
            for n, p in zip(pre.names, pre.params):
                p.sub_(prev[n])
            st["previous_step"] = None
        pre.damping = pre.damping * pre.damping_increase  # brought back to base_damping by later good steps
        warnings.warn(f"NaturalGradient: {why}; {'last step undone, ' if prev is not None else ''}damping raised "
                      f"to {pre.damping:.3g}", RuntimeWarning, stacklevel=3)

    def _adapt_damping(self, loss, new_loss, model_decrease) -> None:
        r"""Levenberg–Marquardt: :math:`\rho = (\mathcal J(w+s) - \mathcal J(w)) / M(s)`."""
        pre = self.preconditioner
        if loss is None or new_loss is None or model_decrease is None or not model_decrease < 0:
            return
        rho = (float(new_loss) - float(loss)) / model_decrease
        if rho > 0.75:
            pre.damping = pre.damping * self.damping_factor
        elif rho < 0.25 or not math.isfinite(rho):
            pre.damping = pre.damping / self.damping_factor
        pre.base_damping = pre.damping
        logger.debug("damping adaptation: rho=%.3g, damping=%.3g", rho, pre.damping)

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """Tensors and Python numbers only: ``torch.load(path, weights_only=True)`` reads it back."""
        out = super().state_dict()
        out["state"][_KEY] = dict(self.state[_KEY], preconditioner=self.preconditioner.state_dict(),
                                  base_damping=self.preconditioner.base_damping)
        return out

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        st = self.state[_KEY]
        self.preconditioner.load_state_dict(st.pop("preconditioner"))
        self.preconditioner.base_damping = float(st.pop("base_damping"))
