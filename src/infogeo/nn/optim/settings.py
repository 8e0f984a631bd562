r"""The preconditioner's settings: the names it accepts, and their checks at the public boundary."""
from __future__ import annotations

import math
import numbers
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

from ...geometry.points import positive_int, tensor_number
from .. import distributed as dd
from ..curvature import kinds
from .hooks import refuse_sparse

__all__ = ["CURVATURES", "FISHER", "CAPTURED", "KINDS", "PERIODS", "DECAY_STEPS", "BETAS", "kind_defaults", "step_defaults", "agrees",
           "check_settings", "check_support", "check_groups", "IGNORED_GROUP_KEYS", "TORCH_SETTINGS", "refuse_torch_options",
           "check_learning_rate", "check_group_lr", "check_betas", "MAX_COUNT", "positive_number", "trainable", "listed_once"]

#: the curvature words the optimizers accept (the kinds table, :mod:`~infogeo.nn.curvature.kinds`)
CURVATURES = kinds.ALIASES
FISHER = kinds.METHODS
#: representations built from one forward and per-column backward passes (recordable by hooks)
CAPTURED = tuple(k.name for k in kinds.KINDS.values() if k.captured)
KINDS = kinds.KINDS
#: the refresh periods of the statistics and of the factorisations, unless the user or the kind's row sets them
PERIODS = {"curvature_update_period": 10, "inverse_update_period": 100}


#: the steps over which the statistics' average keeps the weight ``ema_decay`` (the default statistics period): a
#: refresh :math:`\Delta` steps after the last keeps :math:`\beta^{\max(1,\,\Delta/10)}`, so the average
#: remembers about as many steps whatever the period
DECAY_STEPS = PERIODS["curvature_update_period"]


def kind_defaults(curvature: Any, curvature_update_period: Optional[int] = None,
                  inverse_update_period: Optional[int] = None,
                  basis_only: bool = False) -> Tuple[int, int, bool, Dict[str, Any]]:
    """The refresh periods (the user's, else the kind's ``optimizer_defaults``, else :data:`PERIODS`), whether
    the early refreshes are geometric (neither period given), and the kind's other default options (none for an
    unknown word, which :func:`check_settings` then refuses).

    ``basis_only``: the step uses the factorisation alone (``factors_only``, e.g. ``step_rule="eigen-adam"``'s
    eigenbases), so statistics recorded between two factorisations would only be averaged into the next one;
    unless the user sets it, the statistics period is then the factorisation period (statistics where a
    factorisation uses them: a tenth of the captures in a long run, the steps to a target unchanged in the race)."""
    row = KINDS.get(CURVATURES.get(str(curvature).lower(), ""))
    defaults = {**PERIODS, **(row.optimizer_defaults if row is not None else {})}
    geometric = curvature_update_period is None and inverse_update_period is None   # else the user's, exactly
    kind_periods = {k: defaults.pop(k) for k in PERIODS}
    inverse = kind_periods["inverse_update_period"] if inverse_update_period is None else inverse_update_period
    if curvature_update_period is None:
        curvature_update_period = inverse if basis_only else kind_periods["curvature_update_period"]
    return curvature_update_period, inverse, geometric, defaults


#: the largest count a setting takes (a period, samples, retries, the seed): past any run's steps, and within the
#: 64-bit integers of torch's generators and counters
MAX_COUNT = 2 ** 62


#: Adam's decay rates per step rule unless the user sets ``betas``: in an eigenbasis a faster second moment, as
#: SOAP's (Vyas et al. 2025), follows the scales through each change of basis
BETAS = {"graft": (0.9, 0.999), "clip": (0.9, 0.999), "eigen-adam": (0.9, 0.95)}


def step_defaults(curvature: Any, step_rule: Optional[str], betas: Optional[Tuple[float, float]],
                  options: Dict[str, Any], *, classic: bool, sharded: bool) -> Tuple[Any, Any]:
    """:class:`~.natural_gradient.NaturalGradient`'s step rule and betas: the user's where given, else
    ``"clip"`` for the classic recipe (``classic``: ``quadratic_model`` or ``adaptive_damping``), else the kind's
    row; ``"graft"`` if it names none, on a model sharded by ``fully_shard`` (``"eigen-adam"`` would keep whole
    moments on every rank),
    and where the user's ``options`` (e.g. K-FAC's ``inverse="tikhonov"``) leave the kind no eigenbasis.  The
    betas: the user's, else :data:`BETAS` of the rule.  Unknown words are returned as given, for the caller to
    refuse."""
    if step_rule is not None and not isinstance(step_rule, str):
        raise TypeError(f"step_rule must be a word or None, got {type(step_rule).__name__} {step_rule!r}")
    rule = step_rule
    if rule is None:
        row = KINDS.get(CURVATURES.get(str(curvature).lower(), ""))
        rule = "clip" if classic else (row.step_rule if row is not None else None) or "graft"
        basis = (row.eigenbasis if row is not None else None) or {}
        if rule == "eigen-adam" and (sharded or any(k in options and not agrees(options[k], v)
                                                    for k, v in basis.items())):
            rule = "graft"
    return rule, (BETAS.get(rule, BETAS["graft"]) if betas is None else betas)


