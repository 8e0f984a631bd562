r"""Natural-gradient preconditioning of the gradients a torch training loop leaves in ``.grad``.

``loss.backward()`` leaves the differential of the loss, a covector :math:`g`.
:meth:`Preconditioner.step` replaces it by the damped natural-gradient direction

.. math:: \delta = \nu\,(C + \lambda I)^{-1} g,\qquad
          \nu = \min\Big(1, \sqrt{\kappa \big/ \textstyle\sum_\ell \eta_\ell^2\, \delta_\ell^T g_\ell}\Big),

(the ``sharp`` of the covector under a curvature :math:`C` of the network's pullback
metric, Amari 1998; Martens & Grosse 2015), so that any torch optimizer, LR
scheduler, gradient clipping or AMP ``GradScaler`` then acts on :math:`\delta`.
:math:`\nu` is the trust region (*KL clipping*, Ba et al. 2017): the step
:math:`-\eta\delta` changes the model's predictions by a KL divergence of about
:math:`\tfrac12\eta^2\delta^T(C+\lambda I)\delta \le \kappa` = ``kl_clip``, with
:math:`\eta_\ell` the learning rate of each parameter's group.

Costs, with the defaults: statistics every ``curvature_update_period`` (10) steps from hooks on the
user's own forward and backward (:mod:`.hooks`; one extra backward for the Monte Carlo Fisher, no
extra forward), damped factor inverses every ``inverse_update_period`` (100) steps, and every step
two :math:`d\times d` products per layer, or products with the batch's rows on small batches
(:mod:`.rows`).  ``curvature="cg"``: an extra forward pass and ``cg_max_iter`` CG products a step.
"""
from __future__ import annotations

import logging
import math
import warnings
from typing import Any, Callable, Dict, Iterable, Optional, Union

import torch

from ...linalg import NotPositiveDefiniteError
from .. import distributed as dd
from .._params import all_finite
from ..curvature import _backprop as bp
from ..output_metrics import output_metric as _resolve_output_metric
from ..batch import Batch
from ..space import ParameterSpace
from . import state
from .hooks import ForwardRecorder, OutputGradients, unwrap
from .pool import Deferred, StatisticsPool
from .rows import RowCapture
from .settings import CAPTURED, CURVATURES, FISHER, check_settings, positive_int, trainable

logger = logging.getLogger(__name__)

__all__ = ["Preconditioner"]

