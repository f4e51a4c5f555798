"""A JSON value as an edit of another: how a run's message sequence stores a message that is
mostly a message or a response it already holds (runtime.log.records.prompts).

A framework agent resends its last response as the next request's message with a few fields
filled in (PydanticAI adds ``run_id``, ``conversation_id`` and ``model_id``), and each tool
return is the previous one with other values: stored whole, each costs its full JSON again.
Stored as an edit, it costs what changed.

An edit (canonical JSON, keys short because every record carries them):

- ``{"=": V}``: the value is V; written ``V`` itself when V is not an object (every edit is an
  object, so a scalar or an array in an edit's place is a value: ``{"k": {"step": 2}}`` sets
  ``step``; records written before hold ``{"=": 2}``, still read);
- ``{"k": {key: edit, ...}, "x": [key, ...]}``: the base object with each named key's edit applied
  (a key the base lacks is edited from nothing, so its edit is ``{"=": V}``) and the ``x`` keys
  removed -- either part left out when empty;
- ``{"i": {"<index>": edit, ...}}``: the base array, same length, with the named items edited.

Neither standard JSON patch fits: a merge patch (RFC 7396) cannot set a value to null, which
these messages are full of, and an RFC 6902 patch spends a few dozen bytes of ``op``/``path``
on each change (and would be a new dependency for forty lines).
"""

from __future__ import annotations

from typing import Any

import orjson

from runtime.errors import AgentlogError


class DeltaError(AgentlogError):
    """An edit that does not apply to its base (a record altered, or the wrong base)."""


def diff(base: Any, value: Any) -> Any:
    """The edit that turns ``base`` into ``value`` (``{}`` when they are equal)."""
    if base == value and (
        type(base) is type(value)
        if not isinstance(base, (dict, list))
        # Equal is not identical (1 == 1.0 == True): the JSON decides; one C call, not a walk.
        else orjson.dumps(base, option=orjson.OPT_SORT_KEYS)
        == orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    ):
        return {}
    if isinstance(base, dict) and isinstance(value, dict):
        keys = {k: e for k, v in value.items() if (e := diff(base[k], v) if k in base else _set(v)) != {}}
        edit: dict[str, Any] = {}
        if keys:
            edit["k"] = keys
        removed = [k for k in base if k not in value]
        if removed:
            edit["x"] = removed
        return edit
    if isinstance(base, list) and isinstance(value, list) and len(base) == len(value):
        items = {
            str(i): e for i, (b, v) in enumerate(zip(base, value, strict=True)) if (e := diff(b, v)) != {}
        }
        return {"i": items} if items else {}
    if isinstance(base, (dict, list)) or type(base) is not type(value) or base != value:
        return _set(value)  # by type too: 1 == 1.0 == True, but their JSON differs
    return {}


def _set(value: Any) -> Any:
    """The edit that makes a value ``value`` whatever it was: the value itself unless an object."""
    return {"=": value} if isinstance(value, dict) else value


def apply(base: Any, edit: Any) -> Any:
    """``base`` with ``edit`` applied; DeltaError if the edit does not fit it."""
    if not isinstance(edit, dict):
        return edit  # a value that is not an object, set as it is
    if not edit:
        return base
    if "=" in edit:
        return edit["="]
    if "i" in edit:
        if not isinstance(base, list) or not isinstance(edit["i"], dict):
            raise DeltaError(f"an array edit on {type(base).__name__}")
        items = list(base)
        for index, item_edit in edit["i"].items():
            i = int(index)
            if not 0 <= i < len(items):
                raise DeltaError(f"an array edit names item {i} of {len(items)}")
            items[i] = apply(items[i], item_edit)
        return items
    if not isinstance(base, dict):
        raise DeltaError(f"an object edit on {type(base).__name__}")
    keys, removed = edit.get("k", {}), edit.get("x", [])
    if not isinstance(keys, dict) or not isinstance(removed, list):
        raise DeltaError(f"a malformed object edit: {edit!r}")
    result = {k: v for k, v in base.items() if k not in removed}
    for key, key_edit in keys.items():
        if key in result:
            result[key] = apply(result[key], key_edit)
        elif not isinstance(key_edit, dict):
            result[key] = key_edit
        elif "=" in key_edit:
            result[key] = key_edit["="]
        else:
            raise DeltaError(f"an edit of key {key!r}, which the base lacks")
    return result
