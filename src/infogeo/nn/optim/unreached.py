r"""Parameters with a gradient but no curvature: the loss reaches them, the outputs the metric sees do not.

A model with two heads and a loss on both, whose ``output_fn`` picks one of them, gives the other head's
parameters a curvature of exactly zero: their direction is then the gradient over the damping (100 times
the gradient at ``damping=1e-2``), which a trust region or the optimizer the preconditioner serves takes
as it comes.  Nothing is wrong in the arithmetic, so it is pointed out, once per set of parameters.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any, Dict, FrozenSet, Optional, Set, Tuple

import torch

from .. import fsdp

__all__ = ["Unreached"]


class Unreached:
    """Warns when a parameter with a non-zero gradient has zero curvature (module docstring)."""

    def __init__(self) -> None:
        self._of: Optional[Tuple[Any, FrozenSet[str]]] = None   # (a weak reference to the curvature, its zeros)
        self._said: Set[FrozenSet[str]] = set()

    def _zero(self, curvature: Any) -> FrozenSet[str]:
        if self._of is None or self._of[0]() is not curvature:   # (an id could be a freed curvature's)
            try:
                # (owner-only statistics: the blocks this rank holds, their owner warns of the others)
                d: Dict[str, torch.Tensor] = getattr(curvature, "held_diagonal", curvature.diagonal)()
            except (NotImplementedError, AttributeError, RuntimeError, ValueError):   # no cheap diagonal
                d = {}
            if any(fsdp.is_dtensor(t) for t in d.values()):   # sharded: its reductions would be collectives
                d = {}
            self._of = (weakref.ref(curvature), frozenset(n for n, t in d.items() if t.numel() and not bool(t.ne(0).any())))
        return self._of[1]

    def check(self, curvature: Any, grads: Dict[str, torch.Tensor]) -> None:
        """Warn if ``grads`` is non-zero where ``curvature`` (refreshed since the last call or not) is zero."""
        if curvature is None:
            return
        hit = frozenset(n for n in self._zero(curvature) if n in grads and bool(grads[n].ne(0).any()))
        if hit and hit not in self._said:
            self._said.add(hit)
            warnings.warn(f"parameters {sorted(hit)[:4]}{' ...' if len(hit) > 4 else ''} have a gradient but zero "
                          f"curvature: the outputs the metric sees (output_fn's) do not depend on them, while the loss "
                          f"does (a second head?); their direction is the gradient over the damping. Give output_fn "
                          f"every output the loss takes (and an output metric for it), or precondition the other "
                          f"parameters only (params=)", UserWarning, stacklevel=4)
