"""Layers whose behaviour matters to the curvature: batch-coupling normalisation and active dropout."""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Dict, Iterator

import torch

__all__ = ["batch_statistics_layers", "random_layers", "uses_batch_statistics", "warn_random_layers",
           "training_with_dropout"]

_TRAINING = threading.local()

_DROPOUT = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d, torch.nn.AlphaDropout,
            torch.nn.FeatureAlphaDropout)


def uses_batch_statistics(m: torch.nn.Module) -> bool:
    """Whether ``m`` normalises with statistics of the current batch (BatchNorm in training mode, or
    without running statistics): it couples the examples of a batch."""
    return isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and (m.training or not m.track_running_stats)


def batch_statistics_layers(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    """The modules of ``model`` that :func:`uses_batch_statistics`, by path."""
    return {path: m for path, m in model.named_modules() if uses_batch_statistics(m)}


def random_layers(model: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    """Modules that draw random numbers in the forward pass (dropout with ``p > 0`` in training mode), by path."""
    out: Dict[str, torch.nn.Module] = {}
    for path, m in model.named_modules():
        if not m.training:
            continue
        if isinstance(m, _DROPOUT) and m.p > 0:
            out[path] = m
        elif isinstance(m, torch.nn.MultiheadAttention) and m.dropout > 0:
            out[path] = m
    return out


@contextlib.contextmanager
def training_with_dropout() -> Iterator[None]:
    """Spaces built inside this context (an optimizer's) take active dropout as training does, without a warning:
    the statistics recorded from the user's forward share its masks, and one from a forward of their own is a
    sample of the same random network, as each training step is."""
    before = getattr(_TRAINING, "on", False)
    _TRAINING.on = True
    try:
        yield
    finally:
        _TRAINING.on = before


def warn_random_layers(model: torch.nn.Module) -> None:
    """Warn (``UserWarning``) if the model's forward pass is random: its curvature is then random too (not inside
    :func:`training_with_dropout`)."""
    if getattr(_TRAINING, "on", False):
        return
    active = random_layers(model)
    if active:
        path, m = next(iter(active.items()))
        warnings.warn(f"layer {path!r} ({type(m).__name__}) is active in training mode: every evaluation of the "
                      f"model draws a new dropout mask, so its outputs, Jacobian and curvature are random "
                      f"({len(active)} such layer(s)); call model.eval() for the deterministic network",
                      UserWarning, stacklevel=3)


def check_per_example(model: torch.nn.Module) -> None:
    """Raise ``ValueError`` if a layer couples the examples of the batch (per-example curvature undefined)."""
    coupled = batch_statistics_layers(model)
    if coupled:
        path, m = next(iter(coupled.items()))
        raise ValueError(
            f"layer {path!r} ({type(m).__name__} in training mode) normalises with statistics of the whole "
            f"batch, so the examples are coupled and the per-example curvatures ('diag', 'kfac', 'block') "
            f"are not defined; call model.eval() first, or use kind='implicit' or 'dense' (exact for the "
            f"coupled batch)")
