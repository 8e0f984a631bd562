r"""Hooks on the user's own forward and backward that record what the curvature needs.

On a step that refreshes the curvature statistics, the next forward pass of the
model (with autograd enabled) records each layer's inputs and the autograd edge
of its output, and hooks the model's output :math:`z`.  When the user's
``loss.backward()`` reaches :math:`z`, the graph below it is still alive: the
curvature's output columns (Monte Carlo samples or square-root columns of
:math:`G_z`) are back-propagated through it to the layer outputs right there, by a
reentrant backward that keeps the graph for the user's own backward to finish.
So a refresh costs extra *backward* work only (one pass per column), and a step
that does not refresh costs nothing but an idle Python hook per layer.
"""
from __future__ import annotations

import contextlib
import logging
import weakref
from functools import partial
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

import torch

from .. import fsdp
from ..batch import Batch
from ..curvature import recorded
from ..curvature.layers import rule_for
from ..curvature.uses import ForeignUses
from .compiled import EagerWhileArmed, compiling

logger = logging.getLogger(__name__)

__all__ = ["ForwardRecorder", "Hook", "OutputGradients", "unwrap", "MAX_PENDING"]

#: forward outputs held at once while waiting for their backward
MAX_PENDING = 4


def _sharded(module: torch.nn.Module) -> Optional[str]:
    """Why ``module``'s parameters cannot be preconditioned, by name (no import of torch.distributed's optional
    parts); ``None`` for plain parameters and those FSDP2 shards."""
    for path, m in module.named_modules():
        names = fsdp.class_names(m)
        where = f" (module {path!r})" if path else ""
        if any(n.startswith("torch.distributed.fsdp") and n.endswith(".FullyShardedDataParallel") for n in names):
            return (f"the model is wrapped in FullyShardedDataParallel (FSDP1){where}: its flat, sharded "
                    f"parameters hide the layers the curvature is built from, and with use_orig_params=True "
                    f"each rank holds only a slice")
    fsdp2 = fsdp.managed(module)
    for name, p in module.named_parameters():
        if fsdp2.get(id(p)):
            return (f"parameter {name!r} is sharded by fully_shard (FSDP2) on top of tensor parallelism "
                    f"(a DTensor before fully_shard): each rank's layers compute a slice of the outputs")
        if id(p) not in fsdp2 and fsdp.is_dtensor(p):
            return (f"parameter {name!r} is a DTensor (tensor parallelism or a replicated/sharded DeviceMesh "
                    f"layout) not sharded by fully_shard: each rank's curvature would see a different slice of "
                    f"the layers")
    plain = [name for name, p in module.named_parameters() if p.requires_grad and id(p) not in fsdp2]
    if fsdp2 and plain:   # FSDP2 reduces the gradients of what it shards only: these would differ between the ranks
        return (f"parameters {plain[:4]} are not sharded by fully_shard (FSDP2) while the model's others are: their "
                f"gradients are not averaged over the ranks, whose copies would drift apart; call fully_shard on the "
                f"root module too, after its layers (fully_shard(model), FSDP2's usual layout)")
    return None


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module a ``DistributedDataParallel`` (or ``DataParallel``) wrapper holds, else ``model``.

    Models sharded with ``fully_shard`` (FSDP2) are supported (:mod:`infogeo.nn.fsdp`); other sharded models
    are refused here, at construction, with what to use instead: FSDP1 (``FullyShardedDataParallel``, flat
    parameters or ``use_orig_params``), tensor parallelism (also under ``fully_shard``) and any other DTensor
    parameter (replicated meshes).
    """
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, wrappers):
        model = model.module
    why = _sharded(model)
    if why is not None:
        raise ValueError(f"{why}. infogeo's natural gradient supports data parallelism and FSDP2: shard the plain "
                         f"model with torch.distributed.fsdp.fully_shard (FSDP2; each rank holds a shard of every "
                         f"parameter), or wrap it in torch.nn.parallel.DistributedDataParallel (each rank holds the "
                         f"whole model); the curvature statistics are all-reduced and the factorisations spread "
                         f"over the ranks")
    return model


def refuse_sparse(module: torch.nn.Module, ids: set) -> None:
    """Refuse, by name, a layer whose gradient would be a sparse tensor (``Embedding(sparse=True)``)."""
    for path, m in module.named_modules():
        if getattr(m, "sparse", False) is True and isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) \
                and any(id(p) in ids for p in m.parameters(recurse=False)):
            raise ValueError(f"{type(m).__name__} {path!r} has sparse=True: its gradient is a sparse tensor, "
                             f"which the curvature cannot precondition; build it with sparse=False, or leave its "
                             f"parameters out with params=")


class ForwardRecorder:
    r"""Persistent hooks on ``module`` feeding ``on_backward(z, calls, inputs, dL/dz)`` once per arming.

    ``inputs`` of every forward run with autograd enabled are kept (a reference, no copy),
    for the curvatures that need the batch again (dense, CG, the quadratic model).
    While :attr:`armed`, every such forward also records the layer calls, and a backward
    through its output :math:`z` calls ``on_backward`` (several forwards of one step, such as
    micro-batches or the two branches of a siamese loss, each report their batch; a forward
    whose output is never back-propagated reports nothing; ``output_fn`` picks :math:`z` from what
    the model returns).  ``on_forward()`` runs at the start of every forward not :meth:`paused`
    (any earlier backward is over then).  :meth:`release` drops what is still pending (at most
    :data:`MAX_PENDING` outputs are held).  Forward passes under ``torch.no_grad()`` (evaluation)
    or inside :meth:`paused` are ignored.
    """

    def __init__(self, module: torch.nn.Module, names: List[str],
                 on_backward: Callable[[torch.Tensor, Dict[str, list], tuple, torch.Tensor], None],
                 on_forward: Optional[Callable[[], None]] = None, output_fn: Optional[Callable] = None):
        self.module = module
        self.on_forward, self.output_fn = on_forward, output_fn
        #: output shape -> where output_fn only selects its entries (a rearrangement, a slice): the entries it leaves
        #: out (a boolean mask, None for none); False where it computes anything else
        self._selecting: Dict[tuple, Any] = {}
        self.layers, _ = recorded.find_layers(module, list(names))
        self._owned = {n: p for n, p in module.named_parameters() if n in set(names)}
        self._owners = recorded.owners(module, list(names))
        #: the layers whose parameters FSDP2 shards: a rule reading their values gets them copied from the forward
        self._copied = {l.path: list(l.params) for l in self.layers
                        if any(fsdp.is_dtensor(self._owned[n]) for n in l.params.values())}
        # FSDP2 puts unsharded parameters of its own in place of the sharded ones for the forward (fsdp.unsharded)
        self._stand_ins = partial(fsdp.unsharded, module) if fsdp.managed(module) else None
        self._watch: Optional[ForeignUses] = None
        self.on_backward = on_backward
        #: called ``(z, grad, inputs)`` from the user's backward when not armed (a kind built by a forward of its own
        #: on the batches a backward reached, whose loss may ignore positions only the gradient shows), or ``None``
        self.on_gradient: Optional[Callable[[torch.Tensor, torch.Tensor, Any], None]] = None
        self._eager = EagerWhileArmed()   # a refresh runs uncompiled (:mod:`.compiled`)
        self._armed = False
        self._paused = False
        self._live = False
        #: per-step recorder of Linear layers' rows (:class:`.rows.RowCapture`), or ``None``
        self.rows = None
        #: inputs (:class:`~infogeo.nn.batch.Batch`) of the last forward whose output a backward reached, or
        #: of the last forward with autograd enabled when none was
        self.inputs: Optional[Batch] = None
        self._calls: Optional[Dict[str, list]] = None
        self._sinks: Dict[str, Callable] = {}
        #: the layers called in this step's forwards with autograd enabled, and those called with it disabled
        #: inside such a forward (:meth:`untracked`)
        self._tracked: Dict[bool, set] = {True: set(), False: set()}
        #: per layer path: whether each of its calls in the last refresh that called it went to a rule with Kronecker
        #: factors (a Linear, convolution or embedding; not a recurrent layer, whose recurrent weight reads its own
        #: state) and took only leaves of the autograd graph (the data, also with requires_grad set, token indices, a
        #: frozen part's output): the layers that read the data
        self.reads_data: Dict[str, bool] = {}
        #: per layer path: whether it went to a rule with Kronecker factors, was called once in each forward of the last
        #: refresh that called it, and that call's output was the model's output :math:`z` (or a rearrangement or
        #: selection of its entries: a view, a reshape, a transpose, a slice): the layers that write the output
        self.writes_output: Dict[str, bool] = {}
        #: ``(reads the data, writes the output)`` of the layers called since the last arming, until the step agrees on
        #: them (:meth:`take_roles`)
        self._roles_now: Dict[str, Tuple[bool, bool]] = {}
        #: this forward's layer calls: path -> whether every call went to a Kronecker rule and took only leaves, and
        #: the autograd nodes of their outputs (``None``: not a Kronecker rule's tensor with a graph)
        self._forward: Dict[str, Tuple[bool, List[Any]]] = {}
        self._boxes: List[list] = []
        self._handles = [module.register_forward_pre_hook(Hook(self, module, "_pre"), with_kwargs=True)]
        for layer in self.layers:
            self._handles.append(layer.module.register_forward_hook(
                Hook(self, layer.module, "_layer_hook", layer.path), with_kwargs=True))
        # after the layers' hooks: the model itself may be a layer (nn.Linear, parameters of its own), whose call
        # must be recorded before _post closes the forward
        self._handles.append(module.register_forward_hook(Hook(self, module, "_post"), always_call=True))
        weakref.finalize(self, _remove, self._handles)
        weakref.finalize(self, self._eager.set, False)

    @property
    def armed(self) -> bool:
        """Whether the next forward and backward record the curvature statistics (a refresh)."""
        return self._armed

    @armed.setter
    def armed(self, value: bool) -> None:
        self._armed = bool(value)
        self._eager.set(self._armed)
        if self._armed:
            self._roles_now = {}

    def input_params(self) -> FrozenSet[str]:
        """The parameters of the layers that read the data (:attr:`reads_data`); a parameter several modules hold
        (a tied weight) is no single layer's, and is not among them."""
        return self._params_where(self.reads_data)

    def output_params(self) -> FrozenSet[str]:
        """The parameters of the layers that write the model's output (:attr:`writes_output`); not a tied weight's."""
        return self._params_where(self.writes_output)

    def _params_where(self, role: Dict[str, bool]) -> FrozenSet[str]:
        return frozenset(n for layer in self.layers if role.get(layer.path, False) for n in layer.params.values())

    def take_roles(self) -> Optional[Dict[str, Tuple[bool, bool]]]:
        """Whether each layer called since the last arming read the data and wrote the output (``None``: none was
        called), once: the step's agreement over the ranks gives what they agree on to :meth:`adopt_roles`
        (:func:`~.agreement.agree_step`)."""
        roles, self._roles_now = self._roles_now, {}
        return roles or None

    def adopt_roles(self, roles: Dict[str, Tuple[bool, bool]]) -> None:
        """Record the agreed ``(reads the data, writes the output)`` of the layers a refresh called."""
        for path, (reads, writes) in roles.items():
            self.reads_data[path], self.writes_output[path] = bool(reads), bool(writes)

    def _note_call(self, path: str, module: torch.nn.Module, args: tuple, kwargs: Dict[str, Any], output: Any) -> None:
        tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
        kronecker = rule_for(module, args, kwargs).kronecker
        reads = kronecker and bool(tensors) and all(t.grad_fn is None for t in tensors)   # leaves: no computation
        before, nodes = self._forward.get(path, (True, []))
        node = output.grad_fn if isinstance(output, torch.Tensor) and kronecker else None
        self._forward[path] = (before and reads, nodes + [node])   # every call of it must read the data

    def _note_roles(self, z: Any) -> None:
        """This forward's roles into :attr:`_roles_now` (every forward of the refresh must agree): the layers that
        read the data, and the layer whose one call's output is ``z`` up to a rearrangement of its entries."""
        written = _rearranged_from(z) if isinstance(z, torch.Tensor) and z.requires_grad else set()
        for path, (reads, nodes) in self._forward.items():
            writes = len(nodes) == 1 and nodes[0] is not None and nodes[0] in written
            reads_before, writes_before = self._roles_now.get(path, (True, True))
            self._roles_now[path] = (reads_before and reads, writes_before and writes)
        self._forward = {}

    @contextlib.contextmanager
    def paused(self):
        """Forward passes inside this block (the optimizer's own evaluations) are not recorded."""
        old, self._paused = self._paused, True
        rows, rows_old = self.rows, getattr(self.rows, "paused", False)
        if rows is not None:
            rows.paused = True   # backward passes in here (Monte Carlo columns) are not the user's gradient
        try:
            yield
        finally:
            self._paused = old
            if rows is not None:
                rows.paused = rows_old

    def _pre(self, module, args, kwargs):
        if self.on_forward is not None and not self._paused:
            self.on_forward()
        self._live = not self._paused and torch.is_grad_enabled()
        if not self._live:
            self._calls = None
            return
        self.inputs = Batch(tuple(args), dict(kwargs))
        self._forward = {}
        if self.armed:
            self._calls = Recorded({l.path: [] for l in self.layers})
            self._sinks = {l.path: recorded.recording_hook(self._calls, l.path, self._copied.get(l.path, ()))
                           for l in self.layers}
            # which parameters this forward uses outside their modules (they take the whole-network route)
            self._watch = ForeignUses(self._owned, self._owners, inside=(self.module,), stand_ins=self._stand_ins)
            self._watch.__enter__()
            self._calls.foreign = self._watch.foreign
        else:
            self._calls = None


    def _layer_hook(self, path: str, module, args, kwargs, output):
        if self._live:
            self._tracked[torch.is_grad_enabled()].add(path)
        if self._calls is not None:
            self._sinks[path](module, args, kwargs, output)
            self._note_call(path, module, args, kwargs, output)
        # not inside a compiled region: the rows' tensor hooks would break its graph (the solve then reads .grad)
        if self.rows is not None and not self._paused and torch.is_grad_enabled() and not compiling():
            self.rows.record(path, args, kwargs, output)

    def _post(self, module, args, output):
        # always called, also when the forward raised (output None): the watch is taken off in any case
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.__exit__(None, None, None)
        calls, self._calls, self._sinks = self._calls, None, {}
        live, self._live = self._live, False
        if output is None:
            self._forward = {}   # (the outputs' graph nodes not held past the forward)
            return
        raw = output
        if live and self.output_fn is not None:
            output = self.output_fn(output)   # the outputs z in what the model returns
        if calls is not None:
            self._note_roles(output)
        if not live or not (isinstance(output, torch.Tensor) and output.requires_grad) or self.inputs is None:
            return
        # a loss on what the model returns, when output_fn only selects its entries (torch's (N, C, ...) layout
        # permuted to classes last, a causal LM's shifted positions): z's gradient is that selection of the returned
        # tensor's, where the loss left the other entries alone
        rearranged = (raw is not output and isinstance(raw, torch.Tensor) and raw.requires_grad
                      and self._selects(raw) is not False)
        if calls is None and compiling():
            return   # nothing to record, and the hook below would break the compiled graph (it sets self.inputs)
        inputs, box = self.inputs, []
        if calls is not None or self.on_gradient is not None:
            # the capture needs the output itself (its graph), which the loss may not keep: held in a box that
            # is emptied when the hook runs or by release(), so no reference cycle outlives a step
            box.append(output)
            self._boxes.append(box)
            if len(self._boxes) > MAX_PENDING:
                self._boxes.pop(0).clear()   # outputs never back-propagated (e.g. monitoring with grad enabled)

        me = weakref.ref(self)   # an output kept by the caller must not keep the recorder (and its hooks) alive
        reached = []   # z's own gradient arrived (it comes before the returned tensor's)

        def on_grad(grad: torch.Tensor, of_z: bool = True):
            rec = me()
            if rec is None or rec._paused or (reached and not of_z):
                return
            if not of_z and not rec._only_selected(grad):
                return   # the loss used entries output_fn leaves out: not a loss on z
            if calls is None and _transformed(grad):
                return   # a transform's backward through this graph (the optimizer's own vmap), not the user's
            if of_z:
                reached.append(True)
            rec.inputs = inputs   # the batch this backward belongs to (not a later monitoring forward)
            recording = calls is not None and rec.armed
            if box and (recording or rec.on_gradient is not None):
                z, g = box.pop(), grad if of_z else rec.output_fn(grad)
                if recording:
                    rec.on_backward(z, calls, inputs, g)
                else:
                    rec.on_gradient(z, g, inputs)
        output.register_hook(on_grad)
        if rearranged:
            raw.register_hook(partial(on_grad, of_z=False))

    def _selects(self, raw: torch.Tensor) -> Any:
        """Whether ``output_fn`` maps a tensor shaped like ``raw`` to a selection of its entries, each once (a permute,
        a transpose, a reshape, a slice): the mask of the entries it leaves out (``None``: none), or ``False``; found
        once per shape by applying it to the entries' indices."""
        key, fn = tuple(raw.shape), self.output_fn
        if key not in self._selecting and fn is not None:
            idx = torch.arange(raw.numel(), device=raw.device).reshape(raw.shape)
            verdict: Any = False
            try:
                out = fn(idx)
                if isinstance(out, torch.Tensor) and out.is_floating_point() and bool((out == out.round()).all()):
                    out = out.long()   # a cast (z.float()) keeps the indices, where the dtype holds them exactly
                if isinstance(out, torch.Tensor) and not out.is_floating_point() and 0 < out.numel() <= idx.numel() \
                        and bool(((out >= 0) & (out < idx.numel())).all()):
                    picked = out.reshape(-1)
                    left = torch.ones(idx.numel(), dtype=torch.bool, device=raw.device)
                    left[picked] = False
                    if int((~left).sum()) == picked.numel():   # each entry at most once
                        verdict = left.reshape(raw.shape) if bool(left.any()) else None
            except Exception:   # noqa: BLE001 - an output_fn that takes no plain tensor: no selection
                pass
            self._selecting[key] = verdict
        return self._selecting.get(key, False)

    def _only_selected(self, grad: torch.Tensor) -> bool:
        """Whether a gradient at the returned tensor is zero off the entries ``output_fn`` selects."""
        left = self._selecting.get(tuple(grad.shape))
        return left is None or (left is not False and not bool(grad[left].any()))

    def untracked(self) -> List[str]:
        """The layers this step's forwards called only with autograd disabled inside a forward that had it enabled:
        ``torch.utils.checkpoint`` with ``use_reentrant=True`` runs its function so, and again during the backward,
        where its layers' gradients come from a pass no hook of the forward saw (or a layer run under
        ``torch.no_grad()`` on purpose, whose parameters then get no gradient from it)."""
        return sorted(self._tracked[False] - self._tracked[True])

    def release(self) -> None:
        """Drop the outputs still waiting for their backward (after a step), and what the step's forwards called."""
        for box in self._boxes:
            box.clear()
        self._boxes = []
        self._tracked = {True: set(), False: set()}

    def remove(self) -> None:
        """Remove every hook from the model."""
        _remove(self._handles)
        self._eager.set(False)



