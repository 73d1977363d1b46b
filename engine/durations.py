"""Durations as flows and decisions write them: ``{"value": n, "unit": "Seconds|Minutes|Hours|Days"}``
or a number of seconds (DESIGN §9): a gate's timeout, reminders, escalation, a standing
approval's ``for``."""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_DURATION_DAYS", "UNITS", "duration_seconds"]

UNITS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}

MAX_DURATION_DAYS = 3660  # ten years: longer is a mistake, and past ~2.7 million years a date overflows


def duration_seconds(value: Any, what: str = "timeout") -> float:
    """``{"value": 3, "unit": "Days"}`` or a number of seconds; 0 / None: none. At most
    :data:`MAX_DURATION_DAYS`."""
    seconds = _seconds(value, what)
    if seconds > MAX_DURATION_DAYS * 86400:
        raise ValueError(f"{what} must be at most {MAX_DURATION_DAYS} days")
    return seconds


def _seconds(value: Any, what: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number of seconds or {{value, unit}}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{what} must not be negative")
        return float(value)
    if isinstance(value, dict):
        v = value.get("value", 0)
        unit = str(value.get("unit", "Seconds")).strip().lower()
        if unit not in UNITS:
            raise ValueError(f"{what} unit '{value.get('unit')}' is not one of Seconds, Minutes, Hours, Days")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{what} value must be a number >= 0")
        return float(v) * UNITS[unit]
    raise ValueError(f"{what} must be a number of seconds or {{\"value\": 3, \"unit\": \"Days\"}}")
