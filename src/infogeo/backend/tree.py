"""Minimal pytree helpers: components are arrays or dicts of arrays.

Network parameter spaces store points and vectors as ``{name: tensor}`` dicts
(like ``model.named_parameters()``); every other manifold uses one array.  The
vector types and the metric algorithms go through these helpers so that one
piece of code serves both.
"""
from __future__ import annotations

from typing import Any, Callable

from . import _dispatch


def tree_map(f: Callable, *trees: Any) -> Any:
    """Apply ``f`` leafwise; dicts must have the same keys."""
    first = trees[0]
    if isinstance(first, dict):
        keys = first.keys()
        for t in trees[1:]:
            if not isinstance(t, dict) or t.keys() != keys:
                raise ValueError("components have different structure (dict keys differ)")
        return {k: f(*(t[k] for t in trees)) for k in keys}
    return f(*trees)


def tree_copy(tree: Any) -> Any:
    """A copy of every array leaf, so that the result shares no memory with ``tree``.

    A tensor is cloned (``clone`` is differentiable: a leaf that requires grad stays in its
    graph); autograd's traced boxes are immutable and kept; anything else is returned as is.
    """
    def copy(x: Any) -> Any:
        if _dispatch.is_torch(x):
            return x.clone()
        import numpy as np
        return x.copy() if isinstance(x, np.ndarray) else x
    return tree_map(copy, tree)


def leaves(tree: Any) -> list:
    return list(tree.values()) if isinstance(tree, dict) else [tree]


def tree_vdot(a: Any, b: Any):
    """Euclidean pairing ``Σ a_i b_i`` over all leaves (a backend scalar)."""
    total = None
    for x, y in zip(leaves(a), leaves(b)):
        term = (x * y).sum()
        total = term if total is None else total + term
    return total


def tree_all_finite(tree: Any) -> bool:
    for x in leaves(tree):
        if _dispatch.is_torch(x):
            import torch
            if not bool(torch.isfinite(x).all()):
                return False
        else:
            import numpy as np
            v = x
            while hasattr(v, "_value"):
                v = v._value
            if not np.all(np.isfinite(v)):
                return False
    return True


def tree_shape(tree: Any):
    if isinstance(tree, dict):
        return {k: tuple(v.shape) for k, v in tree.items()}
    return tuple(getattr(tree, "shape", ()))


def tree_equal(a: Any, b: Any) -> bool:
    """Exact equality of two points (identity short-cut first, as points are usually shared)."""
    if a is b:
        return True
    if isinstance(a, dict) != isinstance(b, dict):
        return False
    if isinstance(a, dict) and a.keys() != b.keys():
        return False
    for x, y in zip(leaves(a), leaves(b)):
        if x is y:
            continue
        if tuple(getattr(x, "shape", ())) != tuple(getattr(y, "shape", ())):
            return False
        if _dispatch.is_torch(x) or _dispatch.is_torch(y):
            import torch
            if not torch.equal(torch.as_tensor(x), torch.as_tensor(y).to(torch.as_tensor(x))):
                return False
        else:
            import numpy as np
            from ._numpy import to_numpy
            if not np.array_equal(to_numpy(x), to_numpy(y)):
                return False
    return True
