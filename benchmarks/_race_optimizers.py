"""The contestants of ``optimizer_race.py``: each a learning-rate grid (four values for every tuned
optimizer) and a factory ``make(model, lr, workload) -> step``, where ``step(closure)`` runs one
training iteration (the closure does the forward and backward and returns the loss).

Peers come from torch (SGD with momentum, AdamW), ``pytorch-optimizer`` (SOAP, Shampoo, Muon) and
``kfac-pytorch`` (K-FAC with SGD momentum); a peer whose package is missing is skipped.  infogeo's own
Shampoo and SOAP ("NG shampoo", "NG soap": ``NaturalGradient`` with the gradient-statistics kinds) run
next to its natural gradient under the model's Fisher.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence

import torch

import infogeo as ig


@dataclass
class Contestant:
    name: str
    grid: Sequence[Optional[float]]   # (None,): the optimizer's own default, untuned
    make: Callable[..., Callable]
    infogeo: bool = False
    needs: Optional[str] = None       # the module a peer needs
    fisher: bool = True               # infogeo under the model's Fisher (the verdict's variants), not a gradient metric


def _plain(opt: torch.optim.Optimizer) -> Callable:
    def step(closure):
        opt.zero_grad(set_to_none=True)
        loss = closure()
        opt.step()
        return loss
    return step


def pytorch_optimizer():
    """``pytorch_optimizer``, imported without its optional ``transformers`` integration if that one is broken."""
    try:
        return importlib.import_module("pytorch_optimizer")
    except ImportError:
        for name in [m for m in sys.modules if m.startswith(("pytorch_optimizer", "transformers"))]:
            del sys.modules[name]
        sys.modules["transformers"] = None   # find_spec then reports it absent
        try:
            return importlib.import_module("pytorch_optimizer")
        finally:
            del sys.modules["transformers"]


def _linear_like(model):
    """Parameters of Linear/Conv layers' weights other than the first and last layer (the Muon set), and the rest."""
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    hidden = {id(m.weight) for m in layers[1:-1]}
    return ([p for p in model.parameters() if id(p) in hidden],
            [p for p in model.parameters() if id(p) not in hidden])


def _muon(model, lr, workload):
    po = pytorch_optimizer()
    hidden, rest = _linear_like(model)
    groups = [dict(params=hidden, lr=lr, use_muon=True), dict(params=rest, lr=lr / 10, use_muon=False)]
    return _plain(po.Muon(groups, lr=lr, adamw_lr=lr / 10, adamw_betas=(0.9, 0.95)))


def _soap(model, lr, workload):
    return _plain(pytorch_optimizer().SOAP(model.parameters(), lr=lr, weight_decay=0.0,
                                           precondition_frequency=10))


def _shampoo(model, lr, workload):
    po = pytorch_optimizer()
    from pytorch_optimizer.optimizer.utils.graft import LayerWiseGrafting
    return _plain(po.ScalableShampoo(model.parameters(), lr=lr, start_preconditioning_step=10,
                                     preconditioning_compute_steps=10, graft_type=LayerWiseGrafting.RMSPROP,
                                     betas=(0.9, 0.999)))


def _kfac_pytorch(model, lr, workload):
    from kfac.preconditioner import KFACPreconditioner
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    pre = KFACPreconditioner(model, factor_update_steps=10, inv_update_steps=100, damping=0.003, lr=lambda k: lr,
                             skip_layers=["Embedding"])
    return _preconditioned_step(pre, opt)


def _preconditioned_step(pre, opt):
    """A step of a preconditioner followed by a torch optimizer, the drop-in loop of both libraries."""
    def step(closure):
        opt.zero_grad(set_to_none=True)
        loss = closure()
        pre.step()
        opt.step()
        return loss
    return step


def _preconditioned_adamw(model, lr, workload):
    """The K-FAC direction handed to AdamW (the Preconditioner's drop-in form)."""
    pre = ig.nn.Preconditioner(model, "kfac", 1e-3, output_metric=workload.output_metric, kl_clip=None)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    return _preconditioned_step(pre, opt)


def _natural_gradient(**fixed):
    def make(model, lr, workload):
        kw = dict(fixed)
        if lr is not None:
            kw["lr"] = lr
        return _plain(ig.nn.NaturalGradient(model, output_metric=workload.output_metric, **kw))
    return make


ADAM_GRID = (3e-4, 1e-3, 3e-3, 1e-2)
#: Adam in an eigenbasis (SOAP, NaturalGradient's "eigen-adam") takes larger rates: both chose 1e-2, the top of
#: ADAM_GRID, on the autoencoder and the transformer
EIGEN_GRID = (1e-3, 3e-3, 1e-2, 3e-2)
SGD_GRID = (0.01, 0.03, 0.1, 0.3)

CONTESTANTS: Dict[str, Contestant] = {c.name: c for c in (
    Contestant("SGD", SGD_GRID, lambda m, lr, w: _plain(torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9))),
    Contestant("AdamW", ADAM_GRID, lambda m, lr, w: _plain(torch.optim.AdamW(m.parameters(), lr=lr,
                                                                              weight_decay=0.0))),
    Contestant("SOAP", EIGEN_GRID, _soap, needs="pytorch_optimizer"),
    Contestant("Shampoo", ADAM_GRID, _shampoo, needs="pytorch_optimizer"),
    Contestant("Muon", (3e-3, 1e-2, 3e-2, 1e-1), _muon, needs="pytorch_optimizer"),
    Contestant("kfac-pytorch", SGD_GRID, _kfac_pytorch, needs="kfac"),
    Contestant("Pre+AdamW", ADAM_GRID, _preconditioned_adamw, infogeo=True),
    Contestant("NG clip", (0.03, 0.1, 0.3, 1.0), _natural_gradient(step_rule="clip"), infogeo=True),
    Contestant("NG eigen", EIGEN_GRID, _natural_gradient(step_rule="eigen-adam"), infogeo=True),
    Contestant("NG graft", ADAM_GRID, _natural_gradient(step_rule="graft"), infogeo=True),
    # the gradients' metrics in the same loop (the kinds "shampoo" and "soap"): Shampoo grafted onto Adam's
    # length, and SOAP (Adam in the gradient factors' eigenbasis)
    Contestant("NG shampoo", ADAM_GRID, _natural_gradient(curvature="shampoo"), infogeo=True, fisher=False),
    Contestant("NG soap", EIGEN_GRID, _natural_gradient(curvature="soap"), infogeo=True, fisher=False),
    Contestant("NG defaults", (None,), _natural_gradient(), infogeo=True),
    # the defaults with Adam's first moment instead of NAdam's (the default before nesterov=True)
    Contestant("NG adam-moment", (None,), _natural_gradient(nesterov=False), infogeo=True),
    # the defaults without the cautious mask (the default before cautious=True)
    Contestant("NG unmasked", (None,), _natural_gradient(cautious=False), infogeo=True),
)}


def available(c: Contestant) -> bool:
    """Whether the contestant's package imports."""
    if c.needs is None:
        return True
    try:
        if c.needs == "pytorch_optimizer":
            pytorch_optimizer()
        else:
            importlib.import_module(c.needs)
        return True
    except Exception:   # a peer that does not import is skipped, whatever its import raises
        return False


def build(c: Contestant, model: torch.nn.Module, lr: Optional[float], workload: Any) -> Callable:
    return c.make(model, lr, workload)
