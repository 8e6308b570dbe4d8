"""The error calibration raises for a user's mistake (wrong data, option or value name)."""

from __future__ import annotations

from ...errors import GraphwrightError

__all__ = ["CalibrationError"]


class CalibrationError(GraphwrightError):
    """Calibration was given data, options or a model it cannot use (one line says what and what to do)."""
