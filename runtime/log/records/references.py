"""Entries of a run's message sequence stored by reference (runtime.log.records.prompts).

Two forms, both addressed by the first 128 bits of the sha256 of the canonical JSON they stand
for (hex; the same address the writer's book deduplicates by):

- **A params value once per run.** A model call's params carry what a framework sends with every
  request: PydanticAI's tool definitions, output schema and settings, ~3 KB a request. A params
  value (at any depth) whose canonical JSON is at least ``PARAM_VALUE_MIN`` bytes joins the
  sequence as an entry of its own, once per run, and the params JSON holds
  ``{"agentlog_ref": "<address>"}`` in its place. A stored value may itself hold references (the
  tool list inside the request parameters): each is outlined before the value that holds it.
- **A message as an edit** (runtime.log.records.delta) of something the run's records already
  hold: an earlier entry of the sequence (``{"slot": n}``), or a model call's recorded result at
  a path (``{"call": position, "path": [...]}``; only a result recorded inline, so every reader
  has it in the run's records). A response is recorded once, in its ``ModelCallCompleted``; the
  next request's copy of it is the few fields the framework filled in. The entry is
  ``{"agentlog_delta": {"d": "<address>", "e": <edit>, "from": <base>}}``.

Since records3 both are written shorter (the forms above are still read):

- **A reference by slot.** ``{"agentlog_ref": n}`` names entry ``n`` of the run's sequence (which
  is per run and ordered, as ``message_slots`` already name entries), not a 32-hex address; and a
  call's params as a whole, once outlined, are an entry too, so a call that sends the params of an
  earlier one records ``{"agentlog_ref": n}`` (~18 bytes) instead of ~120.
- **An edit entry** is ``+`` followed by the canonical JSON ``[bases, edit]`` (no JSON value starts
  with ``+``, so no earlier entry reads as one). Each base is an entry's slot (an int) or a model
  call's inline result at a path (``[position, key, ...]``); with several, the base is their
  objects merged, the first's keys winning: a resent response is its recorded result plus the keys
  the framework sets on every message (PydanticAI's ``run_id``, ``conversation_id``,
  ``model_id``), taken from the last resent response, so the edit is usually ``{}``. It carries no
  address: a reader hashes the message it rebuilds when something needs its address.

What is hashed and compared is unchanged: the call's ``args_hash`` is over the whole input
(messages and params resolved), so a changed tool definition is a changed prompt, and a reader
checks the input it rebuilt against it. Pure functions: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import orjson

from runtime.log.records.delta import DeltaError, apply

REF = "agentlog_ref"
DELTA = "agentlog_delta"
DELTA_PREFIX = '{"agentlog_delta":'
EDIT_PREFIX = "+"  # an edit entry of the short form (see above)
# Below this a reference (~50 bytes) and its entry cost about what the value does inline.
PARAM_VALUE_MIN = 256


def canonical(value: Any) -> bytes:
    # Same bytes as runtime.workflow.canonical.canonical_json (the log layer cannot import it).
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def address(data: bytes) -> str:
    """An entry's address: 128 bits of the sha256 of its canonical JSON, as hex."""
    return hashlib.sha256(data).hexdigest()[:32]


def outline_params(params: Any, store: Callable[[bytes, str], int]) -> Any:
    """``params`` with each value of at least PARAM_VALUE_MIN bytes replaced by its reference,
    inner values first; ``store(canonical JSON, address)`` is called for each value referred to
    and returns its slot (the book appends it to the sequence unless it holds it already)."""
    if isinstance(params, dict):
        return {k: _outlined(v, store) for k, v in params.items()}
    return params


def _outlined(value: Any, store: Callable[[bytes, str], int]) -> Any:
    if isinstance(value, dict) and _is_ref(value):  # stored too, so that it reads back as itself
        data = canonical(value)
        return {REF: store(data, address(data))}
    if not isinstance(value, (dict, list)):
        return value
    data = canonical(value)
    if len(data) < PARAM_VALUE_MIN:
        return value  # small: nothing inside it is large either
    if isinstance(value, dict):
        reduced: Any = {k: _outlined(v, store) for k, v in value.items()}
    else:
        reduced = [_outlined(v, store) for v in value]
    if reduced != value:
        data = canonical(reduced)
        if len(data) < PARAM_VALUE_MIN:
            return reduced
    return {REF: store(data, address(data))}


