"""Solvers: every step is ``differential -> sharp -> retract/exp``."""
from .base import Solver
from .gradient_descent import GradientDescent
from .igo import natural_gradient_log_likelihood, quantile_weights, rank_mu_step
from .igo_parameters import StrategyParameters
from .igo_restarts import igo_minimize
from .discrete_flow import natural_gradient_flow, relaxation_natural_gradient
from .discrete_igo import DiscreteIGO
from .igo_search import IGOSearch
from .mirror import MirrorDescent, online_mle
from .newton import DampedNewton
from .proximal import ProximalPoint
from .relaxation import StochasticRelaxation, mc_natural_gradient
from .result import OptimizeResult
from .step_rules import InverseTime
from .trust_region import TrustRegion

__all__ = ["Solver", "GradientDescent", "OptimizeResult", "InverseTime",
           "DampedNewton", "ProximalPoint", "TrustRegion",
           "MirrorDescent", "online_mle", "StochasticRelaxation", "mc_natural_gradient",
           "IGOSearch", "igo_minimize", "StrategyParameters", "quantile_weights", "rank_mu_step",
           "natural_gradient_log_likelihood", "DiscreteIGO", "natural_gradient_flow", "relaxation_natural_gradient"]


def __getattr__(name):
    if name == "NaturalGradient":  # deprecated alias of GradientDescent(step_size, metric=...)
        from .gradient_descent import NaturalGradient
        return NaturalGradient
    raise AttributeError(f"module 'infogeo.solvers' has no attribute {name!r}")
