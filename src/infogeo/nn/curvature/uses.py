r"""Where a forward pass uses each parameter: inside the module that owns it, or elsewhere.

A layer rule computes a parameter's pseudo-gradients from the calls of the module that owns it.
That is the parameter's whole gradient only if nothing else touches it: a weight applied again
outside its module (``F.linear(h, self.embedding.weight)``, attention reading ``out_proj.weight``
without calling ``out_proj``) contributes through a path the rule never sees.  :class:`ForeignUses`
watches one forward pass (a :class:`~torch.overrides.TorchFunctionMode` and hooks on the owners)
and reports the parameters used while none of their owners was running; those go through the
whole network instead, which is exact.

Under FSDP2 (``fully_shard``) the forward does not use the parameters ``named_parameters()`` gave at
construction (sharded DTensors): before a module's forward, FSDP2 puts an all-gathered parameter of its
own in their place.  ``stand_ins`` maps each watched tensor to the one used for it
(:func:`infogeo.nn.fsdp.unsharded`); it is read again when an unknown parameter is met, as FSDP2 creates
those objects at their first all-gather, which may come after the watch started.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Set

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["ForeignUses"]

# reading a tensor's metadata is not a use
_METADATA = {torch.Tensor.size, torch.Tensor.dim, torch.Tensor.numel, torch.Tensor.stride,
             torch.Tensor.element_size, torch.Tensor.is_floating_point, torch.Tensor.data_ptr,
             torch.Tensor.requires_grad_, torch.Tensor.__hash__}


class ForeignUses(TorchFunctionMode):
    """Within this block, record which of ``tensors`` (name -> the tensor the forward will use) are used
    by a torch function while none of their ``owners`` (name -> modules) is inside its forward.

    Enter before the forward pass and exit after it; :attr:`foreign` holds the names found.
    """

    def __init__(self, tensors: Dict[str, torch.Tensor], owners: Dict[str, List[torch.nn.Module]],
                 inside: Iterable[torch.nn.Module] = (),
                 stand_ins: Optional[Callable[[], Dict[int, torch.Tensor]]] = None):
        """``inside``: modules whose forward is already running when the watch starts (entered from their
        own forward pre-hook): they count as active until the watch ends.  ``stand_ins()``: ``id(tensor) -> the
        tensor the forward uses in its place`` (FSDP2's unsharded parameters), or ``None``."""
        super().__init__()
        self._ids = {id(t): n for n, t in tensors.items()}
        self._tensors = list(tensors.values())   # kept alive, so that their ids stay theirs
        self._stand_ins, self._names = stand_ins, dict(self._ids)   # the watched tensors' own ids
        self._strangers: Dict[int, torch.Tensor] = {}   # parameters known not to stand in for a watched one
        if stand_ins is not None:
            self._refresh()
        self._owners = {n: [id(m) for m in ms] for n, ms in owners.items()}
        self._active: Dict[int, int] = {}
        self.foreign: Set[str] = set()
        self._handles: list = []
        modules = {id(m): m for ms in owners.values() for m in ms}
        for m in inside:
            self._active[id(m)] = 1
            modules.pop(id(m), None)
        for m in modules.values():
            self._handles.append(m.register_forward_pre_hook(self._enter_module))
            self._handles.append(m.register_forward_hook(self._leave_module, always_call=True))

    def _refresh(self) -> None:
        """Add the tensors standing in for the watched ones (``stand_ins``) to those watched."""
        for i, t in self._stand_ins().items():   # type: ignore[misc]  # only called when given
            name = self._names.get(i)
            if name is not None and id(t) not in self._ids:
                self._ids[id(t)] = name
                self._tensors.append(t)

    def _name(self, t: torch.Tensor) -> Optional[str]:
        name = self._ids.get(id(t))
        if name is None and self._stand_ins is not None and isinstance(t, torch.nn.Parameter) \
                and id(t) not in self._strangers:
            self._refresh()   # a parameter FSDP2 all-gathered for the first time since the watch started
            name = self._ids.get(id(t))
            if name is None:
                self._strangers[id(t)] = t   # kept alive, so that its id stays its own
        return name

    def _enter_module(self, module, args):
        self._active[id(module)] = self._active.get(id(module), 0) + 1

    def _leave_module(self, module, args, output):
        self._active[id(module)] = self._active.get(id(module), 0) - 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _METADATA:
            return out
        if getattr(func, "__name__", "") == "__get__":
            # an attribute: a use when it gives a tensor of the parameter's values (``w.T``, ``w.mT``), not
            # metadata (``w.shape``, ``w.dtype``)
            if isinstance(out, torch.Tensor):
                self._scan(args[:1])
            return out
        self._scan(args)
        if kwargs:
            self._scan(kwargs.values())
        return out

    def _scan(self, items) -> None:
        """Note the watched tensors among ``items`` (nested in lists, tuples and dicts) used outside their owners.
        A plain recursion: this runs on every torch function of the forward, where a general pytree walk cost
        about 5 % of a diagonal Monte Carlo curvature of a small MLP."""
        for t in items:
            if isinstance(t, torch.Tensor):
                name = self._name(t)
                if name is not None and not any(self._active.get(i, 0) for i in self._owners.get(name, ())):
                    self.foreign.add(name)
            elif isinstance(t, (list, tuple)):
                self._scan(t)
            elif isinstance(t, dict):
                self._scan(t.values())

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for h in self._handles:
                h.remove()
            self._handles = []

