"""Parameter dicts ``{name: tensor}``: their flat layout, and the current point of a parameter space."""
from __future__ import annotations

import functools
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

Params = Dict[str, torch.Tensor]


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision statistics kept in ``dtype`` are decomposed and applied in: ``dtype``, at least float32
    (LAPACK has no half-precision decompositions, and rounding there would reach the steps)."""
    return torch.promote_types(dtype, torch.float32)


#: what ``state_dtype="auto"`` holds state computed in float32 in (float64 state is held as computed)
AUTO_HELD = torch.bfloat16
#: the dtypes state may be held in
HELD_DTYPES = (torch.bfloat16, torch.float32, torch.float64)


def held_dtype(dtype: Union[None, str, torch.dtype], work: torch.dtype) -> Optional[torch.dtype]:
    """The dtype state computed in ``work`` is held in for ``state_dtype=dtype`` (``"auto"``: :data:`AUTO_HELD`
    where ``work`` is float32), or ``None`` where that is not narrower than ``work`` (held as computed)."""
    if isinstance(dtype, str):
        dtype = AUTO_HELD if work == torch.float32 else None
    if dtype is None or torch.finfo(dtype).bits >= torch.finfo(work).bits:
        return None
    return dtype


#: a product of at least this many multiply-adds with a bfloat16 operand runs in bfloat16 where the device multiplies
#: it natively (:func:`held_product`); below it a bfloat16 product's fixed cost (about 15 us on a CPU) outweighs
#: its gain: measured on AVX512-BF16, 256 x 256 x 257 took 0.46x float32's time, 32 x 129 x 129 took 1.9x
NARROW_PRODUCT = 1 << 21
#: whether :func:`held_product` multiplies in bfloat16: ``None`` asks the device (:func:`multiplies_bfloat16`);
#: ``True``/``False`` decide for every device (to test either path on any machine)
NARROW_PRODUCTS: Optional[bool] = None


@functools.lru_cache(maxsize=None)
def _native_bfloat16(device_type: str, index: Optional[int]) -> bool:
    if device_type == "cuda":
        return torch.cuda.get_device_capability(index) >= (8, 0)
    if device_type == "cpu":
        try:   # oneDNN's test for the AVX512-BF16 / AMX instructions
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            return False
    return False


def multiplies_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively (CUDA from compute capability 8.0; a CPU with
    AVX512-BF16 or AMX), unless :data:`NARROW_PRODUCTS` decides."""
    return _native_bfloat16(device.type, device.index) if NARROW_PRODUCTS is None else NARROW_PRODUCTS


