"""Checking the limits an app declares, and applying a deployment's overrides to them.

Pure: the worker calls :func:`resolve_limits` when it starts (a limit that cannot hold refuses the
start, naming the setting), ``App.limit`` calls :func:`checked` when a limit is declared, and the
run machine calls :func:`run_limit_keys` once per run for the limits keyed by a field of its input.

What "a tokens limit smaller than one request" means here: ``tokens_per_minute`` below
``MIN_TOKENS_PER_MINUTE`` (1,024 -- the completion cap the anthropic adapter asks by default, so
the least an ordinary call reserves) is refused at start. A call estimated at more tokens than its
limit holds in a minute fails for good when it is made (``LimitUnsatisfiable``, naming the limit):
no wait could ever admit it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from runtime.config import ConfigError
from runtime.workflow.canonical import canonical_json
from runtime.workflow.limits import DIMENSIONS, Limit

MIN_TOKENS_PER_MINUTE = 1024


class LimitError(ConfigError):
    """A declared limit, or a deployment's override of one, cannot hold; the message names it."""


def checked(limit: Limit, where: str = "app.limit") -> Limit:
    """``limit`` if it can hold: some capacity, every capacity above 0, whole concurrent slots,
    tokens only for models and at least ``MIN_TOKENS_PER_MINUTE``, something covered, ``per`` a
    field name. ``where`` names the setting in the message (``app.limit`` or ``limits.<name>``)."""
    name = limit.name
    if not name:
        raise LimitError(f"{where}: a limit needs a name")
    if not limit.models and not limit.tools:
        raise LimitError(f"{where}({name!r}): names no model and no tool, so it would limit nothing")
    if not limit.dimensions():
        raise LimitError(
            f"{where}({name!r}): no capacity given; set requests_per_minute, tokens_per_minute or concurrent"
        )
    for dimension in limit.dimensions():
        capacity = limit.capacity(dimension)
        assert capacity is not None
        if not capacity > 0:  # also refuses NaN
            raise LimitError(f"{where}({name!r}): {dimension} must be greater than 0, not {capacity:g}")
    if limit.concurrent is not None and limit.concurrent != int(limit.concurrent):
        raise LimitError(f"{where}({name!r}): concurrent must be a whole number, not {limit.concurrent}")
    if limit.tokens_per_minute is not None:
        if not limit.models:
            raise LimitError(f"{where}({name!r}): tokens_per_minute counts model tokens; it names no model")
        if limit.tokens_per_minute < MIN_TOKENS_PER_MINUTE:
            raise LimitError(
                f"{where}({name!r}): tokens_per_minute {limit.tokens_per_minute:g} is smaller than one request "
                f"(at least {MIN_TOKENS_PER_MINUTE}, the completion cap an ordinary call reserves)"
            )
    if limit.per is not None and not limit.per:
        raise LimitError(f"{where}({name!r}): per must name a field of the run's input")
    return limit


def resolve_limits(
    declared: Mapping[str, Limit],
    models: Collection[str],
    tools: Collection[str],
    overrides: Mapping[str, Mapping[str, float]],
) -> dict[str, Limit]:
    """The limits a worker enforces: ``declared`` with the deployment's ``overrides`` (the ``limits``
    setting, limit name -> dimension -> capacity) applied and checked against the app's ``models``
    and ``tools``. Raises LimitError naming the setting for an override of an unknown limit or
    dimension, a model or tool the app does not register, or a capacity that cannot hold."""
    for name, capacities in overrides.items():
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise LimitError(f"setting limits.{name}: the app declares no limit {name!r} (declared: {known})")
        for dimension in capacities:
            if dimension not in DIMENSIONS:
                raise LimitError(
                    f"setting limits.{name}: {dimension!r} is not a dimension of a limit ({', '.join(DIMENSIONS)})"
                )
    resolved: dict[str, Limit] = {}
    for name, as_declared in declared.items():
        limit = as_declared
        given = overrides.get(name)
        where = "app.limit"
        if given:
            values: dict[str, Any] = {
                d: (int(c) if d == "concurrent" and c == int(c) else c) for d, c in given.items()
            }
            limit = dataclasses.replace(limit, **values)
            where = f"setting limits.{name} over app.limit"
        checked(limit, where)
        for model in limit.models:
            if model not in models:
                raise LimitError(
                    f"app.limit({name!r}): names model {model!r}, which the app does not register"
                )
        for tool in limit.tools:
            if tool not in tools:
                raise LimitError(f"app.limit({name!r}): names tool {tool!r}, which the app does not register")
        resolved[name] = limit
    return resolved


def run_limit_keys(limits: Mapping[str, Limit], run_input: Any) -> tuple[tuple[str, str], ...]:
    """The key of each ``per`` limit for a run with ``run_input`` (limit name, the field's value as
    text). A run whose input has no such field is not keyed: it shares the limit's one unkeyed
    instance with the other runs that have none."""
    if not isinstance(run_input, dict):
        return ()
    keys: list[tuple[str, str]] = []
    for name, limit in limits.items():
        if limit.per is None or limit.per not in run_input:
            continue
        value = run_input[limit.per]
        keys.append((name, value if isinstance(value, str) else canonical_json(value)))
    return tuple(keys)
