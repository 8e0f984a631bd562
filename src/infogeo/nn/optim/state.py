r"""Checkpoints of a :class:`~.preconditioner.Preconditioner` that ``torch.load(weights_only=True)`` reads.

The state is tensors and Python numbers only: the step count, the damping, the Monte
Carlo generator's state (a byte tensor), the curvature statistics and the statistics the
current factorisation was computed from (``{"<block>/<factor>": tensor}``).  The curvature
*objects* are not saved: their structure (which block covers which parameters) comes from
the model, so at the first step after loading it is rebuilt on that step's batch and the
saved statistics are put into it; the factorisation is recomputed from its saved statistics
(deterministically, hence a bit-identical continuation).
"""
from __future__ import annotations

from typing import Any, Dict

import torch

__all__ = ["checkpoint", "load", "restore"]

_CURVATURE_KEYS = ("curvature", "solver")


def checkpoint(pre) -> Dict[str, Any]:
    """The preconditioner's state as tensors and numbers."""
    out: Dict[str, Any] = {"step": pre.state["step"], "damping": pre.state["damping"],
                           "rng": pre._generator.get_state()}
    if pre._loaded is not None:  # saved again before the next step: what was loaded
        out.update({k: v for k, v in pre._loaded.items() if k in _CURVATURE_KEYS})
        return out
    for key, c in (("curvature", pre.curvature), ("solver", pre.solver)):
        if c is not None and hasattr(c, "stats"):
            out[key] = dict(c.stats())
    return out


def load(pre, saved: Dict[str, Any]) -> None:
    """Take a :func:`checkpoint`; the statistics wait for :func:`restore` at the next step."""
    pre.state["step"], pre.state["damping"] = int(saved["step"]), float(saved["damping"])
    rng = saved["rng"]
    pre._generator.set_state(rng.cpu() if isinstance(rng, torch.Tensor) else torch.as_tensor(rng))
    pre._loaded = {k: saved[k] for k in _CURVATURE_KEYS if k in saved}
    pre.curvature = pre.solver = None
    pre.recorder.armed = pre.captures and pre.state["step"] % pre.curvature_update_period == 0


def restore(pre, inputs, targets, refresh: bool) -> None:
    """Rebuild the curvature objects from loaded statistics on a structure computed for this batch.

    The structure comes from this step's new statistics when it refreshes them, else from a
    throw-away computation with its own generator (the saved sampling state is untouched).
    """
    loaded, pre._loaded = pre._loaded, None
    if refresh:
        template = pre._statistics(inputs, targets)
        pre.pending.add(template, 1)  # used again as this step's new statistics
    else:
        template = pre._statistics(inputs, targets, generator=torch.Generator(pre._generator.device))
    device = pre.params[0].device
    if "curvature" in loaded:
        pre.curvature = template.with_stats({k: t.to(device) for k, t in loaded["curvature"].items()})
    if "solver" in loaded:
        pre.solver = pre._factorise(template.with_stats({k: t.to(device) for k, t in loaded["solver"].items()}))
