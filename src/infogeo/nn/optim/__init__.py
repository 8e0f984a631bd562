"""Natural gradient for torch training loops: a gradient :class:`Preconditioner` and the :class:`NaturalGradient`
optimizer (the preconditioner followed by an SGD step)."""
from .natural_gradient import NaturalGradient
from .preconditioner import Preconditioner

__all__ = ["NaturalGradient", "Preconditioner"]
