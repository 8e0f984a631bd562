r"""Natural gradient descent for torch modules, a drop-in :class:`torch.optim.Optimizer`.

``NaturalGradient`` is a :class:`~.preconditioner.Preconditioner` followed by a step rule
(:mod:`.step`, :mod:`.eigen_adam`).  ``step_rule="eigen-adam"`` (the default with K-FAC) takes Adam's step in the
Kronecker eigenbasis of the curvature's factors, with the second moments there renewed every step
(EKFAC's eigenvalues as a running average, SOAP's update in the model Fisher's basis).  The other rules
move along the direction :math:`\delta = (C + \lambda I)^{-1}g` into which the gradient :math:`g` in
``.grad`` (the differential, a covector) is turned (its ``sharp``): ``"graft"`` (the default with the other
curvatures, EKFAC's included, and under FSDP2) takes the running mean of the directions with the length of
Adam's step, per parameter tensor; ``"clip"`` is the exact step :math:`w \leftarrow w - \eta\nu\delta` with
KL clipping :math:`\nu` (and heavy-ball momentum if asked)::

    opt = ig.nn.NaturalGradient(model, curvature="kfac", damping=1e-3)
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

The curvature statistics come from hooks on that forward and backward (no extra forward pass).
``opt.step(closure, inputs=x, targets=y)`` names the batch explicitly (the curvature then takes one forward pass
of its own; ``targets`` only for the empirical Fisher); a closure is needed for ``adaptive_damping``.

``quadratic_model=True`` is the classic K-FAC recipe (Martens & Grosse 2015,
Sec. 6–7): the step :math:`\alpha\Delta + \mu\delta_\text{prev}` minimises the damped
quadratic model under the exact metric of the batch (:mod:`.quadratic`), over the
span of :math:`\Delta = -\eta_\ell(C+\lambda I)^{-1}g` (each group scaled by its
``lr``) and the previous step; with ``adaptive_damping`` the Levenberg–Marquardt ratio
:math:`\rho` of actual to predicted decrease adapts :math:`\lambda`.

Recovery: a non-finite gradient after a step undoes that step and raises the damping;
with a closure and ``adaptive_damping``, a step that increases the batch loss is undone
and retried with a larger damping (the same curvature), at most ``max_retries`` times.
Nothing is skipped for ever.  The damping has one owner with fixed rules
(:class:`~.damping.Damping`).  Under ``torch.distributed`` every such decision is agreed over
the ranks (the losses compared are the means over the ranks), so the parameters stay
identical on every rank (:mod:`infogeo.nn.distributed`).
"""
from __future__ import annotations

import copy
import logging
import math
import warnings
from functools import partial
from typing import Any, Callable, Dict, Optional, Tuple, Union, cast

import torch

from .. import distributed as dd
from .. import fsdp
from ..space import ParameterSpace
from . import quadratic, state
from .preconditioner import Preconditioner
from .settings import check_groups, listed_once, refuse_torch_options
from .step_settings import check_step_settings
from .eigen_adam import eigen_steps
from .step import OWN, LastSteps, graft, grafted, heavy_ball

logger = logging.getLogger(__name__)

__all__ = ["NaturalGradient"]

_KEY = OWN
#: the step rules that move along the preconditioner's direction (the others use its factorisation)
_SOLVING = ("graft", "clip")


