r"""The layer rules: one file per layer type, one registry that lists them in order.

Each rule (:class:`~.base.LayerRule`) says how to read a layer's recorded inputs and output
gradients, its per-row pseudo-gradients, its exact diagonal, and its Kronecker factors (or
that it has none).  The curvatures ask the rule of each layer; nothing else in
:mod:`infogeo.nn` tests for a layer type.  Rules are tried in registry order and the first
that :meth:`~.base.LayerRule.matches` a layer's call is used; :class:`~.module.ModuleRule`
(any module) is last.  Register a rule for your own layer with :func:`register`::

    class MyRule(ig.nn.curvature.layers.AffineRule): ...
    ig.nn.curvature.layers.register(MyRule())       # tried before the built-in rules

Parameters that no rule can take (a module called several times, shared or tied weights,
uses outside the owning module) go through the whole network (:mod:`.network`), exactly.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from .attention import AttentionRule
from .base import AffineRule, LayerRule, Part
from .batchnorm import BatchNormRule
from .conv import ConvRule
from .conv_transpose import ConvTransposeRule
from .embedding import EmbeddingRule
from .embedding_bag import EmbeddingBagRule
from .hf_conv1d import HFConv1DRule
from .linear import LinearRule
from .module import ModuleRule

__all__ = ["LayerRule", "AffineRule", "Part", "LinearRule", "HFConv1DRule", "ConvRule", "ConvTransposeRule",
           "EmbeddingRule", "EmbeddingBagRule", "BatchNormRule", "AttentionRule", "ModuleRule", "RULES",
           "register", "unregister", "rule_for", "adopted", "support_table"]

#: the rules in the order they are tried (the generic :class:`~.module.ModuleRule` last)
RULES: List[LayerRule] = [LinearRule(), HFConv1DRule(), ConvRule(), ConvTransposeRule(), EmbeddingRule(),
                          EmbeddingBagRule(), BatchNormRule(), AttentionRule(), ModuleRule()]


def register(rule: LayerRule, before: Optional[str] = None) -> LayerRule:
    """Add ``rule`` to the registry, before the rule named ``before`` (default: first, ahead of the built-ins).

    A rule of the same name is replaced.  Returns ``rule`` (usable as a class decorator's result).
    """
    if not isinstance(rule, LayerRule):
        raise TypeError(f"register takes a LayerRule instance, got {type(rule).__name__}")
    unregister(rule.name)
    names = [r.name for r in RULES]
    if before is None:
        RULES.insert(0, rule)
    elif before in names:
        RULES.insert(names.index(before), rule)
    else:
        raise ValueError(f"no layer rule named {before!r}; registered: {names}")
    return rule


def unregister(name: str) -> None:
    """Remove the rule called ``name`` (if registered); the generic module rule cannot be removed."""
    if name == ModuleRule.name:
        raise ValueError("the generic 'module' rule is the fallback of every layer and cannot be removed")
    RULES[:] = [r for r in RULES if r.name != name]


def rule_for(module: torch.nn.Module, args: tuple, kwargs: dict) -> LayerRule:
    """The first registered rule that handles the call ``module(*args, **kwargs)``."""
    for rule in RULES:
        if rule.matches(module, args, kwargs):
            return rule
    raise AssertionError("unreachable: the module rule matches every call")  # pragma: no cover


def adopted(model: torch.nn.Module) -> Dict[int, Tuple[str, torch.nn.Module, str]]:
    """``id(child) -> (parent's path, parent, child's name)`` for the children whose parameters a rule counts as
    their parent's (:meth:`~.base.LayerRule.adopts`): the parent's forward uses them without calling the child."""
    out: Dict[int, Tuple[str, torch.nn.Module, str]] = {}
    for path, m in model.named_modules():
        for rule in RULES:
            for name in rule.adopts(m):
                out.setdefault(id(m.get_submodule(name)), (path, m, name))
    return out


def support_table() -> str:
    """A markdown table of the registered rules (the documentation's support table is made from it)."""
    lines = ["| rule | layers | Kronecker factors (K-FAC, EKFAC) |", "|---|---|---|"]
    for r in RULES:
        lines.append(f"| `{r.name}` | {r.description} | {'yes' if r.kronecker else 'no: exact diagonal block'} |")
    lines.append("| `network` | parameters no rule can take: modules called several times, tied weights, uses "
                 "outside the owning module | no: exact diagonal block through the whole network |")
    lines.append("| (unused) | parameters of a module the forward never calls | no: zero (nothing reached them) |")
    return "\n".join(lines)
