"""The inputs a network is called with: positional and keyword arguments, batch axis first."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Tuple, Union

import torch
from torch.func import functional_call

__all__ = ["Batch", "MissingTargets", "as_targets"]


def as_targets(targets: Any, device: Any = None) -> Any:
    """A batch's targets as a tensor: a tensor as it is, an array-like of numbers (a numpy array, a list) converted
    with ``torch.as_tensor`` onto ``device``; ``None`` stays ``None``; anything else is a ``TypeError``."""
    if targets is None or isinstance(targets, torch.Tensor):
        return targets
    array_like = hasattr(targets, "__array__") or isinstance(targets, (list, tuple))
    if not array_like:
        raise TypeError(f"targets must be a tensor or an array-like of numbers (a numpy array, a list), got "
                        f"{type(targets).__name__} {targets!r:.60}")
    try:
        t = torch.as_tensor(targets, device=device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"targets must be a tensor or an array-like of numbers (a numpy array, a list), got "
                        f"{type(targets).__name__} that torch.as_tensor cannot convert ({exc})") from None
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"targets must be real numbers, got {t.dtype}")
    return t


class MissingTargets(ValueError):
    """A computation that needs the batch's targets (the empirical Fisher, the loss) was asked for without them."""

    #: the kinds the optimizers build from the loss gradient their hooks see in the user's backward
    HOOKED = ("diag", "block", "kfac", "ekfac")

    @classmethod
    def in_optimizer(cls, kind: str, fisher: str) -> "MissingTargets":
        """The error in an optimizer's terms: no loss gradient reached the outputs in the backward."""
        hooked = kind in cls.HOOKED
        why = ("the loss was taken neither on what output_fn returns nor on a tensor it only selects from" if hooked
               else "this kind is not built in the backward")
        return cls(f"curvature={kind!r} with fisher={fisher!r} needs the batch's loss gradient at the outputs, and "
                   f"none reached them ({why}): call opt.step(closure, inputs=x, targets=y), or use fisher='mc' or "
                   f"'exact'" + ("" if hooked else f", or curvature {', '.join(map(repr, cls.HOOKED))}"))


@dataclass
class Batch:
    """``model(*args, **kwargs)``: tensors with a leading batch axis, or values passed as they are.

    :meth:`of` reads the ``data`` of a :class:`~infogeo.nn.ParameterSpace` or the ``inputs`` of an
    optimizer step: a tensor, a tuple or list of positional inputs, a dict of keyword inputs
    (e.g. ``{"input_ids": ..., "attention_mask": ...}``; a dict that is the model's one positional
    argument goes in a tuple, ``(d,)``), or a :class:`Batch`.  Only the per-example fallbacks cut
    the inputs: a tensor whose first axis has the batch's length counts as one row per example.
    """

    args: Tuple[Any, ...] = ()
    kwargs: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Any) -> "Batch":
        if isinstance(data, Batch):
            return data
        if isinstance(data, dict):
            return cls((), dict(data))
        return cls(tuple(data) if isinstance(data, (tuple, list)) else (data,))

    def tensors(self) -> List[torch.Tensor]:
        return [a for a in list(self.args) + list(self.kwargs.values()) if isinstance(a, torch.Tensor)]

    def map(self, fn: Callable[[torch.Tensor], Any]) -> "Batch":
        """``fn`` applied to every tensor input."""
        def f(a):
            return fn(a) if isinstance(a, torch.Tensor) else a
        return Batch(tuple(f(a) for a in self.args), {k: f(v) for k, v in self.kwargs.items()})

    def call(self, model: torch.nn.Module, params: Dict[str, torch.Tensor]) -> Any:
        """``model(*args, **kwargs)`` with ``params`` (and buffers) substituted, the model untouched."""
        if _wrapped is None or not any(_wrapped(p) for p in params.values()):
            return functional_call(model, params, self.args, self.kwargs, strict=False)
        with _transformable(model):   # under a torch.func transform (per-example products)
            return functional_call(model, params, self.args, self.kwargs, strict=False)

    def signature(self) -> tuple:
        """Shapes, dtypes and devices of the inputs (equal signatures: the same network shapes)."""
        def sig(a):
            return (tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else type(a)
        return tuple(sig(a) for a in self.args) + tuple((k, sig(v)) for k, v in sorted(self.kwargs.items()))

    def shapes(self) -> list:
        """For messages: each input's shape, or its type."""
        return [tuple(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
                for a in list(self.args) + list(self.kwargs.values())]

    def batched(self, n: int) -> Tuple[Dict[Union[int, str], Any], Dict[Union[int, str], Any]]:
        """``(batched, constant)``: the inputs with a leading axis of length ``n`` (keyed by position or name),
        and the others; :meth:`join` puts them back together."""
        items: Dict[Union[int, str], Any] = {i: a for i, a in enumerate(self.args)}
        items.update(self.kwargs)
        per = {k: a for k, a in items.items() if isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == n}
        return per, {k: a for k, a in items.items() if k not in per}

    def join(self, per: Dict[Any, Any], constant: Dict[Any, Any]) -> "Batch":
        """The batch of :meth:`batched`'s two parts (``per`` e.g. sliced to one example)."""
        merged = {**constant, **per}
        return Batch(tuple(merged[i] for i in range(len(self.args))),
                     {k: merged[k] for k in self.kwargs})


_wrapped = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)


@contextlib.contextmanager
def _transformable(model: torch.nn.Module):
    """The model evaluated as ``torch.func`` transforms can, its values unchanged:

    - activation checkpointing off where a module has Hugging Face's switch (``gradient_checkpointing``, set by
      ``gradient_checkpointing_enable``): its non-reentrant form keeps tensors through saved-tensor hooks, which
      the transforms refuse, and it changes what is kept, never a value;
    - ``requires_grad_`` a no-op on a transformed tensor (torch refuses it there), for the forward hooks that ask
      an activation to require grad (Hugging Face's ``enable_input_require_grads``, which the same call puts on
      the input embeddings): the transform differentiates through it whatever the flag says.

    Both are put back on leaving."""
    switched = [m for m in model.modules() if getattr(m, "gradient_checkpointing", None) is True]
    given = torch.Tensor.requires_grad_

    def requires_grad_(self, requires_grad=True):
        return self if _wrapped(self) else given(self, requires_grad)
    try:
        for m in switched:
            setattr(m, "gradient_checkpointing", False)
        torch.Tensor.requires_grad_ = requires_grad_   # type: ignore[method-assign]
        yield
    finally:
        torch.Tensor.requires_grad_ = given   # type: ignore[method-assign]
        for m in switched:
            setattr(m, "gradient_checkpointing", True)