def agrees(given: Any, wanted: Any) -> bool:
    """Whether an option's value is the one wanted (words case-insensitively)."""
    return str(given).lower() == wanted if isinstance(wanted, str) else given == wanted


def _real(name: str, value: Any) -> float:
    """``value`` as a float, if it is a real number (not a bool, a string or a tensor of several entries)."""
    value = tensor_number(value, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:   # an int past float's range: no finite setting is that large
        raise ValueError(f"{name} must be finite, got an integer of {len(str(abs(value)))} digits") from None


def positive_number(name: str, value: Any, *, minimum: float = 0.0, inclusive: bool = False,
                    maximum: float = math.inf, closed_max: bool = False) -> float:
    """``value`` as a float, if it is finite and in the range (``minimum`` excluded unless ``inclusive``)."""
    x = _real(name, value)
    low_ok = x >= minimum if inclusive else x > minimum
    high_ok = x <= maximum if closed_max else x < maximum
    if not (math.isfinite(x) and low_ok and high_ok):
        if maximum == math.inf:
            want = f"{'>=' if inclusive else '>'} {minimum:g} and finite"
        else:
            want = f"in {'[' if inclusive else '('}{minimum:g}, {maximum:g}{']' if closed_max else ')'}"
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return x


def check_learning_rate(value: Any, name: str = "lr") -> float:
    """A learning rate: finite (an infinite one turns every parameter into NaN) and >= 0; 0 takes no step, as for
    torch's optimizers (a scheduler's warm-up starts there, a cosine schedule ends there)."""
    return positive_number(name, value, inclusive=True)


#: torch's implementation switches (foreach, fused kernels, ...), which no rule here has
_SWITCHES = ("foreach", "fused", "capturable", "differentiable")
_AFTER_A_PRECONDITIONER = "a torch optimizer that has it take the steps after a Preconditioner (Preconditioner(model, lr=opt))"
#: what to do instead of each torch.optim setting that the optimizers here do not take: the one text for a parameter
#: group's key (:func:`check_groups`) and for a keyword argument (:func:`refuse_torch_options`)
TORCH_SETTINGS = {
    **dict.fromkeys(("weight_decay", "decoupled_weight_decay"), f"weight decay: add it to the loss, or let "
                                                                f"{_AFTER_A_PRECONDITIONER}"),
    "betas": "betas: a group's own with step_rule='graft' or 'eigen-adam' (with 'clip', momentum), or on the torch "
             "optimizer that takes the steps after a Preconditioner",
    "eps": "eps: set once, NaturalGradient(..., eps=...), or on the torch optimizer that takes the steps after a "
           "Preconditioner",
    "momentum": "momentum: NaturalGradient(..., step_rule='clip', momentum=...), or on the torch optimizer that "
                "takes the steps after a Preconditioner",
    "maximize": "maximize: minimise the negated objective instead (loss = -objective)",
    **dict.fromkeys(("amsgrad", "nesterov", "dampening", "alpha", "centered", "lr_decay", "initial_accumulator_value"),
                    f"a setting of another torch optimizer's rule: choose NaturalGradient's with step_rule=, or let "
                    f"{_AFTER_A_PRECONDITIONER}"),
    **dict.fromkeys(_SWITCHES, "an implementation switch of torch's own optimizers (their kernels), which these do "
                               "not have: leave it out"),
}
#: torch optimizers' per-group settings that :class:`~.natural_gradient.NaturalGradient` does not take (a group may
#: hold other keys: schedulers keep their own, e.g. ``initial_lr``, ``max_momentum``; torch's implementation
#: switches, harmless, are let through)
IGNORED_GROUP_KEYS = tuple(k for k in TORCH_SETTINGS if k not in _SWITCHES + ("momentum",))


def refuse_torch_options(owner: str, options: Dict[str, Any]) -> None:
    """Refuse a torch.optim keyword argument among the ``options`` given to ``owner`` (a ``ValueError`` saying what
    to do instead, :data:`TORCH_SETTINGS`), before anything is built or warned about."""
    for key in options:
        if key in TORCH_SETTINGS:
            raise ValueError(f"{owner} takes no keyword {key!r} (a torch.optim setting); {TORCH_SETTINGS[key]}")


def check_group_lr(value: Any, params: Iterable[torch.Tensor]) -> float:
    """A parameter group's lr as a float: :func:`check_learning_rate`'s, and within the largest number of the
    dtype of its ``params`` (at construction, at each step and in a checkpoint)."""
    lr = check_learning_rate(value, "a parameter group's lr")
    # a rate past the parameters' largest number makes every step inf, and its undoing NaN
    top = min((torch.finfo(p.dtype).max for p in params if p.is_floating_point()), default=math.inf)
    if lr > top:
        raise ValueError(f"a parameter group's lr is {value!r}, beyond the largest number of its parameters' "
                         f"dtype ({top:.3g}): every step would overflow")
    return lr


def check_betas(betas: Any, name: str = "betas") -> Tuple[float, float]:
    """Adam's decay rates ``(beta1, beta2)`` as floats in [0, 1], or a ``ValueError`` naming ``name``."""
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise ValueError(f"{name} must be a pair (beta1, beta2), got {betas!r}")
    b1, b2 = (positive_number(f"{name}[{i}]", b, inclusive=True, maximum=1.0) for i, b in enumerate(betas))
    return b1, b2


def check_groups(groups: Iterable[Dict[str, Any]], rule: str) -> None:
    """Refuse a parameter group that sets what the step rule ``rule`` would ignore (a ``ValueError`` naming it and
    what to do instead, :data:`TORCH_SETTINGS`), or an lr or momentum out of range; called at construction and at
    every step (schedulers edit the groups)."""
    for g in groups:
        extra = sorted(set(g) & set(IGNORED_GROUP_KEYS) - ({"betas"} if rule != "clip" else set()))
        if extra:
            raise ValueError(f"a parameter group sets {extra[0]!r}, which NaturalGradient does not take per group "
                             f"(its group settings: lr, and momentum for step_rule='clip', betas for the others); "
                             f"{TORCH_SETTINGS[extra[0]]}")
        check_group_lr(g["lr"], g["params"])
        positive_number("a parameter group's momentum", g["momentum"], inclusive=True, maximum=1.0)
        if rule != "clip" and g["momentum"]:
            raise ValueError(f"a parameter group's momentum is {g['momentum']!r}, but step_rule={rule!r} averages "
                             f"with betas[0]: momentum belongs to step_rule='clip' (a group's betas are this "
                             f"rule's, and a scheduler that cycles momentum, such as OneCycleLR, cycles betas[0])")
        if rule != "clip":
            check_betas(g["betas"], "a parameter group's betas")


def listed_once(group: Any) -> None:
    """Refuse a parameter group that lists one parameter twice (a ``ValueError``), its ``params`` made a list first
    (as torch does, so a generator is read once).  torch only warns, and a step rule whose moments are per parameter
    would update them twice for one step.  Sets and non-dicts are left to torch, which refuses them."""
    if not isinstance(group, dict) or isinstance(group.get("params"), (set, type(None))):
        return
    params = group["params"] = [group["params"]] if isinstance(group["params"], torch.Tensor) else list(group["params"])
    first: Dict[int, int] = {}
    for i, p in enumerate(params):
        if first.setdefault(id(p), i) != i:
            raise ValueError(f"a parameter group lists the same parameter twice (its params at positions "
                             f"{first[id(p)]} and {i}); pass each parameter once (model.parameters() lists a shared "
                             f"parameter once)")


def check_settings(*, damping, min_damping, max_damping, curvature, fisher, ema_decay, kl_clip, damping_increase,
                   damping_recovery, placement, samples, curvature_update_period, inverse_update_period, max_retries,
                   seed, cg_max_iter, factor_dtype, lr, output_fn, grad_scaler) -> Dict[str, Any]:
    """Raise a ValueError or TypeError naming the first setting that is out of range; the integers, as ints."""
    damping = positive_number("damping", damping)
    min_damping, max_damping = positive_number("min_damping", min_damping), positive_number("max_damping", max_damping)
    if not min_damping <= damping <= max_damping:
        raise ValueError(f"need 0 < min_damping <= damping <= max_damping, got {min_damping}, {damping}, "
                         f"{max_damping}")
    if str(curvature).lower() not in CURVATURES:
        raise ValueError(f"unknown curvature {curvature!r}; expected one of {sorted(CURVATURES)}")
    if str(fisher).lower() not in FISHER:
        raise ValueError(f"unknown fisher {fisher!r}; expected one of {sorted(FISHER)}")
    positive_number("ema_decay", ema_decay, inclusive=True, maximum=1.0)
    if kl_clip is not None:
        positive_number("kl_clip", kl_clip)
    positive_number("damping_increase", damping_increase, minimum=1.0)
    positive_number("damping_recovery", damping_recovery, maximum=1.0, closed_max=True)
    if placement not in dd.PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; expected one of {dd.PLACEMENTS}")
    if factor_dtype is not None and not (isinstance(factor_dtype, torch.dtype) and factor_dtype.is_floating_point):
        raise TypeError(f"factor_dtype must be a floating torch.dtype, got {factor_dtype!r}")
    if factor_dtype == torch.float16:   # curvature statistics span more than float16's 6e-8 .. 65504
        raise ValueError("factor_dtype=torch.float16 cannot hold curvature statistics (its range is 6e-8 to 65504; "
                         "a mean loss's output-gradient factor is often smaller): use torch.bfloat16 (float32's "
                         "range, half the memory) or float32")
    if lr is not None and not (callable(lr) or isinstance(lr, torch.optim.Optimizer)):
        check_learning_rate(lr)
    if output_fn is not None and not callable(output_fn):
        raise TypeError(f"output_fn must be callable, got {type(output_fn).__name__}")
    if grad_scaler is not None and not callable(getattr(grad_scaler, "get_scale", None)):
        raise TypeError(f"grad_scaler must be a torch.amp.GradScaler, got {type(grad_scaler).__name__}")
    ints = dict(samples=samples, curvature_update_period=curvature_update_period, cg_max_iter=cg_max_iter,
                inverse_update_period=inverse_update_period)
    out: Dict[str, Any] = {k: positive_int(v, k, maximum=MAX_COUNT) for k, v in ints.items()}
    out["max_retries"] = positive_int(max_retries, "max_retries", minimum=0, maximum=MAX_COUNT)
    out["seed"] = positive_int(seed, "seed", minimum=0, maximum=MAX_COUNT)
    return out


def check_support(kind: str, curvature: Any, sharded: bool) -> None:
    """Refuse, at construction, a kind that cannot run in this process group or on sharded parameters."""
    if kind == "implicit" and dd.world_size() > 1:
        raise ValueError("curvature='cg' solves with the local batch only, so the ranks of a process group "
                         "would move apart; use 'kfac', 'ekfac', 'diag' or 'block' (statistics all-reduced)"
                         + (" (not 'dense': it evaluates the model at its parameters, which fully_shard (FSDP2) keeps "
                            "sharded)" if sharded else ", or 'dense'"))
    if sharded and kind not in CAPTURED and KINDS[kind].statistics != "gradient":
        raise ValueError(f"curvature={curvature!r} evaluates the model at its parameters, which fully_shard "
                         f"(FSDP2) keeps sharded; under FSDP2 use 'kfac', 'ekfac', 'diag' or 'block' (statistics "
                         f"recorded in the model's own forward and backward), or 'shampoo' or 'soap' (statistics of "
                         f"the gradients)")


def trainable(module: torch.nn.Module, params: Optional[Iterable[Any]]) -> Tuple[List[Tuple[str, torch.nn.Parameter]],
                                                                                List[Tuple[str, torch.nn.Parameter]]]:
    """``(name, parameter)`` of ``module`` to precondition: of ``params`` (all of them ``module``'s, default all of
    ``module``'s), those with ``requires_grad=True``; and the others, watched at each step in case they are unfrozen
    (:func:`~.guards.check_unfrozen`)."""
    named = list(module.named_parameters())
    if params is not None:
        params = list(params)
        if any(not isinstance(p, torch.Tensor) for p in params):
            raise TypeError("params must be tensors of the model (e.g. model.parameters())")
        wanted = {id(p) for p in params}
        if wanted - {id(p) for _, p in named}:
            raise ValueError("a parameter given to the preconditioner does not belong to model")
        named = [(n, p) for n, p in named if id(p) in wanted]
    frozen = [(n, p) for n, p in named if not p.requires_grad]
    named = [(n, p) for n, p in named if p.requires_grad]
    if not named:
        raise ValueError("no parameters with requires_grad=True to precondition")
    meta = [n for n, p in named if p.is_meta]
    if meta:   # no values to train, nor a device for the Monte Carlo generator
        raise ValueError(f"parameter {meta[0]!r} is on the meta device (shapes without values): materialise the "
                         f"model first, e.g. model.to_empty(device=...) and then initialise its parameters (or load a "
                         f"state_dict), and build the optimizer on it")
    refuse_sparse(module, {id(p) for _, p in named})
    return named, frozen