class NaturalGradient(state.NotCopyable, torch.optim.Optimizer):
    r"""Natural gradient with K-FAC, EKFAC, diagonal, block, dense or CG curvature (module docstring).

    Parameters
    ----------
    params : torch.nn.Module or iterable
        The model (possibly ``DistributedDataParallel``-wrapped), or ``model.parameters()``
        / parameter groups (each may set ``lr`` and ``momentum``) together with ``model=``.  Parameters with
        ``requires_grad=False`` now are left out of the curvature: a step where one has a gradient (unfrozen since)
        raises, saying to build the optimizer again.
    lr : float, optional
        Learning rate :math:`\eta` (default ``DEFAULT_LR[step_rule]``: ``1e-2``, ``0.1`` for ``"clip"``).
    curvature : {"kfac", "ekfac", "diag", "block", "dense", "cg", "shampoo", "soap"}
        Representation of the metric (see :class:`~.preconditioner.Preconditioner`): the model's Fisher, or
        with ``"shampoo"`` Shampoo's metric of the gradients themselves (Gupta et al. 2018), and with ``"soap"`` the
        same with ``step_rule="eigen-adam"`` by default: SOAP (Vyas et al. 2025).
    damping : float
        Tikhonov damping :math:`\lambda > 0`.
    model : torch.nn.Module, optional
        The network, when ``params`` are its parameters.
    step_rule : {"graft", "clip", "eigen-adam"}, optional
        How to step (:mod:`.step`).  ``"graft"`` or ``"clip"`` move along the damped natural-gradient
        direction; ``"eigen-adam"`` (``curvature="kfac"``, ``"ekfac"``, ``"shampoo"`` or ``"soap"``): Adam in the
        Kronecker eigenbasis of the curvature's factors (no solve, no damping).  Default: ``"clip"`` with
        ``quadratic_model`` or ``adaptive_damping``; else the kind's (``"eigen-adam"`` for ``"kfac"`` and
        ``"soap"``, ``"graft"`` for the others: EKFAC's exact scales serve the grafted direction and would go
        unused), except ``"graft"`` on a model sharded by ``fully_shard`` (there ``"eigen-adam"``, when asked for,
        gathers each gradient, and its moments are whole matrices on every rank, not shards), and with an
        ``inverse`` without eigenbasis.  ``"eigen-adam"`` took fewer steps than tuned AdamW on every
        workload of ``benchmarks/optimizer_race.py`` (measured in docs/nn.md).
    betas, eps : (float, float) or None, float
        ``"graft"`` and ``"eigen-adam"``: decay of the first moments (gradients and directions) and of the
        squared gradients, and Adam's :math:`\epsilon`.  ``betas=None``: per rule (``settings.BETAS``),
        ``(0.9, 0.95)`` for ``"eigen-adam"`` (SOAP's: a faster second moment follows the scales through each
        change of basis), ``(0.9, 0.999)`` (Adam's) for the others.  Kept per parameter group (``group["betas"]``,
        as torch's Adam keeps them), so a group may set its own and a scheduler that cycles momentum
        (``OneCycleLR``, ``CyclicLR``) cycles ``betas[0]``.
    nesterov : bool or None
        ``"eigen-adam"``: NAdam's look-ahead first moment (Dozat 2016; :mod:`.eigen_adam`), the default (``None``)
        under the model's Fisher: it kept a larger learning rate stable on the race's classifiers and took its
        masked-character model to the target in 130-150 steps instead of 160-180 (docs/nn.md).  ``False``:
        Adam's moment (the default with ``curvature="soap"``, SOAP as published; with ``cautious=False`` too it
        holds one weight's worth less, half that in bfloat16, the last step being recomputed instead of kept).
        The other rules have no such option (``"clip"`` takes heavy-ball ``momentum``).
    cautious : bool or None
        ``"eigen-adam"``: mask each coordinate of the step in the eigenbasis whose sign disagrees with the rotated
        gradient's, and scale the rest by the inverse of their share (Liang et al. 2024, "Cautious optimizers";
        :mod:`.eigen_adam`).  The default (``None``) is ``True`` under the model's Fisher: in the race it took
        fewer steps to the target on four of five workloads (as many on the fifth) and took the digits classifier
        and CNN to it at ``lr=3e-2`` on more seeds (docs/nn.md; some seeds still oscillate there).  ``False``: the
        plain rule (the default with ``curvature="soap"``, SOAP as published).  The other rules have no such option.
    input_lr_scale : float or None
        ``"eigen-adam"``: the layers that read the data (Linear, convolution and embedding layers each of whose
        calls in the last refresh took only leaves of the autograd graph: the input itself, token indices, the
        output of a frozen part; not a recurrent layer, not a weight tied to another layer's) step at
        ``input_lr_scale * lr``, the others at ``lr``.  Adam's step moves every coordinate by about its rate, so
        the rate that suits a hidden layer is small for the layers at the input (a maximal-update
        parametrisation gives the input weights a rate of order one and the hidden ones one of order
        1/width; Yang et al. 2021, "Tensor Programs V").  The default (``None``) is ``3`` under the model's
        Fisher (``INPUT_LR_SCALE``): on the race's workloads (3 seeds, steps to the tight target) it took the
        digits classifier there in 135-140 steps instead of 165 and the CNN in 100-110 instead of 130-140, the
        others in about as many (docs/nn.md); ``1`` with ``curvature="soap"`` (SOAP as published).  The other
        rules take ``1`` only.
    output_lr_scale : float or None
        ``"eigen-adam"``: the layer that writes the model's output (a Linear, convolution or embedding layer called
        once in each forward of the last refresh, whose output is what the model returns, or what ``output_fn``
        takes from it, up to a reshape, a transpose or a slice; not a weight tied to another layer's, not a layer
        that also reads the data, which takes ``input_lr_scale``) steps at ``output_lr_scale * lr``.  The default
        (``None``) is ``2`` under the model's Fisher (``OUTPUT_LR_SCALE``), measured: in the step harness (3 seeds)
        it took the digits autoencoder to the race's tight target in 34-38 steps instead of 50-54, the classifier
        in 100-115 instead of 135-140 and the CNN in 70-82 instead of 100-110, the transformer and the masked
        model in about as many, and left a GRU and a depthwise-separable CNN lower at every point of their budgets;
        an ``nn.TransformerEncoder`` language model ended 1-2 % higher (docs/nn.md).  ``1`` with
        ``curvature="soap"``; the other rules take ``1`` only.
    unfactored : {"soap", "adam"}
        ``"eigen-adam"``: the step of a weight matrix without Kronecker factors of the Fisher (a recurrent
        layer's, a shared weight's): Adam in the eigenbasis of its gradient's Shampoo statistics (SOAP), or
        Adam on its raw coordinates (:mod:`.gradient_basis`).  Vectors (biases, norms) take Adam's step.
    state_dtype : "auto" or torch.dtype
        ``"eigen-adam"``: the dtype its state is held in: the Kronecker eigenbases (where the factors are held
        as their factorisation, the default periods), Adam's moments and the kept NAdam step, each computed with
        in its working dtype.  ``"auto"`` (default): ``torch.bfloat16`` where that is float32 (float32 or
        half-precision parameters and factors), which halves those bytes (docs/nn.md: optimizer state), and
        as computed for float64; ``torch.float32``/``torch.float64``: as computed (never widened).  A step
        undone holds the parameters to within the kept step's rounding.
    momentum : float
        ``"clip"``: heavy-ball momentum on the natural-gradient direction (torch SGD's rule).
    kl_clip : float, None or "auto"
        ``"clip"``'s trust region: the predicted KL of a step, :math:`\tfrac12\eta^2\delta^T(C+\lambda I)\delta`
        (with ``quadratic_model``: :math:`s^T(G+\lambda I)s`), is at most ``kl_clip``; ``"auto"``:
        ``1e-3`` under ``"clip"``, none under ``"graft"`` (whose length is Adam's).
    quadratic_model, adaptive_damping : bool
        The classic K-FAC recipe (module docstring); ``adaptive_damping`` needs a closure.
    damping_adaptation_period, damping_factor : int, float
        Levenberg–Marquardt: every so many steps multiply :math:`\lambda` by ``damping_factor``
        if :math:`\rho > 3/4`, divide if :math:`\rho < 1/4`.
    min_damping : float, optional
        Damping floor (default ``min(1e-4, damping)``).
    max_retries : int
        Retries of one step after a failure, each with the damping raised: of a failed solve, and with
        ``adaptive_damping`` of a step that increased the batch loss (undone first).
    options
        Passed to :class:`~.preconditioner.Preconditioner`: ``fisher``, ``output_metric``,
        ``samples``, ``ema_decay``, ``curvature_update_period``, ``inverse_update_period``,
        ``factor_dtype``, ``placement``, ``seed``, ``cg_max_iter``, ... (with the default periods, statistics and
        factorisations also at steps 1, 2, 4, 8, ... before the first ``inverse_update_period``; under
        ``"eigen-adam"``, which uses the factorisations alone, statistics only with them unless
        ``curvature_update_period`` is given).
    """

    #: torch's per-parameter state; this optimizer's own is in the first parameter's, under the key
    #: ``"natural_gradient"`` (as ``torch.optim.LBFGS`` keeps its own: ``torch.distributed.checkpoint`` takes
    #: an optimizer's state as per-parameter entries)
    state: Any

    def __init__(self, params: Any, lr: Optional[float] = None, curvature: str = "kfac", damping: float = 1e-3, *,
                 model: Optional[torch.nn.Module] = None, step_rule: Optional[str] = None,
                 betas: Optional[Tuple[float, float]] = None, eps: float = 1e-8,
                 nesterov: Optional[bool] = None, cautious: Optional[bool] = None,
                 input_lr_scale: Optional[float] = None, output_lr_scale: Optional[float] = None,
                 unfactored: str = "soap",
                 state_dtype: Union[str, torch.dtype] = "auto", momentum: float = 0.0,
                 kl_clip: Union[float, None, str] = "auto", quadratic_model: bool = False,
                 adaptive_damping: bool = False, damping_adaptation_period: int = 5,
                 damping_factor: float = 0.95 ** 5, min_damping: Optional[float] = None, max_retries: int = 3,
                 **options: Any):
        refuse_torch_options("NaturalGradient", options)
        whole = isinstance(params, torch.nn.Module)   # the model's parameters: all of them watched if frozen
        if whole:
            if model is not None and model is not params:
                raise ValueError("pass the model once: NaturalGradient(model, ...) or "
                                 "NaturalGradient(model.parameters(), model=model)")
            model, params = params, [p for p in params.parameters() if p.requires_grad]
            if not params:
                raise ValueError("NaturalGradient got no parameters with requires_grad=True")
        if not isinstance(model, torch.nn.Module):
            raise ValueError("NaturalGradient needs the network to compute its curvature: pass the module first, "
                             "or model=<the module whose parameters these are>")
        s = check_step_settings(model, curvature, damping, options, lr=lr, step_rule=step_rule, betas=betas, eps=eps,
                                nesterov=nesterov, cautious=cautious, input_lr_scale=input_lr_scale,
                                output_lr_scale=output_lr_scale,
                                unfactored=unfactored, state_dtype=state_dtype, momentum=momentum, kl_clip=kl_clip,
                                quadratic_model=quadratic_model, adaptive_damping=adaptive_damping,
                                damping_adaptation_period=damping_adaptation_period, damping_factor=damping_factor)
        # Adam's rates per group where the rule has them, as torch's Adam keeps them (OneCycleLR then cycles
        # betas[0]); step_rule="clip" keeps momentum, which such a scheduler cycles instead
        super().__init__(params, dict(lr=s.lr, momentum=s.momentum,
                                      **({} if s.step_rule == "clip" else {"betas": tuple(s.betas)})))
        check_groups(self.param_groups, s.step_rule)
        self.preconditioner = Preconditioner(   # those frozen now left out, and refused at a step if unfrozen
            model, curvature, damping, params=None if whole else [p for g in self.param_groups for p in g["params"]],
            lr=self, kl_clip=None if s.quadratic_model else s.kl_clip, max_retries=max_retries,
            min_damping=min(1e-4, damping) if min_damping is None else min_damping, **options)
        if self.preconditioner.sharded and (s.quadratic_model or s.adaptive_damping):
            raise ValueError("quadratic_model and adaptive_damping evaluate the model at its parameters, which "
                             "fully_shard (FSDP2) keeps sharded; use the default step rules under FSDP2")
        self.model, self._own = model, {"previous_step": None}
        self.kl_clip, self.quadratic_model, self.adaptive_damping = s.kl_clip, s.quadratic_model, s.adaptive_damping
        self.step_rule, self.betas, self.eps, self.unfactored = s.step_rule, s.betas, s.eps, unfactored
        self.nesterov, self.cautious, self.state_dtype = s.nesterov, s.cautious, s.state_dtype
        self.input_lr_scale, self.output_lr_scale = s.input_lr_scale, s.output_lr_scale
        if s.step_rule == "eigen-adam":
            self.preconditioner.estimate.basis_dtype = s.state_dtype
            self.preconditioner.estimate.read_everywhere = True   # every block's basis rotates on every rank
        self.preconditioner.owner_settings = self._settings
        self.damping_adaptation_period, self.damping_factor = s.damping_adaptation_period, s.damping_factor
        self.max_retries = self.preconditioner.max_retries

    @property
    def _own(self) -> Dict[str, Any]:
        """This optimizer's own state (the previous step), in the state of the first parameter (of the first group
        that has one: torch takes an empty group)."""
        return self.state[self._first][_KEY]

    @_own.setter
    def _own(self, value: Dict[str, Any]) -> None:
        self.state[self._first][_KEY] = value

    @property
    def _first(self) -> torch.Tensor:
        return state.first_param(self.param_groups)

    def _settings(self) -> tuple:
        """What the ranks must share beyond the preconditioner's settings (numbers and strings)."""
        return (self.step_rule, self.quadratic_model, self.adaptive_damping, self.eps, self.nesterov, self.cautious,
                str(self.state_dtype), [(g.get("betas"), g.get("momentum")) for g in self.param_groups],
                self.input_lr_scale, self.output_lr_scale)

    def _lr_scales(self) -> Dict[str, float]:
        """The parameters stepped at a multiple of their group's rate (the layers reading the data, the layer writing
        the output; one that does both takes the input's), by name."""
        recorder = self.preconditioner.recorder
        scales = dict.fromkeys(recorder.output_params(), self.output_lr_scale)
        scales.update(dict.fromkeys(recorder.input_params(), self.input_lr_scale))
        return {n: v for n, v in scales.items() if v != 1.0}

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Groups are fixed once built (the curvature covers the parameters given at construction; a group added
        later would be stepped along its raw gradient), each parameter listed once (:func:`~.settings.listed_once`)."""
        if hasattr(self, "preconditioner"):
            raise ValueError("NaturalGradient cannot take a parameter group after construction (its curvature "
                             "covers the parameters it was built with); build a new NaturalGradient with all groups")
        listed_once(param_group)
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
        pre, loss, error = self.preconditioner, None, cast(Optional[Exception], None)
        try:   # a scheduler's setting, which may be one rank's: refused after the step's agreement, as a closure's error
            check_groups(self.param_groups, self.step_rule)
        except ValueError as exc:
            error = exc
        if inputs is not None:  # the batch is named: no need to record the closure's forward
            pre.use_batch()
        if closure is not None and error is None:
            try:
                with torch.enable_grad():
                    loss = closure()
            except Exception as exc:   # agreed over the ranks by the preconditioner's step, then raised
                error = exc
        with pre.paused():
            return self._step(closure, loss, inputs, targets, error)

    def _step(self, closure, loss, inputs, targets, error):
        pre, raw = self.preconditioner, None
        if error is None:
            raw = pre.grads()
            if self.quadratic_model or self.adaptive_damping:
                raw = {n: g.clone() for n, g in raw.items()}
        if self.step_rule in _SOLVING:
            delta = pre.precondition(raw, inputs, targets, error=error)
        else:   # the rule uses the factorisation, not a solve
            delta = raw if pre.update(raw, inputs, targets, error=error) else None
        if delta is None:
            if pre.skip_reason == "gradient":
                self._undo("the gradient contains NaN or inf", raise_damping=False)
            return loss
        k = pre.steps - 1
        space = pre.space(inputs, targets) if self.quadratic_model else None
        check = self.adaptive_damping and (k + 1) % self.damping_adaptation_period == 0
        for attempt in range(self.max_retries + 1):
            model_decrease = self._update(raw, delta, space)
            if not check:
                break
            before, after = self._losses(loss, closure)
            if after <= before or attempt == self.max_retries:
                self._adapt_damping(before, after, model_decrease)
                break
            self._undo(f"the step changed the batch loss {before:.6g} -> {after:.6g}")
            delta = pre.direction(raw)
            if delta is None:
                break
            if not self.quadratic_model:
                scale = pre.clip_scale(raw, delta)
                delta = {n: d * scale for n, d in delta.items()}
        return loss

    @staticmethod
    def _losses(loss, closure):
        """The batch loss before and after the step, each the mean over the ranks (a NaN after counts as worse)."""
        error, new_loss = None, None
        try:
            with torch.enable_grad():
                new_loss = closure()
        except Exception as exc:
            error = exc
        values = [float("nan") if v is None else float(v) for v in (loss, new_loss)]
        _, rows = dd.agree(error, (), values)
        before, after = rows.mean(0).tolist()
        return before, (after if math.isfinite(after) else math.inf)

    def _update(self, raw, delta, space: Optional[ParameterSpace]) -> Optional[float]:
        """Move the parameters along ``-lr * delta`` (or the quadratic model's step); returns the model's decrease."""
        pre, st, last = self.preconditioner, self._own, LastSteps()   # recomputed to undo, not kept
        idle = {n for n, p in zip(pre.names, pre.params) if p.grad is None}   # left alone, as torch's optimizers do
        model_decrease = None
        if self.quadratic_model:
            steps, model_decrease = self._quadratic_step(raw, delta, space)
        elif self.step_rule == "eigen-adam":
            # the rotations need whole gradient matrices: under FSDP2 gathered (an all-gather each), stepped
            # whole on every rank (the moments are whole too), this rank's shard of each step kept
            whole = LastSteps() if pre.sharded else last
            rates = {id(p): tuple(g["betas"]) for g in self.param_groups for p in g["params"]}
            steps = eigen_steps(pre, self.state, fsdp.gather(raw) if pre.sharded else raw, whole, rates,
                                self.eps, self.unfactored, self.nesterov, held=self.state_dtype, idle=idle,
                                cautious=self.cautious, lr_scales=self._lr_scales())
            for n, p in zip(pre.names, pre.params):
                if pre.sharded and n not in idle:
                    steps[n] = fsdp.shard_like(steps[n], p)
                    last.record(n, partial(_shard_of, whole, n, p))
        else:
            by_id = {id(p): n for n, p in zip(pre.names, pre.params)}
            steps = {}
            for group in self.param_groups:
                for p in group["params"]:
                    name = by_id.get(id(p))
                    if name is None or name in idle:
                        continue
                    if self.step_rule == "graft":
                        pair = (group["betas"][0], group["betas"][1])
                        steps[name] = graft(self.state[p], raw[name], delta[name], group["lr"], pair, self.eps)
                        last.record(name, partial(grafted, self.state[p], group["lr"], pair, self.eps))
                    else:
                        steps[name] = heavy_ball(self.state[p], delta[name], group["lr"], group["momentum"])
        for n, p in zip(pre.names, pre.params):
            if n in idle:
                steps[n] = torch.zeros_like(p)
                if last:
                    last.record(n, partial(torch.zeros_like, p))
            else:
                p.add_(steps[n])
        if self.adaptive_damping and self.step_rule in _SOLVING and not self.quadratic_model:
            Cs = pre.curvature_mv(steps)
            model_decrease = float(sum((raw[n] * steps[n]).sum() + 0.5 * (steps[n] * Cs[n]).sum() for n in steps))
        st["previous_step"] = last if last else steps
        return model_decrease

    def _quadratic_step(self, raw, delta, space):
        pre = self.preconditioner
        lrs = pre.learning_rates()
        delta = {n: -lrs[id(p)] * delta[n] for n, p in zip(pre.names, pre.params)}
        found = quadratic.step(space, raw, delta, self._own["previous_step"], pre.damping, self.kl_clip)
        if found is None:
            warnings.warn("NaturalGradient: the quadratic model is not finite or not convex; plain step taken",
                          RuntimeWarning, stacklevel=4)
            return delta, None
        return found

    def _undo(self, why: str, raise_damping: bool = True) -> None:
        """Undo the last step (if any); a failure raises the damping (here, or already by the preconditioner)."""
        pre, st = self.preconditioner, self._own
        prev = st["previous_step"]
        if prev is not None:
            for n, p in zip(pre.names, pre.params):
                p.sub_(prev[n])
            st["previous_step"] = None
        if raise_damping:
            pre.damper.fail()   # brought back to the base by later good steps
        warnings.warn(f"NaturalGradient: {why}; {'last step undone, ' if prev is not None else ''}damping raised "
                      f"to {pre.damping:.3g}", RuntimeWarning, stacklevel=4)

    def _adapt_damping(self, loss: float, new_loss: float, model_decrease: Optional[float]) -> None:
        r"""Levenberg–Marquardt: :math:`\rho = (\mathcal J(w+s) - \mathcal J(w)) / M(s)`."""
        if not math.isfinite(loss) or model_decrease is None or not model_decrease < 0:
            return
        rho = (new_loss - loss) / model_decrease
        self.preconditioner.damper.adapt(rho, self.damping_factor)
        logger.debug("damping adaptation: rho=%.3g, damping=%.3g", rho, self.damping)

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """Tensors and Python numbers only: ``torch.load(path, weights_only=True)`` reads it back, and
        ``torch.distributed.checkpoint`` (``get_state_dict``, ``set_state_dict``) takes it as it takes torch's
        optimizers' (this optimizer's own entry in the first parameter's state, no ``None``)."""
        out = super().state_dict()
        first = state.first_param(out["param_groups"])
        # every parameter has an entry, an empty one if its step rule keeps nothing (torch's distributed
        # set_state_dict asks for one)
        states = {i: {n: v for n, v in out["state"].get(i, {}).items() if n != _KEY}
                  for g in out["param_groups"] for i in g["params"]}
        own = {"preconditioner": self.preconditioner.state_dict(),
               # the tensors of the parameters' states (a state dict filled by a distributed load is checked)
               "moments": state.tensor_count(states),
               # whose moments these are (another rule's would be read as this one's)
               "step_rule": state.name_tensor(self.step_rule)}
        prev = self._own["previous_step"]
        if prev is not None:
            own["previous_step"] = {n: t.clone() for n, t in prev.items()}
        states[first] = {**states.get(first, {}), _KEY: own}
        out["state"] = states
        return out

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, checked against this optimizer first (one ``ValueError`` naming the first
        mismatch, nothing changed); the argument is neither changed nor kept (its tensors are copied)."""
        pre = self.preconditioner
        pre_state, prev, lrs, states = state.check_optimizer(pre, self.param_groups, state_dict, _KEY, self.step_rule)
        rest = copy.deepcopy({"state": {k: v for k, v in states.items() if v},
                              "param_groups": state_dict["param_groups"]})
        for g, lr in zip(rest["param_groups"], lrs):
            g["lr"] = lr   # a float, as construction stores it (an int past 2**64 failed in the step's arithmetic)
            # Adam's rates per group where this rule has them (earlier versions kept them on the optimizer alone)
            if self.step_rule == "clip":
                g.pop("betas", None)
            else:
                g["betas"] = tuple(g.get("betas", self.betas))
        super().load_state_dict(rest)
        state.keep_saved_dtypes(self, rest)
        pre.load_state_dict(pre_state)
        self._own = {"previous_step": None if prev is None else {
            n: prev[n].detach().to(device=p.device, dtype=p.dtype).clone() for n, p in zip(pre.names, pre.params)}}


def _shard_of(whole: LastSteps, name: str, like: torch.Tensor) -> torch.Tensor:
    """This rank's shard (laid out like the parameter ``like``) of the whole step that ``whole`` recomputes for
    ``name``."""
    return fsdp.shard_like(whole[name], like)
