"""Limits a deployment keeps on what its runs send: declared on the app, overridable per deployment.

A ``Limit`` caps the calls of some models and tools across every worker of a deployment: requests
per minute, tokens per minute (model calls: estimated before the call, corrected from the usage it
reports) and calls in flight at once. ``per`` keys the limit by a top-level field of the run's
input (a tenant, a customer): each value then has the whole limit to itself, so one tenant's burst
cannot starve another. A call under several limits starts once it holds a permit of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Dimension = Literal["requests_per_minute", "tokens_per_minute", "concurrent"]
DIMENSIONS: tuple[Dimension, ...] = ("requests_per_minute", "tokens_per_minute", "concurrent")
# How each dimension reads in a run's status and the audit store ("waiting for openai requests/min").
DIMENSION_LABELS: dict[Dimension, str] = {
    "requests_per_minute": "requests/min",
    "tokens_per_minute": "tokens/min",
    "concurrent": "concurrent calls",
}


@dataclass(frozen=True)
class Limit:
    """One declared limit. At least one of the three capacities is set; ``models`` and ``tools``
    name the registered calls it covers (a provider key shared by several models is one limit
    naming them all)."""

    name: str
    models: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    concurrent: int | None = None
    per: str | None = None  # a top-level field of the run's input whose value keys the limit

    def capacity(self, dimension: Dimension) -> float | None:
        value = getattr(self, dimension)
        return None if value is None else float(value)

    def dimensions(self) -> tuple[Dimension, ...]:
        return tuple(d for d in DIMENSIONS if getattr(self, d) is not None)
