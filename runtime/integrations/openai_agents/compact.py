"""An OpenAI Agents SDK model response recorded compact: the output items as the SDK sends them
back (the fields set, ``exclude_unset``), the usage without its zero counters.

``model_dump`` of an output item writes every field of the OpenAI type, most of them ``null``
(``phase``, ``logprobs``, ``caller``, ``namespace`` ...); the SDK sends an item back on the next
request as ``to_input_item()``, which is the fields set only. Recorded that way, the next request's
copy of the item is the item itself (runtime.log.records.references stores it as an empty edit).

Guaranteed, not assumed: an item is recorded compact only when the SDK's own validation of the
compact form is equal to the item and dumps back to the same fields; the usage only when it
validates to the same ``Usage``. Otherwise the full ``model_dump`` is recorded, as before.
"""

from __future__ import annotations

from typing import Any

from agents.items import TResponseOutputItem
from agents.usage import Usage
from pydantic import TypeAdapter, ValidationError

_output_item: TypeAdapter[TResponseOutputItem] = TypeAdapter(TResponseOutputItem)
_usage = TypeAdapter(Usage)


def compact_item(item: Any) -> dict[str, Any]:
    """An output item (a pydantic model of the OpenAI types) as JSON: its set fields when that
    reads back as the same item, every field otherwise."""
    full: dict[str, Any] = item.model_dump(mode="json")
    compact: dict[str, Any] = item.model_dump(mode="json", exclude_unset=True)
    if compact == full:
        return full
    try:
        again = _output_item.validate_python(compact)
    except ValidationError:
        return full
    if again != item or again.model_dump(mode="json") != full:
        return full
    return compact


def _dropped(mapping: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in mapping.items()
        if not (v is None or v in ({}, []) or (type(v) in (int, float) and v == 0))
    }


def compact_usage(usage: Usage) -> dict[str, Any]:
    """``Usage`` as JSON without its zero, null and empty values (at its top level and in its
    details), when that validates to the same ``Usage``; every field otherwise."""
    full: dict[str, Any] = _usage.dump_python(usage, mode="json")
    compact = _dropped({k: _dropped(v) if isinstance(v, dict) else v for k, v in full.items()})
    try:
        same = _usage.validate_python(compact) == usage
    except ValidationError:
        same = False
    return compact if same else full