#: autograd nodes whose output holds entries of their input unchanged, each at most once: a rearrangement or a
#: selection (a layer's output seen through them is still that layer's output)
_REARRANGING = frozenset({"ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0", "TransposeBackward0",
                          "TransposeBackward1", "PermuteBackward0", "TBackward0", "SqueezeBackward0",
                          "SqueezeBackward1", "SqueezeBackward2", "UnsqueezeBackward0", "CloneBackward0",
                          "SliceBackward0", "SelectBackward0", "AliasBackward0"})


def _rearranged_from(z: torch.Tensor) -> set:
    """The autograd nodes whose outputs ``z`` is, up to a chain of :data:`_REARRANGING` nodes (``z``'s own first)."""
    found, node = set(), z.grad_fn
    while node is not None:
        found.add(node)
        if type(node).__name__ not in _REARRANGING:
            break
        node = next((f for f, _ in node.next_functions if f is not None), None)
    return found


def _transformed(t: torch.Tensor) -> bool:
    """Whether ``t`` is a functorch transform's tensor (vmap, grad): a backward of the optimizer's own."""
    check = getattr(getattr(torch._C, "_functorch", None), "is_functorch_wrapped_tensor", None)
    return bool(check(t)) if check is not None else False


class Recorded(dict):
    """The layer calls of one recorded forward (path -> calls), with the parameters it used outside their
    modules in :attr:`foreign` (see :class:`~infogeo.nn.curvature.uses.ForeignUses`)."""

    foreign: set = set()