def _is_ref(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    target = value.get(REF)
    return isinstance(target, str) or (isinstance(target, int) and not isinstance(target, bool))


def resolve_refs(value: Any, lookup: Callable[[str | int], str | None]) -> Any:
    """``value`` with each reference replaced by the entry it names (``lookup``: address or slot ->
    the entry's canonical JSON, None if the sequence lacks it: the reference is then kept)."""
    if _is_ref(value):
        text = lookup(value[REF])
        if text is None:
            return value
        stored = orjson.loads(text)
        return stored if _is_ref(stored) else resolve_refs(stored, lookup)
    if isinstance(value, dict):
        return {k: resolve_refs(v, lookup) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, lookup) for v in value]
    return value


def edit_body(bases: list[Any], edit: Any) -> str:
    return EDIT_PREFIX + canonical([bases, edit]).decode()


def edit_of(role: str, body: str) -> tuple[list[Any], Any] | None:
    """The bases and edit of a short-form edit entry, or None (any other stored message)."""
    if role or not body.startswith(EDIT_PREFIX):
        return None
    try:
        entry = orjson.loads(body[1:])
    except orjson.JSONDecodeError:
        return None
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list) and entry[0]):
        return None
    return entry[0], entry[1]


def unresolved_edit(bases: list[Any], edit: Any) -> str:
    """What a reader keeps for a short-form edit it cannot resolve: JSON that ``unresolved`` names."""
    return canonical({DELTA: {"e": edit, "from": bases}}).decode()


def resolve_edit(
    bases: list[Any], edit: Any, slot: Callable[[int], Any], result: Callable[[int], Any]
) -> bytes | None:
    """The canonical JSON of the message a short-form edit entry stands for; ``slot(n)`` and
    ``result(position)`` give an entry's and a model call's inline result's parsed JSON (None when
    the reader lacks it). None when a base is missing or the edit does not fit it."""
    try:
        found: list[Any] = []
        for ref in bases:
            if isinstance(ref, int) and not isinstance(ref, bool):
                value = slot(ref)
            elif isinstance(ref, list) and ref and isinstance(ref[0], int):
                value = result(ref[0])
                for step in ref[1:]:
                    value = None if value is None else value[step]
            else:
                return None
            if value is None:
                return None
            found.append(value)
        base = found[0] if len(found) == 1 else merged(found)
        return canonical(apply(base, edit))
    except (DeltaError, KeyError, IndexError, TypeError):
        return None


def merged(objects: list[Any]) -> dict[str, Any]:
    """Several bases as one: their objects' keys, the first object's winning."""
    out: dict[str, Any] = {}
    for value in reversed(objects):
        if not isinstance(value, dict):
            raise TypeError("only objects merge")
        out.update(value)
    return out


def unresolved(messages: Any) -> str | None:
    """The first message still stored as an edit (its base was not in the records read), or None."""
    for i, message in enumerate(messages if isinstance(messages, list) else [], start=1):
        if isinstance(message, dict) and set(message) == {DELTA} and isinstance(message[DELTA], dict):
            return f"message {i}, stored as an edit of {orjson.dumps(message[DELTA].get('from')).decode()},"
    return None


def delta_body(digest: str, edit: Any, base: dict[str, Any]) -> str:
    return canonical({DELTA: {"d": digest, "e": edit, "from": base}}).decode()


def delta_of(role: str, body: str) -> dict[str, Any] | None:
    """The edit entry a stored message is (its ``d``, ``e``, ``from``), or None."""
    if role or not body.startswith(DELTA_PREFIX):
        return None
    entry = orjson.loads(body).get(DELTA)
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("d"), str)
        or not isinstance(entry.get("from"), dict)
    ):
        return None
    return entry


def resolve_delta(entry: dict[str, Any], sequence: list[str], results: dict[int, str]) -> str | None:
    """The canonical JSON of the message an edit entry stands for: its base read from ``sequence``
    (texts so far) or ``results`` (a model call's recorded result text, by position); None when the
    base is not there (or the edit does not fit it, or the outcome is not the message addressed)."""
    base_ref = entry["from"]
    try:
        if "slot" in base_ref:
            slot = base_ref["slot"]
            if (
                not isinstance(slot, int)
                or not 0 <= slot < len(sequence)
                or sequence[slot].startswith(DELTA_PREFIX)
            ):
                return None
            base = orjson.loads(sequence[slot])
        else:
            text = results.get(base_ref.get("call", -1))
            if text is None:
                return None
            base = orjson.loads(text)
            for step in base_ref.get("path", []):
                base = base[step]
        data = canonical(apply(base, entry["e"]))
    except (DeltaError, KeyError, IndexError, TypeError, orjson.JSONDecodeError):
        return None
    return data.decode() if address(data) == entry["d"] else None
