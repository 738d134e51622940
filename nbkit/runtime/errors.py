"""Errors several layers raise or catch, defined below all of them (an engine's audit and the trainer's share one)."""

from __future__ import annotations


class PrecisionError(RuntimeError):
    """The precision that ran differs from the precision requested."""
