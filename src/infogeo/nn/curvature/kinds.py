r"""The one table of curvature kinds: what ``space.curvature(kind, method)`` and the optimizers accept.

Each row (:class:`Kind`) names a representation of a metric on the parameters, the words that select
it, how it is built, and how the optimizers use it: most rows represent the network's pullback metric
at a point (the model's Fisher / GGN); ``statistics="gradient"`` rows are the metrics of Shampoo and
SOAP instead, built from the mini-batch gradients themselves (:mod:`.shampoo`).  The parameter space, the
preconditioner, the documentation's table and the conformance tests all read this table; a new kind
is one builder module and one row here.

Methods (how the output metric's columns are obtained, :meth:`~infogeo.nn.ParameterSpace.factors`):
``"exact"`` (square-root columns of :math:`G_z`: the Fisher / generalised Gauss-Newton),
``"mc"`` (sampled targets, unbiased), ``"empirical"`` (the loss gradients; Kunstner et al. 2019).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ...geometry.points import check_flag, positive_int

__all__ = ["Kind", "KINDS", "METHODS", "ALIASES", "kind", "method", "table"]

#: how the output columns are obtained, with the words that select each
METHODS: Dict[str, str] = {"exact": "exact", "mc": "mc", "true": "mc", "empirical": "empirical"}


@dataclass(frozen=True)
class Kind:
    """One curvature representation (module docstring)."""

    #: canonical name
    name: str
    #: other words accepted for it
    aliases: Tuple[str, ...]
    #: ``"module:Class"`` of the representation (its ``build``), imported when first built
    builder: str
    #: one line for the documentation
    description: str
    #: what of the exact curvature it reproduces (the conformance tests check this view)
    exact: str
    #: statistics recorded from the user's own forward and backward by the optimizer's hooks
    captured: bool = True
    #: options the optimizers pass unless the user sets them
    optimizer_defaults: Dict[str, Any] = field(default_factory=dict)
    #: usable under torch.distributed by the optimizers (statistics averaged over the ranks)
    distributed: bool = True
    #: the values of the ``inverse`` option and the block class each selects (``"module:Class"``)
    inverses: Dict[str, str] = field(default_factory=dict)
    #: what it is built from: ``"metric"`` (the network's pullback metric at a point, from the output metric's
    #: columns; the conformance tests check :attr:`exact` against the dense metric) or ``"gradient"`` (the loss
    #: gradients alone; the optimizers read ``.grad``, which data parallelism has already averaged)
    statistics: str = "metric"
    #: options with which the optimizers' ``step_rule="eigen-adam"`` finds an eigenbasis in its Kronecker blocks
    #: and skips what it does not use (``None``: it has none)
    eigenbasis: Optional[Dict[str, Any]] = None
    #: the step rule :class:`~infogeo.nn.NaturalGradient` takes with this kind unless told (``None``: ``"graft"``;
    #: ``"eigen-adam"`` falls back to ``"graft"`` on a model sharded by ``fully_shard``, where it is refused)
    step_rule: Optional[str] = None

    def load(self) -> Any:
        """The class that builds this kind."""
        return _load(self.builder)

    def inverse(self, word: Any) -> Any:
        """The block class the ``inverse`` option ``word`` selects, or a ``ValueError`` listing the values."""
        path = self.inverses.get(str(word).lower())
        if path is None:
            title = {"kfac": "K-FAC"}.get(self.name, self.name)
            raise ValueError(f"unknown {title} inverse {word!r}; expected one of {tuple(self.inverses)}")
        return _load(path)

    def check_options(self, options: Dict[str, Any]) -> None:
        """Refuse, before anything is built, an option this kind's builder does not take or a value it cannot use
        (a ``ValueError`` naming it); kinds whose builders ignore the options they do not know take any."""
        params = inspect.signature(self.load().build).parameters.values()
        if not any(p.kind is p.VAR_KEYWORD and p.name == "ignored" for p in params):
            known = [p.name for p in params if p.default is not p.empty and p.name not in _INTERNAL]
            unknown = sorted(set(options) - set(known))
            if unknown:
                raise ValueError(f"curvature={self.name!r} takes no option {unknown[0]!r}; its options are {known}")
        self.check_values(options)

    def check_values(self, options: Dict[str, Any]) -> None:
        """Refuse an option value the builder cannot use (:meth:`check_options` without the names: a builder's call
        carries the optimizers' own arguments too)."""
        if "inverse" in options:
            self.inverse(options["inverse"])
        for name, check in _OPTION_VALUES.items():
            if name in options:
                check(name, options[name])
        if {"max_factor_dim", "max_factor_bytes"} & set(options):
            from .kfac import MAX_FACTOR_BYTES, MAX_FACTOR_DIM, check_factor_limits
            check_factor_limits(options.get("max_factor_dim", MAX_FACTOR_DIM),
                                options.get("max_factor_bytes", MAX_FACTOR_BYTES))


#: the checks of the options' values that several builders take: counts >= 1 (an entry budget, a block side),
#: flags (a truthy word or number is refused rather than read as True)
_OPTION_VALUES = {"chunk_elements": lambda name, v: positive_int(v, name),
                  "max_block_size": lambda name, v: positive_int(v, name),
                  "per_position": check_flag, "factors_only": check_flag}

#: builder arguments the optimizers set themselves (EKFAC's basis carried between refreshes)
_INTERNAL = ("basis", "defer")


def _load(path: str) -> Any:
    import importlib
    module, cls = path.split(":")
    return getattr(importlib.import_module(module, __package__), cls)


#: gradient statistics are two products per layer: renewed every step, their eigenbases every 10 (SOAP's frequency)
_GRADIENT_PERIODS = {"curvature_update_period": 1, "inverse_update_period": 10}

KINDS: Dict[str, Kind] = {k.name: k for k in [
    Kind("dense", (), ".dense:Dense", "the full matrix (small networks); Cholesky solves", "the whole matrix",
         captured=False),
    Kind("implicit", ("cg",), ".implicit:Implicit", "matrix-free products (jvp, output metric, vjp); CG solves",
         "every product", captured=False, distributed=False),
    Kind("diag", ("diagonal",), ".diagonal:Diagonal", "the diagonal", "the diagonal"),
    Kind("block", ("block_diagonal",), ".block:BlockDiagonal", "a dense block per layer (diagonal for large ones)",
         "each layer's block"),
    Kind("kfac", (), ".kfac:KFAC", "Kronecker factors G ⊗ A per layer with a rule for them, exact diagonal "
         "blocks elsewhere (Martens & Grosse 2015)", "the diagonal of blocks without Kronecker factors; a single "
         "affine layer under the Euclidean metric", optimizer_defaults={"inverse": "tikhonov"},
         inverses={"eigen": ".eigenbasis:ExactKronBlock", "tikhonov": ".kron:TikhonovKronBlock"},
         eigenbasis={"inverse": "eigen", "factors_only": True}, step_rule="eigen-adam"),
    Kind("ekfac", (), ".ekfac:EKFAC", "K-FAC's eigenbasis with the exact scales in it (George et al. 2018)",
         "the diagonal of the exact block in the Kronecker eigenbasis; the diagonal of blocks without factors",
         eigenbasis={}),   # its scales are what the grafted step uses; under eigen-adam they would go unused
    Kind("shampoo", (), ".shampoo:Shampoo", "Shampoo's metric L^¼ ⊗ R^¼ per matrix, L = ḡḡᵀ and R = ḡᵀḡ of the "
         "mini-batch gradient ḡ, diag(ḡ²)^½ for vectors (Gupta et al. 2018)", "– (not the model's metric)",
         captured=False, statistics="gradient", eigenbasis={}, optimizer_defaults=_GRADIENT_PERIODS),
    Kind("soap", (), ".shampoo:Shampoo", "Shampoo's statistics, with Adam in their eigenbasis (SOAP; "
         "NaturalGradient's step rule defaults to `eigen-adam`; Vyas et al. 2025)", "– (not the model's metric)",
         captured=False, statistics="gradient", eigenbasis={}, optimizer_defaults=_GRADIENT_PERIODS,
         step_rule="eigen-adam"),
]}

#: every accepted word -> canonical name
ALIASES: Dict[str, str] = {w: k.name for k in KINDS.values() for w in (k.name,) + k.aliases}


def kind(word: Any) -> Kind:
    """The :class:`Kind` a word selects (case-insensitive), or a ``ValueError`` listing the words accepted."""
    name = ALIASES.get(str(word).lower())
    if name is None:
        raise ValueError(f"unknown curvature kind {word!r}; expected one of {sorted(ALIASES)}")
    return KINDS[name]


def method(word: Any) -> str:
    """The canonical method a word selects, or a ``ValueError`` listing the words accepted."""
    m = METHODS.get(str(word).lower())
    if m is None:
        raise ValueError(f"unknown method {word!r}; expected one of {sorted(METHODS)}")
    return m


def table() -> str:
    """A markdown table of the kinds (the documentation's table is made from it)."""
    lines = ["| kind | also | representation | exact part | optimizers' hooks |", "|---|---|---|---|---|"]
    hooks = {"metric": ("one extra forward a step", "recorded from your forward/backward"),
             "gradient": ("none: the gradients in `.grad`",) * 2}
    for k in KINDS.values():
        also = ", ".join(f"`{a}`" for a in k.aliases) or "–"
        lines.append(f"| `{k.name}` | {also} | {k.description} | {k.exact} | {hooks[k.statistics][k.captured]} |")
    return "\n".join(lines)