def _gone() -> None:
    """The dead reference of a copied :class:`Hook`."""
    return None


class Hook:
    """A module hook calling ``recorder.method(*bound, module, ...)`` for the one ``module`` it was registered on.

    The model holds its hooks, a hook only weak references to the recorder and the module: an optimizer the
    user drops is collected, and its hooks are removed with it.  A copy of the model (``copy.deepcopy``,
    ``torch.save``/pickle) copies its hooks: a copied hook drops both references and does nothing (torch copies
    the hook dicts, so the copy's passes would otherwise reach this optimizer's statistics), and a hook called
    for another module (a shallow copy shares the dicts) does nothing either.
    """

    def __init__(self, recorder: "ForwardRecorder", module: torch.nn.Module, method: str, *bound: Any):
        self._recorder: Callable[[], Any] = weakref.ref(recorder)
        self._module: Callable[[], Any] = weakref.ref(module)
        self.method, self.bound = method, bound

    def __call__(self, module: torch.nn.Module, *args: Any) -> Any:
        rec = self._recorder()
        if rec is None or module is not self._module():
            return None
        return getattr(rec, self.method)(*self.bound, module, *args)

    def __getstate__(self) -> Dict[str, Any]:
        return {"method": self.method, "bound": self.bound}   # weak references neither pickle nor belong to a copy

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.method, self.bound = state["method"], state["bound"]
        self._recorder = self._module = _gone