def held_product(X: torch.Tensor, Y: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    r""":math:`XY` where an operand may be held in bfloat16 (an eigenbasis held narrower than it is computed in,
    ``state_dtype``) and ``work`` is float32: in bfloat16 where the device multiplies it natively and the product has
    at least :data:`NARROW_PRODUCT` multiply-adds (the other operand rounded to bfloat16, the sums accumulated in
    float32, the result rounded to bfloat16: :math:`2^{-8}` relative per entry); else in ``work``.  A large
    rotation then costs what Muon's bfloat16 Newton-Schulz products cost; a small one stays in ``work``."""
    narrow = torch.bfloat16 in (X.dtype, Y.dtype) and work == torch.float32   # float64 work stays exact
    if narrow and X.shape[0] * X.shape[1] * Y.shape[1] >= NARROW_PRODUCT and multiplies_bfloat16(X.device):
        work = torch.bfloat16
    # (a cast only where the dtype differs: a no-op .to() still costs a dispatch, on every product of every step)
    return (X if X.dtype == work else X.to(work)) @ (Y if Y.dtype == work else Y.to(work))


def working(t: torch.Tensor) -> torch.Tensor:
    """``t`` in its :func:`working_dtype` (a no-op unless it is half precision, ``factor_dtype``)."""
    return t.to(working_dtype(t.dtype))


def all_finite(tensors) -> bool:
    """Whether every entry of every tensor is finite: a sum is finite exactly when its terms are (or it overflows).

    One read per tensor and one sync, no copy.
    """
    sums = [t.sum(dtype=torch.promote_types(t.dtype, torch.float32)) for t in tensors]
    return not sums or bool(torch.isfinite(torch.stack(sums)).all())


class ParamLayout:
    """Order, shapes and offsets of named parameters in the flat (row-major) vector.

    The dense matrices of every curvature representation index parameters in this
    order, which is the order of ``model.named_parameters()``.
    """

    def __init__(self, names: Sequence[str], shapes: Sequence[Tuple[int, ...]]):
        self.names: List[str] = list(names)
        self.shapes = {n: tuple(s) for n, s in zip(names, shapes)}
        self.numels = {n: int(math.prod(s)) for n, s in self.shapes.items()}
        self.offsets: Dict[str, int] = {}
        off = 0
        for n in self.names:
            self.offsets[n] = off
            off += self.numels[n]
        self.size = off

    @classmethod
    def of(cls, params: Params) -> "ParamLayout":
        """The layout of a ``{name: tensor}`` dict, in its key order."""
        return cls(list(params), [tuple(p.shape) for p in params.values()])

    def flatten(self, tree: Params) -> torch.Tensor:
        """Concatenate the leaves in layout order into one vector."""
        missing = [n for n in self.names if n not in tree]
        if missing:
            raise ValueError(f"components are missing parameters {missing}; expected keys {self.names}")
        return torch.cat([tree[n].reshape(-1) for n in self.names])

    def unflatten(self, vec: torch.Tensor) -> Params:
        """Split a vector (or the last axis of a batch of vectors) into named leaves."""
        lead = tuple(vec.shape[:-1])
        return {n: vec[..., self.offsets[n]:self.offsets[n] + self.numels[n]].reshape(lead + self.shapes[n])
                for n in self.names}

    def check(self, tree: Params, what: str, *, real: bool = False) -> Params:
        """``tree``, once it has exactly these names and shapes (else a ``ValueError``), and tensors for leaves
        (with ``real``, real floating ones; else a ``TypeError``)."""
        if not isinstance(tree, dict):
            raise TypeError(f"{what} must be a dict name -> tensor like model.named_parameters(), "
                            f"got {type(tree).__name__}")
        if set(tree) != set(self.names):
            missing, extra = sorted(set(self.names) - set(tree)), sorted(set(tree) - set(self.names), key=str)
            raise ValueError(f"{what} has keys {sorted(tree, key=str)}, expected {sorted(self.names)} (missing "
                             f"{missing}, extra {extra})")
        for n in self.names:
            if not isinstance(tree[n], torch.Tensor) or (real and not tree[n].is_floating_point()):
                got = tree[n].dtype if isinstance(tree[n], torch.Tensor) else type(tree[n]).__name__
                raise TypeError(f"{what}[{n!r}] must be a {'real floating ' if real else ''}tensor, got {got}")
            if tuple(tree[n].shape) != self.shapes[n]:
                raise ValueError(f"{what}[{n!r}] has shape {tuple(tree[n].shape)}, expected {self.shapes[n]}")
        return tree

    def __eq__(self, other) -> bool:
        return isinstance(other, ParamLayout) and self.names == other.names and self.shapes == other.shapes

    def __repr__(self) -> str:
        return f"ParamLayout({len(self.names)} tensors, {self.size} parameters)"


class CurrentPoint(dict):
    """The model's current parameters ``{name: tensor}`` (views, no copies).

    Calling it is the manifold protocol's ``point(coords)``: ``space.point(x)``
    validates a point (a dict, or a flat vector in layout order); ``space.point()``
    returns the current parameters.
    """

    def __init__(self, space: Any, params: Params):
        super().__init__(params)
        self._space = space

    def __call__(self, coords: Any = None) -> Params:
        return self._space._as_point(coords)