class Preconditioner:
    r"""Replace the gradients of ``model`` by natural-gradient directions, in place (module docstring).

    Parameters
    ----------
    model : torch.nn.Module
        The network (may be wrapped in ``DistributedDataParallel``).  Hooks are registered
        on it; :meth:`remove` takes them off.
    curvature : {"kfac", "ekfac", "diag", "block", "dense", "cg"}
        Representation :math:`C` of the metric (EKFAC: its scales are averaged like the factors).
    damping : float
        Tikhonov damping :math:`\lambda > 0`; raised automatically after a failed solve and
        brought back to this value afterwards (by ``damping_recovery`` per step).
    fisher : {"mc", "exact", "empirical"}
        True Fisher by sampling targets from the model, exactly, or the empirical Fisher:
        in the plain loop from the gradient of the loss at the output in the user's own backward,
        read as the batch mean of per-example losses; in the explicit form
        ``step(inputs=x, targets=y)`` from the targets and the output metric's loss.
    output_metric : str or OutputMetric
        Metric on the outputs (``"categorical"`` for logits, ``"bernoulli"``, ``"euclidean"``, ...).
    output_fn : callable, optional
        Picks the outputs from what the model returns (e.g. ``lambda out: out.logits``).
    params : iterable of tensors, optional
        Precondition only these parameters of ``model`` (default: all trainable ones).
    lr : float, callable, torch.optim.Optimizer or None
        Learning rate(s) :math:`\eta` for the trust region: a number, a function returning one
        (to follow a scheduler), or the optimizer whose groups' ``lr`` are read every step.
        ``None``: :math:`\eta = 1`.
    kl_clip : float or None
        Trust-region radius :math:`\kappa` (``None`` turns clipping off).
    ema_decay : float
        Statistics are averaged as :math:`C \leftarrow \beta C + (1-\beta) C_\text{new}`.
    curvature_update_period, inverse_update_period : int
        Refresh periods (steps) of the statistics and of the factorisations.
    samples : int
        Monte Carlo samples per example (``fisher="mc"``).
    min_damping, max_damping, damping_increase, max_retries
        Bounds of the damping, its factor after a failed solve, and the solves tried per step.
    factor_dtype : torch.dtype, optional
        Precision of statistics and factorisations (default: the parameters', float32 for half/bfloat16).
    placement : {"memory", "comm"}
        Work division over ranks under ``torch.distributed`` (:mod:`infogeo.nn.distributed`).
    seed : int
        Seed of the Monte Carlo generator (offset by the rank; saved in :meth:`state_dict`).
    grad_scaler : torch.amp.GradScaler, optional
        The AMP scaler of the loop (call ``scaler.unscale_(opt)`` before :meth:`step`): the empirical
        Fisher's columns are divided by its scale, and a non-finite gradient (an overflow the scaler
        will skip) skips the step without raising the damping.
    options
        ``cg_max_iter`` for ``"cg"``, and options of the representation.  K-FAC's default here is
        ``inverse="tikhonov"``, the factored damping of Martens & Grosse (2015); ``inverse="eigen"``
        inverts the damped Kronecker block exactly, at twice the cost per step.
    """

    def __init__(self, model: torch.nn.Module, curvature: str = "kfac", damping: float = 1e-3, *,
                 fisher: str = "mc", output_metric: Any = "categorical", params: Optional[Iterable[Any]] = None,
                 lr: Union[None, float, Callable[[], float], torch.optim.Optimizer] = None,
                 kl_clip: Optional[float] = 1e-3, ema_decay: float = 0.95, curvature_update_period: int = 10,
                 inverse_update_period: int = 100, samples: int = 1, min_damping: float = 1e-8,
                 max_damping: float = 1e8, damping_increase: float = 10.0, damping_recovery: float = 0.9,
                 max_retries: int = 6, factor_dtype: Optional[torch.dtype] = None, placement: str = "memory",
                 seed: int = 0, cg_max_iter: int = 20, grad_scaler: Any = None,
                 output_fn: Optional[Callable[[Any], torch.Tensor]] = None, **options: Any):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"Preconditioner needs the torch.nn.Module whose gradients it preconditions, "
                            f"got {type(model).__name__}")
        check_settings(damping=damping, min_damping=min_damping, max_damping=max_damping, curvature=curvature,
                       fisher=fisher, ema_decay=ema_decay, kl_clip=kl_clip, damping_increase=damping_increase,
                       damping_recovery=damping_recovery, placement=placement)
        self.model = model
        self.module = unwrap(model)
        named = trainable(self.module, params)
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.output_metric = _resolve_output_metric(output_metric)
        self.kind = CURVATURES[str(curvature).lower()]
        if self.kind == "implicit" and dd.world_size() > 1:
            raise ValueError("curvature='cg' solves with the local batch only, so the ranks of a process group "
                             "would move apart; use 'kfac', 'diag', 'block' or 'dense' (statistics all-reduced)")
        self.fisher = FISHER[str(fisher).lower()]
        self.lr, self.kl_clip = lr, kl_clip
        self.ema_decay, self.samples = float(ema_decay), positive_int("samples", samples)
        self.curvature_update_period = positive_int("curvature_update_period", curvature_update_period)
        self.inverse_update_period = positive_int("inverse_update_period", inverse_update_period)
        self.base_damping, self.min_damping, self.max_damping = float(damping), float(min_damping), float(max_damping)
        self.damping_increase, self.damping_recovery = float(damping_increase), float(damping_recovery)
        self.max_retries = positive_int("max_retries", max_retries)
        pdtype = self.params[0].dtype
        self.factor_dtype = factor_dtype or (torch.float32 if pdtype in (torch.float16, torch.bfloat16) else pdtype)
        if self.kind == "kfac":
            options.setdefault("inverse", "tikhonov")
        self.placement, self.cg_max_iter, self.options = placement, int(cg_max_iter), options
        self.grad_scaler, self.output_fn = grad_scaler, output_fn
        self._generator = torch.Generator(device=self.params[0].device).manual_seed(int(seed) + dd.rank())
        self.state: Dict[str, Any] = {"step": 0, "damping": float(damping)}
        self.curvature = None    # the averaged statistics (a curvature representation)
        self.solver = None       # the factorised curvature the directions come from
        self.pending = StatisticsPool()   # statistics recorded by this step's backward passes
        self._loaded: Optional[Dict[str, Any]] = None
        self._owners, self._spaces = None, {}   # block owners under torch.distributed; spaces per batch signature
        self.recorder = ForwardRecorder(self.module, self.names, self._on_backward, self.pending.settle, output_fn)
        self.recorder.armed = self.captures
        if self.kind == "kfac" and options["inverse"] == "tikhonov":
            self.recorder.rows = RowCapture.of(self.recorder.layers)

    # ------------------------------------------------------------ properties
    @property
    def damping(self) -> float:
        r"""Current Tikhonov damping :math:`\lambda`."""
        return self.state["damping"]

    @damping.setter
    def damping(self, value: float) -> None:
        self.state["damping"] = min(self.max_damping, max(self.min_damping, float(value)))

    @property
    def captures(self) -> bool:
        """Whether the statistics are recorded from the model's own forward and backward (hooks)."""
        return self.kind in CAPTURED

    def remove(self) -> None:
        """Take the hooks off the model."""
        self.recorder.remove()

    def _lrs(self) -> Dict[int, float]:
        """Learning rate per parameter id (for the trust region)."""
        lr = self.lr
        if isinstance(lr, torch.optim.Optimizer):
            return {id(p): float(g["lr"]) for g in lr.param_groups for p in g["params"]}
        value = 1.0 if lr is None else float(lr() if callable(lr) else lr)
        return {id(p): value for p in self.params}

    # ------------------------------------------------------------ curvature
    def _space(self, inputs: Any, targets: Optional[torch.Tensor] = None) -> ParameterSpace:
        """The parameter space on this batch; kept per batch signature and re-pointed at new data of the
        same shapes, so the output-shape probe and the checks run once per signature, not every step."""
        batch = Batch.of(inputs)
        key = batch.signature()
        space = self._spaces.get(key)
        if space is None or targets is not None:
            space = ParameterSpace(self.module, self.output_metric, data=batch, targets=targets, params=self.names,
                                   cg_max_iter=self.cg_max_iter, output_fn=self.output_fn)
            if targets is None:
                self._spaces = {key: space}
            return space
        space.batch, space._outputs = batch, None
        space.metric.clear_cache()
        return space

    def _build(self, space: ParameterSpace, generator: Optional[torch.Generator] = None, **given: Any):
        with bp.constant_batch_statistics():   # BatchNorm in training mode, as K-FAC optimizers treat it
            return space.curvature(self.kind, self.fisher, samples=self.samples, **self.options, **given,
                                   generator=self._generator if generator is None else generator)

    def _on_backward(self, z: torch.Tensor, calls: Dict[str, list], inputs: tuple, grad: torch.Tensor) -> None:
        r"""Called from the user's backward at the model output: the statistics of that batch, no forward pass.

        The empirical Fisher's columns are the loss gradients per example, :math:`N\,\partial L/\partial z_n`
        for the batch-mean loss :math:`L` (torch's default reduction).  With one column (no middle axes)
        the user's backward delivers each layer's share itself (:class:`.hooks.OutputGradients`), and
        :meth:`step` builds the statistics; else the columns are back-propagated here.
        """
        if self.pending.failed:   # an earlier batch of this step failed: step() raises it
            return
        try:
            n, scale = z.shape[0], float(self.grad_scaler.get_scale()) if self.grad_scaler is not None else 1.0
            given = {"columns": grad.detach().unsqueeze(0) * (n / scale)} if self.fisher == "empirical" else {}

            def build(output_grads=None):
                with bp.recorded_forward(z, calls, output_grads), self.recorder.paused():
                    return self._build(self._space(inputs), **given)
            if given and z.dim() == 2:
                grads = OutputGradients(calls, n / scale)
                self.pending.add(Deferred(lambda: build(grads), grads.remove), n)
            else:
                self.pending.add(build(), n)
        except Exception as exc:  # raised again by step(), not inside the user's backward
            self.pending.fail(exc)

    def _statistics(self, inputs, targets, generator=None):
        """New statistics: recorded during the backward if available, else computed on ``inputs`` (one forward)."""
        pending = self.pending.take(build=generator is None)
        if pending is not None:
            return pending
        if inputs is None:
            inputs = self.recorder.inputs
        if inputs is None:
            raise ValueError("the preconditioner has seen no batch: run the model's forward (with autograd) "
                             "and backward before step(), or pass inputs=x")
        return self._build(self._space(inputs, targets), generator)

    def _cast(self, curvature):
        stats = curvature.stats()
        if all(t.dtype == self.factor_dtype for t in stats.values()):
            return curvature
        return curvature.with_stats({k: t.to(self.factor_dtype) for k, t in stats.items()})

    def _all_reduce(self, curvature):
        if dd.world_size() == 1:
            return curvature
        stats = curvature.stats()
        return curvature.with_stats(dict(zip(stats, dd.all_reduce_mean(list(stats.values())))))

    def _factorise(self, curvature):
        """The solver: factorised here, on the owners (``"comm"``), or lazily by the owners (``"memory"``)."""
        blocks = getattr(curvature, "blocks", None)
        if dd.world_size() == 1 or blocks is None:
            return curvature.precompute(self.damping)
        if self._owners is None or len(self._owners) != len(blocks):
            self._owners = dd.assign_owners([float(sum(t.numel() for t in b.stats().values())) ** 1.5
                                             for b in blocks])   # ~ the cost of factorising each block
        if self.placement == "comm":
            dd.share_factorisations(blocks, self._owners, self.damping)
        return curvature

    def update_curvature(self, inputs: Any = None, targets: Optional[torch.Tensor] = None) -> None:
        """Refresh the statistics and the factorisation when their periods say so (part of :meth:`step`)."""
        k = self.state["step"]
        if self.kind == "implicit":
            self.solver = self._statistics(inputs, targets)
            return
        refresh = (self.curvature is None and self._loaded is None) or k % self.curvature_update_period == 0
        if self._loaded is not None:
            state.restore(self, inputs, targets, refresh)
        if refresh:
            new = self._cast(self._all_reduce(self._statistics(inputs, targets)))
            if not new.is_finite():
                warnings.warn("Preconditioner: the curvature statistics contain NaN or inf; they are discarded "
                              "and the last good ones kept", RuntimeWarning, stacklevel=3)
            elif self.curvature is None or not self.curvature.same_structure(new):
                self.curvature = new
                self.solver = None
            else:
                self.curvature = self.curvature.ema(new, self.ema_decay)
        warm = refresh and k < self.inverse_update_period
        if self.curvature is not None and (self.solver is None or k % self.inverse_update_period == 0 or warm):
            self.solver = self._factorise(self.curvature)

    # ------------------------------------------------------------ directions
    def _solve(self, grads: Dict[str, torch.Tensor], damping: float) -> Dict[str, torch.Tensor]:
        g = {n: t.to(self.factor_dtype) for n, t in grads.items()}
        blocks = getattr(self.solver, "blocks", None)
        rows = self.recorder.rows if blocks is not None else None
        plan = rows.plan(blocks, g) if rows is not None else None   # the rows that give each block's gradient
        if dd.world_size() > 1 and blocks is not None and self.placement == "memory":
            return dd.solve_on_owners(blocks, self._owners, g, damping, plan)
        return self.solver.solve(g, damping=damping) if plan is None else rows.solve(blocks, g, damping, plan)

    def direction(self, grads: Dict[str, torch.Tensor]) -> Optional[Dict[str, torch.Tensor]]:
        r""":math:`(C + \lambda I)^{-1} g`, raising the damping (same curvature) until it is finite.

        Returns ``None`` when no curvature is available or ``max_retries`` solves failed.
        """
        if self.solver is None:
            return None
        for _ in range(self.max_retries):
            try:
                delta = self._solve(grads, self.damping)
                if all_finite(delta.values()):
                    return {n: delta[n].to(grads[n].dtype) for n in grads}
                why = "a non-finite direction"
            except NotPositiveDefiniteError as exc:
                why = str(exc)
            if self.damping >= self.max_damping:
                break
            self.damping = self.damping * self.damping_increase
            warnings.warn(f"Preconditioner: {why}; damping raised to {self.damping:.3g} (curvature kept)",
                          RuntimeWarning, stacklevel=3)
        return None

    def clip_scale(self, grads: Dict[str, torch.Tensor], delta: Dict[str, torch.Tensor]) -> float:
        r"""Trust-region factor :math:`\nu = \min(1, \sqrt{\kappa / \sum \eta^2\delta^Tg})` (1 without ``kl_clip``)."""
        if self.kl_clip is None:
            return 1.0
        lrs = self._lrs()
        kl = float(sum(lrs[id(p)] ** 2 * torch.dot(delta[n].reshape(-1), grads[n].reshape(-1))
                       for n, p in zip(self.names, self.params)))
        return math.sqrt(self.kl_clip / kl) if kl > self.kl_clip else 1.0

    def grads(self) -> Dict[str, torch.Tensor]:
        """The gradients in ``.grad`` (zeros where there is none), by parameter name."""
        return {n: (p.grad.detach() if p.grad is not None else torch.zeros_like(p))
                for n, p in zip(self.names, self.params)}

    def finish_step(self, ok: bool) -> None:
        """Count the step, bring a raised damping back, and arm the hooks for the next refresh."""
        if ok and self.damping > self.base_damping:
            self.damping = max(self.base_damping, self.damping * self.damping_recovery)
        self.state["step"] += 1
        self._forget_batch()
        nxt = self.state["step"]
        self.recorder.armed = self.captures and (nxt % self.curvature_update_period == 0
                                                          or self.curvature is None)

    def _forget_batch(self) -> None:
        """Drop what the hooks hold of this step's batch (outputs awaiting a backward, Linear rows)."""
        self.recorder.release()
        self.pending.clear()
        if self.recorder.rows is not None:
            self.recorder.rows.clear()

    @torch.no_grad()
    def step(self, inputs: Any = None, targets: Optional[torch.Tensor] = None) -> bool:
        """Replace each ``.grad`` by the clipped natural-gradient direction; ``False`` if the step was skipped.

        ``inputs`` (and ``targets`` for the empirical Fisher) name the batch explicitly;
        by default the statistics come from the last forward/backward of the model.
        A non-finite gradient raises the damping and zeroes the gradients (skipping this step only).
        """
        with self.recorder.paused():
            return self._step(inputs, targets)

    def _step(self, inputs, targets, grads: Optional[Dict[str, torch.Tensor]] = None) -> bool:
        """``grads``: the gradients, already found finite by the caller (else read and checked here)."""
        if grads is None:
            grads = self.grads()
            if not all_finite(grads.values()):
                if self.grad_scaler is not None:   # an overflow of the scaled loss: the scaler skips this step
                    logger.debug("Preconditioner: overflow under AMP at step %d, step skipped", self.state["step"])
                    self._forget_batch()
                    return False
                self.damping = self.damping * self.damping_increase
                return self._skip(f"the gradient contains NaN or inf; damping raised to {self.damping:.3g}")
        self.update_curvature(inputs, targets)
        delta = self.direction(grads)
        if delta is None:
            return self._skip("no finite natural-gradient direction (no curvature yet, or the solve failed)")
        scale = self.clip_scale(grads, delta)
        for n, p in zip(self.names, self.params):
            d = delta[n] * scale if scale != 1.0 else delta[n]
            p.grad = d if p.grad is None else p.grad.copy_(d)
        self.finish_step(True)
        return True

    def _skip(self, why: str) -> bool:
        """Zero the gradients (this step moves nothing) and say why."""
        warnings.warn(f"Preconditioner: {why}; gradients zeroed for this step", RuntimeWarning, stacklevel=4)
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()
        self.finish_step(False)
        return False

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """Tensors and Python numbers only (loadable with ``torch.load(weights_only=True)``); see :mod:`.state`."""
        return state.checkpoint(self)

    def load_state_dict(self, saved: Dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the curvature objects are rebuilt at the next step."""
        state.load(self, saved)
