r"""The one owner of the Tikhonov damping :math:`\lambda` of a natural-gradient step.

Two kinds of event move :math:`\lambda`, under fixed rules:

*Failures* (a solve that is not finite or not positive definite, a non-finite gradient,
a step that increased the batch loss) raise it, :math:`\lambda \leftarrow \gamma\lambda`
(``increase`` :math:`\gamma > 1`), temporarily: every good step afterwards brings it back
toward the *base* damping, :math:`\lambda \leftarrow \max(\lambda_0, r\lambda)`
(``recovery`` :math:`r \le 1`).

*Levenberg–Marquardt adaptation* (Moré 1978; Martens & Grosse 2015, Sec. 6.5) moves the base
itself: with :math:`\rho` the ratio of the actual to the predicted decrease of the loss,
:math:`\lambda_0 \leftarrow \omega\lambda` if :math:`\rho > 3/4`, :math:`\lambda/\omega` if
:math:`\rho < 1/4` (``factor`` :math:`0 < \omega < 1`), and :math:`\lambda = \lambda_0`.

Every value is clamped to ``[minimum, maximum]``.
"""
from __future__ import annotations

import math
from typing import Dict

__all__ = ["Damping"]


class Damping:
    """The current damping, its base, and the rules that change them (module docstring)."""

    def __init__(self, value: float, minimum: float, maximum: float, increase: float, recovery: float):
        self.minimum, self.maximum = float(minimum), float(maximum)
        self.increase, self.recovery = float(increase), float(recovery)
        self.base = self.value = self._clamp(value)

    def _clamp(self, value: float) -> float:
        return min(self.maximum, max(self.minimum, float(value)))

    @property
    def saturated(self) -> bool:
        """Whether a failure can no longer raise the damping."""
        return self.value >= self.maximum

    def fail(self) -> float:
        """A failure: raise the damping (temporarily); returns the new value."""
        self.value = self._clamp(self.value * self.increase)
        return self.value

    def succeed(self) -> None:
        """A good step: bring a raised damping back toward the base."""
        if self.value > self.base:
            self.value = max(self.base, self.value * self.recovery)

    def adapt(self, rho: float, factor: float) -> None:
        r"""Levenberg–Marquardt update of the base from the reduction ratio :math:`\rho` (NaN counts as bad)."""
        if rho > 0.75:
            self.value = self._clamp(self.value * factor)
        elif rho < 0.25 or not math.isfinite(rho):
            self.value = self._clamp(self.value / factor)
        self.base = self.value

    def reset(self, value: float) -> None:
        """Set both the damping and its base (clamped)."""
        self.base = self.value = self._clamp(value)

    def state_dict(self) -> Dict[str, float]:
        return {"damping": self.value, "base_damping": self.base}

    def load_state_dict(self, saved: Dict[str, float]) -> None:
        self.value = self._clamp(saved["damping"])
        self.base = self._clamp(saved.get("base_damping", self.base))

    def __repr__(self) -> str:
        return f"Damping({self.value:.3g}, base={self.base:.3g}, range=[{self.minimum:.3g}, {self.maximum:.3g}])"
