"""Which backend an argument belongs to, without importing torch needlessly."""
from __future__ import annotations

import sys
from typing import Any


def is_torch(x: Any) -> bool:
    """True if ``x`` is a torch tensor (torch is only consulted if already imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _any_torch(x: Any) -> bool:
    if is_torch(x):
        return True
    if isinstance(x, (list, tuple)):
        return any(_any_torch(e) for e in x)
    if isinstance(x, dict):
        return any(_any_torch(e) for e in x.values())
    return False


def namespace_of(*args: Any) -> str:
    """``"torch"`` if any argument (or element of a list/tuple/dict) is a tensor, else ``"numpy"``."""
    return "torch" if any(_any_torch(a) for a in args) else "numpy"
