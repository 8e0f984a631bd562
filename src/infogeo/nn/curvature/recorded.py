r"""What one forward pass records of the layers: which modules are layers, and each one's calls.

A *layer* is a module owning trainable parameters directly (or adopting a child's, as
``nn.MultiheadAttention`` adopts ``out_proj``: :func:`~.layers.adopted`).  A forward hook records each
of its calls (:class:`Call`: the inputs, and the output's autograd edge without keeping the output
alive), and :func:`classify` picks the layer rule that reads it, or none (the whole-network route).
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.autograd.graph import get_gradient_edge

from .layers import LayerRule, adopted, rule_for
from .layers.base import attribute

__all__ = ["Layer", "Call", "recording_hook", "find_layers", "owners", "classify"]


def recording_hook(calls: Dict[str, list], path: str, attrs: Sequence[str] = ()) -> Callable:
    """A forward hook (``with_kwargs=True``) appending the call of layer ``path`` to ``calls[path]`` (a call with
    autograd disabled is left out).

    ``attrs``: the layer's parameters (attributes) to copy as the call used them, where its rule reads their
    values (:attr:`~.layers.base.LayerRule.reads_parameters`): FSDP2 puts the unsharded parameters in place only
    for the forward of their unit, and shards them again before the statistics are computed."""
    def hook(module, args, kwargs, output):
        if not torch.is_grad_enabled():
            # no gradient flows through this call (a branch under torch.no_grad(), the first pass of reentrant
            # checkpointing): it adds nothing to the curvature (before, it counted as a second use of the layer)
            return
        call = Call.record(args, kwargs, output)
        if attrs and rule_for(module, args, kwargs).reads_parameters:
            call.values = {a: attribute(module, a).detach().clone() for a in attrs}
        calls[path].append(call)
    return hook


@dataclass
class Layer:
    """A module that owns trainable parameters, with what one forward/backward pass recorded."""

    path: str
    module: torch.nn.Module
    params: Dict[str, str]                 # attribute name -> full parameter name
    # what one capture records (set before the rules read them; Any: present whenever a rule runs)
    rule: Any = None                         # the LayerRule; None: through the whole network (layers.network)
    inputs: Tuple[torch.Tensor, ...] = ()  # detached positional inputs (batch axis first)
    kwargs: Dict[str, Any] = field(default_factory=dict)
    grad_out: Any = None                     # (K, N, ...) output gradients
    output: Any = None                       # autograd edge of the output, during capture
    output_shape: Any = None
    stat: Any = None                         # what a reducer accumulated over the columns
    bias_stat: Any = None                    # the same for a bias with a block of its own (AffineRule.separate_bias)
    stat_unsquared: bool = False             # square_sum: ``stat`` still holds the single column b
    reached: Any = None                      # K-FAC: booleans per output row, whether any column's gradient is non-zero
    cache: Any = None                        # what the rule keeps between its parts and their gradients
    values: Any = None                       # attribute -> the parameter's value in the recorded call, if copied

    @property
    def names(self) -> List[str]:
        return list(self.params.values())

    @property
    def numel(self) -> int:
        return sum(attribute(self.module, a).numel() for a in self.params)


def find_layers(model: torch.nn.Module, names: List[str]) -> Tuple[List[Layer], List[str]]:
    """Group the parameters ``names`` of ``model`` by the module that owns them directly (or adopts their module:
    :func:`~.layers.adopted`, attribute ``child.name``).

    Returns ``(layers, shared)``: ``shared`` are the parameters held by several modules (tied
    weights, e.g. an embedding and the output projection), which belong to every use and go
    through the whole network; the layers keep their other parameters.
    """
    named = set(names)
    wanted = {id(p): n for n, p in model.named_parameters() if n in named}
    holders: Dict[str, List[Tuple[str, torch.nn.Module, str]]] = {}
    adopt = adopted(model)
    for path, m in model.named_modules():
        host = adopt.get(id(m))
        for attr, p in m._parameters.items():
            if p is not None and id(p) in wanted:
                holders.setdefault(wanted[id(p)], []).append(
                    (host[0], host[1], f"{host[2]}.{attr}") if host is not None else (path, m, attr))
    shared = [n for n in names if len(holders.get(n, ())) != 1]
    groups: Dict[str, Tuple[torch.nn.Module, Dict[str, str]]] = {}
    for n in names:
        if n in shared:
            continue
        path, m, attr = holders[n][0]
        groups.setdefault(path, (m, {}))[1][attr] = n
    return [Layer(path, m, params) for path, (m, params) in groups.items()], shared


def owners(model: torch.nn.Module, names: List[str]) -> Dict[str, List[torch.nn.Module]]:
    """The modules holding each parameter of ``names`` directly, or adopting the module that does (one for an
    untied parameter)."""
    named = set(names)
    wanted = {id(p): n for n, p in model.named_parameters() if n in named}
    out: Dict[str, List[torch.nn.Module]] = {n: [] for n in names}
    adopt = adopted(model)
    for m in model.modules():
        host = adopt.get(id(m))
        for p in m._parameters.values():
            if p is not None and id(p) in wanted:
                out[wanted[id(p)]].append(m if host is None else host[1])
    return out


@dataclass
class Call:
    """One forward call of a layer, recorded without keeping its output alive.

    The output is held only through a weak reference and its autograd edge:
    gradients are taken with respect to the edge, so the pre-activations that
    autograd itself does not save are freed before the backward passes.
    """

    args: tuple
    kwargs: dict
    edge: Any = None                   # torch.autograd.graph.GradientEdge of the output
    shape: Optional[torch.Size] = None
    version: Optional[int] = None
    ref: Optional[weakref.ref] = None
    more: tuple = ()                   # a tuple output: the edges of its other entries (None: no gradient)
    values: Optional[dict] = None      # the parameters as the call used them (recording_hook's attrs)
    multi: bool = False                # whether the output is a tuple (its first entry is ``edge``)

    @classmethod
    def record(cls, args, kwargs, output) -> "Call":
        if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
            call = cls.record(args, kwargs, output[0])
            call.multi = True
            call.more = tuple(get_gradient_edge(t) if isinstance(t, torch.Tensor) and t.requires_grad else None
                              for t in output[1:])
            return call
        if not (isinstance(output, torch.Tensor) and output.requires_grad):
            return cls(args, kwargs)
        return cls(args, kwargs, get_gradient_edge(output), output.shape, output._version, weakref.ref(output))

    @property
    def edges(self) -> list:
        """The edges of the output's tensors (``None`` where one has no gradient): one, or one per tuple entry."""
        return [self.edge, *self.more]

    def modified_in_place(self) -> bool:
        out = self.ref() if self.ref is not None else None
        return out is not None and out._version != self.version


def classify(layer: Layer, calls: List[Call], N: int) -> Optional[LayerRule]:
    """The rule of a layer called once on batch-first inputs, else ``None`` (the whole-network route)."""
    if len(calls) != 1:
        return None
    c = calls[0]
    args, kwargs = c.args, c.kwargs
    if c.edge is None or c.shape is None or c.modified_in_place() or len(c.shape) == 0 or c.shape[0] != N:
        return None  # unusual output, or modified in place after the layer (e.g. ReLU(inplace=True))
    if not args or not all(isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == N for a in args):
        return None
    rule = rule_for(layer.module, args, kwargs)
    if (c.multi and not rule.tuple_outputs) or \
            (not rule.tensor_kwargs and any(isinstance(v, torch.Tensor) for v in kwargs.values())):
        return None
    return rule.bind(layer.module, args)
