r"""The one table of curvature kinds: what ``space.curvature(kind, method)`` and the optimizers accept.

Each row (:class:`Kind`) names a representation of the network's pullback metric at a point, the
words that select it, how it is built, and how the optimizers use it.  The parameter space, the
preconditioner, the documentation's table and the conformance tests all read this table; a new kind
is one builder module and one row here.

Methods (how the output metric's columns are obtained, :meth:`~infogeo.nn.ParameterSpace.factors`):
``"exact"`` (square-root columns of :math:`G_z`: the Fisher / generalised Gauss-Newton),
``"mc"`` (sampled targets, unbiased), ``"empirical"`` (the loss gradients; Kunstner et al. 2019).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Tuple

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


def _load(path: str) -> Any:
    import importlib
    module, cls = path.split(":")
    return getattr(importlib.import_module(module, __package__), cls)


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
         inverses={"eigen": ".kron:ExactKronBlock", "tikhonov": ".kron:TikhonovKronBlock"}),
    Kind("ekfac", (), ".ekfac:EKFAC", "K-FAC's eigenbasis with the exact scales in it (George et al. 2018)",
         "the diagonal of the exact block in the Kronecker eigenbasis; the diagonal of blocks without factors"),
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
    for k in KINDS.values():
        also = ", ".join(f"`{a}`" for a in k.aliases) or "–"
        lines.append(f"| `{k.name}` | {also} | {k.description} | {k.exact} | "
                     f"{'recorded from your forward/backward' if k.captured else 'one extra forward a step'} |")
    return "\n".join(lines)
