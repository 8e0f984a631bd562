"""Solvers: every step is ``differential -> sharp -> retract/exp``."""
from .base import Solver
from .gradient_descent import GradientDescent
from .mirror import MirrorDescent, online_mle
from .newton import DampedNewton
from .proximal import ProximalPoint
from .relaxation import StochasticRelaxation, mc_natural_gradient
from .result import OptimizeResult
from .step_rules import InverseTime
from .trust_region import TrustRegion

__all__ = ["Solver", "GradientDescent", "OptimizeResult", "InverseTime",
           "DampedNewton", "ProximalPoint", "TrustRegion",
           "MirrorDescent", "online_mle", "StochasticRelaxation", "mc_natural_gradient"]


def __getattr__(name):
    if name == "NaturalGradient":  # deprecated alias of GradientDescent(step_size, metric=...)
        from .gradient_descent import NaturalGradient
        return NaturalGradient
    raise AttributeError(f"module 'infogeo.solvers' has no attribute {name!r}")