def _remove(handles: list) -> None:
    for h in handles:
        h.remove()
    handles.clear()


class OutputGradients:
    r"""The gradients the user's own backward delivers at each recorded layer output, times ``scale``.

    A pre-hook on the autograd node of each layer output sees the gradient with respect to that
    output as the backward reaches it (accumulated over all its uses), so the empirical Fisher's
    single column costs no backward pass of its own.  A reference to each gradient is kept until
    it is read; a layer the backward never reaches reads ``None``.  Call as ``grads(path)``.
    """

    def __init__(self, calls: Dict[str, list], scale: float):
        self.scale = scale
        self.grads: Dict[Tuple[str, int], torch.Tensor] = {}
        self._multi: Dict[str, int] = {}   # a layer returning a tuple: how many entries (each read, None or not)
        self._handles = []
        for path, cs in calls.items():
            if len(cs) == 1 and cs[0].edge is not None:
                if cs[0].multi:
                    self._multi[path] = len(cs[0].edges)
                for k, edge in enumerate(cs[0].edges):
                    if edge is not None:
                        self._handles.append(edge.node.register_prehook(self._hook((path, k), edge.output_nr)))

    def _hook(self, key: Tuple[str, int], nr: int) -> Callable:
        def hook(grad_outputs):
            g = grad_outputs[nr]
            if g is not None and key not in self.grads:   # a later backward of a retained graph is another loss
                self.grads[key] = g.detach()
        return hook

    def _read(self, key: Tuple[str, int]) -> Optional[torch.Tensor]:
        g = self.grads.get(key)
        return None if g is None else g * self.scale

    def __call__(self, path: str) -> Any:
        """The gradient at the layer's output, or one per entry of a tuple output."""
        if path in self._multi:
            return tuple(self._read((path, k)) for k in range(self._multi[path]))
        return self._read((path, 0))

    def remove(self) -> None:
        """Take the hooks off the graph's nodes and drop the gradients."""
        _remove(self._handles)
        self.grads = {}
