"""Every model input recorded, each distinct message once per run (content-addressed).

A model call's input is its messages, params and prompt_version. Recording the messages whole in
every ``ModelCallScheduled`` makes an agent that resends its transcript grow its log
quadratically; so does recording one hash per message (step 200 names 400 of them). Instead:

- A run has a **message sequence**: every distinct message (its canonical JSON, addressed by its
  sha256) is appended to it once, by the call that first sends it, in that record
  (``new_roles``/``new_messages``: a ``{"role", "content"}`` message as its role and content --
  the JSON wrapper rebuilt on read, a fifth of a short message -- any other shape as its canonical
  JSON with an empty role).
- A call names its prompt as ranges of that sequence (``message_slots``: start, length, ...): a
  transcript resent with one new turn is one range plus the new turn, whatever its length. An
  empty list means "exactly this record's new messages, in order" (a prompt with nothing
  repeated costs no range at all).
- ``message_count`` is the prompt's length; -1 on records written before prompts were recorded.

Where: in the run's own records of the events topic -- not a compacted blob topic keyed by hash,
and not the payloads topic. Replay, rebuild, ``reset`` (which copies a run's records), fencing
and the ClickHouse sink all already read exactly the run's records of its own partition, so the
prompts need no second read, no second retention policy and no second fencing rule; and the
bytes a step costs are counted where the history size is (the limits, the benchmark). The price:
a system prompt shared by many runs is stored once per run, not once in the deployment.

Large messages: a record carries at most ``RECORD_MESSAGE_BUDGET`` bytes of new messages (Kafka
refuses a record over ~1 MB, and a refused record stops the worker on every retry). A new message
that would take the record past it is stored out of line, like a large call result
(runtime.log.records.payloads): its canonical JSON is appended to the payloads topic, in the run's
partition and acknowledged before the record, and the sequence holds a *blob pointer* in its place
(``{"agentlog_blob": {"bytes", "offset", "partition", "sha256"}}``, the sha256 of the message's canonical JSON,
which is also the digest that deduplicates it). Readers that need the text read it back and check
the sha256 (``resolve``); the writer's book and replay need only the digest.

What a framework resends (its tool definitions in the params, the last response as a message)
is stored once too: a large params value is an entry of the sequence that the params refer to,
and a message may be stored as an edit of an earlier entry or of a model call's recorded result
(runtime.log.records.references). The book addresses every entry by 128 bits of its sha256.

Integrity: the rebuilt input is checked against the call's ``args_hash`` (sha256 of the canonical
kind, name and arguments, as replay compares it), so a missing or altered record of the sequence
shows as a mismatch, never as someone else's prompt. The sequence is built from the records a
reader keeps after fencing, which is the same set for the writer's rebuild, replay and the sink.
Pure functions and one small class: no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from runtime.errors import AgentlogError
from runtime.log.records.delta import apply, diff
from runtime.log.records.events import Event, ModelCallCompleted, ModelCallScheduled
from runtime.log.records.references import (
    REF,
    canonical,
    delta_of,
    edit_body,
    edit_of,
    merged,
    outline_params,
    resolve_delta,
    resolve_edit,
    resolve_refs,
    unresolved,
    unresolved_edit,
)
from runtime.log.records.responses import full_text

NOT_RECORDED = -1
# New message bytes one record may carry; a message past it is stored out of line (see above).
RECORD_MESSAGE_BUDGET = 512 * 1024
BLOB = "agentlog_blob"
_BLOB_PREFIX = '{"agentlog_blob":'
UNSTORED = -1  # a pointer's offset until its blob is acknowledged (runtime.worker.execution)
# Records written before large messages were stored out of line hold a placeholder instead.
OMITTED = "agentlog_omitted"
_ADDRESS = 16  # bytes of sha256 that address an entry (runtime.log.records.references)
_RECENT_ENTRIES = 2  # entries a new message may be an edit of: the last request's
_RECENT_RESULTS = 2  # results since the last request (a gather of model calls has more)
_EDIT_MIN = 128  # a smaller message is stored whole: an edit would save little
# Params that held a large value and are at least this long once it is outlined are an entry of
# their own, so a call that sends the params of an earlier one records a reference to them.
_PARAMS_ENTRY_MIN = 48


class PromptMissing(AgentlogError):
    """A recorded prompt could not be rebuilt intact from the run's records; the message says which."""


def _canonical(value: Any) -> str:
    # Same bytes as runtime.workflow.canonical.canonical_json (the log layer cannot import it).
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def message_json(role: str, body: str) -> str:
    """A message's canonical JSON from its stored form (see the module docstring)."""
    return _canonical({"content": body, "role": role}) if role else body


def _stored_form(message: Any, canonical: bytes) -> tuple[str, str]:
    if (
        isinstance(message, dict)
        and len(message) == 2
        and isinstance(message.get("role"), str)
        and isinstance(message.get("content"), str)
        and message["role"]
    ):
        return message["role"], message["content"]
    return "", canonical.decode()


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


@dataclasses.dataclass(frozen=True)
class BlobRef:
    """Where a message stored out of line is: a partition and offset of the payloads topic. The
    partition is the writing run's, named so that a reset or fork (which copies the pointer into a
    run that may live in another partition) still finds it."""

    sha256: str
    size: int
    partition: int
    offset: int


def pointer_body(ref: BlobRef) -> str:
    fields = {"bytes": ref.size, "offset": ref.offset, "partition": ref.partition, "sha256": ref.sha256}
    return _canonical({BLOB: fields})


def blob_ref(role: str, body: str) -> BlobRef | None:
    """The blob a stored message points at, or None if it is stored inline."""
    if role or not body.startswith(_BLOB_PREFIX):
        return None
    return _ref_of(orjson.loads(body))


def _ref_of(message: Any) -> BlobRef | None:
    if not isinstance(message, dict) or set(message) != {BLOB} or not isinstance(message[BLOB], dict):
        return None
    fields = message[BLOB]
    sha, size, partition, offset = (fields.get(k) for k in ("sha256", "bytes", "partition", "offset"))
    if not (
        isinstance(sha, str)
        and isinstance(size, int)
        and isinstance(partition, int)
        and isinstance(offset, int)
    ):
        return None
    return BlobRef(sha, size, partition, offset)


def blob_refs(events: Iterable[Event]) -> list[BlobRef]:
    """Every blob the records' message sequence points at, in log order."""
    refs: list[BlobRef] = []
    for event in events:
        if isinstance(event, ModelCallScheduled):
            for role, body in zip(event.new_roles, event.new_messages, strict=True):
                ref = blob_ref(role, body)
                if ref is not None:
                    refs.append(ref)
    return refs


def located(event: ModelCallScheduled, partition: int, offsets: dict[str, int]) -> ModelCallScheduled:
    """``event`` with where each of its new blobs is stored: ``partition`` of the payloads topic,
    at ``offsets`` (sha256 -> offset, once acknowledged)."""
    bodies = list(event.new_messages)
    for i, (role, body) in enumerate(zip(event.new_roles, bodies, strict=True)):
        ref = blob_ref(role, body)
        if ref is not None and ref.offset == UNSTORED and ref.sha256 in offsets:
            bodies[i] = pointer_body(
                dataclasses.replace(ref, partition=partition, offset=offsets[ref.sha256])
            )
    return dataclasses.replace(event, new_messages=bodies)


@dataclasses.dataclass(slots=True)  # not frozen: built for every model call, and a frozen init costs
class PromptFields:
    """What a ModelCallScheduled carries about its messages."""

    message_count: int
    message_slots: list[int]
    new_roles: list[str]
    new_messages: list[str]
    # Messages to store out of line before the record (sha256 -> canonical JSON): its pointers
    # carry offset UNSTORED until ``located`` fills them in.
    blobs: dict[str, bytes] = dataclasses.field(default_factory=dict)
    # The call's params with their large values referred to (runtime.log.records.references).
    params: Any = None


def _ranges(slots: Sequence[int]) -> list[int]:
    out: list[int] = []
    for slot in slots:
        if out and out[-2] + out[-1] == slot:
            out[-1] += 1
        else:
            out += [slot, 1]
    return out


def _expand(ranges: Sequence[int]) -> list[int]:
    slots: list[int] = []
    for i in range(0, len(ranges) - 1, 2):
        slots.extend(range(ranges[i], ranges[i] + ranges[i + 1]))
    return slots


class PromptBook:
    """One run's message sequence as the writer knows it: sha256 of each message -> its slot."""

    __slots__ = ("_last_params", "_recent", "_results", "_slots", "size")

    def __init__(self) -> None:
        self._slots: dict[bytes, int] = {}  # by address (runtime.log.records.references)
        self.size = 0
        self._recent: list[list[Any]] = []  # [slot, text, parsed]: entries a new message may edit
        self._results: list[list[Any]] = []  # [position, text, parsed]: model results since the last request
        self._last_params: tuple[bytes, Any] = (b"", None)  # sha256 of the last params, as recorded

    def learn_history(self, history: Iterable[Event]) -> None:
        """Rebuild the book from a run's records, in log order: the calls' new messages, and the
        inline results a short-form edit entry may start from."""
        for event in history:
            if isinstance(event, ModelCallScheduled):
                self.learn(event)
            elif isinstance(event, ModelCallCompleted) and event.result_offset is None:
                self.saw_result(event.position, full_text(event))

    def learn(self, event: ModelCallScheduled) -> None:
        """Append a recorded call's new messages (rebuilding the book from history, in log order)."""
        for role, body in zip(event.new_roles, event.new_messages, strict=True):
            ref = blob_ref(role, body)
            delta = delta_of(role, body)
            edit = edit_of(role, body) if ref is None and delta is None else None
            digest: bytes | None
            if ref is not None:
                digest = bytes.fromhex(ref.sha256)[:_ADDRESS]
            elif delta is not None:
                digest = bytes.fromhex(delta["d"])
            elif edit is not None:
                # No address in the entry: the message's, if its bases are still at hand (else
                # the entry is not deduplicated against; a later copy is stored again, still right).
                data = resolve_edit(edit[0], edit[1], self._recent_value, self._result_value)
                digest = None if data is None else hashlib.sha256(data).digest()[:_ADDRESS]
                if data is not None:
                    self._remember(self.size, data.decode(), None)
            else:
                text = message_json(role, body)
                digest = _digest(text)[:_ADDRESS]
                self._remember(self.size, text, None)
            if digest is not None:
                self._slots.setdefault(digest, self.size)
            self.size += 1
        if event.message_count != NOT_RECORDED:
            self._results.clear()  # as encode does: the next request resends only later results

    def _recent_value(self, slot: int) -> Any:
        for entry in self._recent:
            if entry[0] == slot:
                if entry[2] is None:
                    entry[2] = orjson.loads(entry[1])
                return entry[2]
        return None

    def _result_value(self, position: int) -> Any:
        for entry in self._results:
            if entry[0] == position:
                if entry[2] is None:
                    entry[2] = orjson.loads(entry[1])
                return entry[2]
        return None

    def saw_result(self, position: int, result: str) -> None:
        """A model call's result, recorded inline: the next request may send it back as a message,
        stored then as an edit of it (runtime.log.records.references)."""
        self._results.append([position, result, None])
        del self._results[:-_RECENT_RESULTS]

    def _remember(self, slot: int, text: str | None, value: Any) -> None:
        self._recent.append([slot, text, value])
        del self._recent[:-_RECENT_ENTRIES]

    def _bases(self) -> Iterator[tuple[list[Any], Any]]:
        """What a new message may be stored as an edit of: recent entries, recent results' objects,
        and each result's object filled in with a recent entry's other keys (a resent response)."""
        recent = [([entry[0]], self._recent_value(entry[0])) for entry in self._recent]
        yield from recent
        for entry in self._results:
            result = self._result_value(entry[0])
            for ref, value in self._result_objects(entry[0], result):
                yield [ref], value
                if isinstance(value, dict):
                    for slot_ref, other in recent:
                        if isinstance(other, dict) and other.keys() - value.keys():
                            yield [ref, *slot_ref], merged([value, other])

    @staticmethod
    def _result_objects(position: int, result: Any) -> Iterator[tuple[list[Any], Any]]:
        yield [position], result
        if isinstance(result, dict):
            for key, value in result.items():
                if isinstance(value, dict):
                    yield [position, key], value
                    # The items of a response's output list (the OpenAI Agents SDK sends each back).
                    for inner, items in value.items():
                        if isinstance(items, list):
                            for i, item in enumerate(items):
                                if isinstance(item, dict):
                                    yield [position, key, inner, i], item

    def _as_edit(self, message: Any, data: bytes) -> str | None:
        """``message`` stored as an edit of a base the records hold, when that is much smaller."""
        if not isinstance(message, dict) or len(data) < _EDIT_MIN:
            return None
        best: tuple[str, Any, Any] | None = None
        keys = message.keys()
        for base_ref, base in self._bases():
            if not isinstance(base, dict) or len(keys ^ base.keys()) > len(keys) // 2:
                continue
            edit = diff(base, message)
            body = edit_body(base_ref, edit)
            if best is None or len(body) < len(best[0]):
                best = body, base, edit
        if best is None or len(best[0]) * 4 > len(data) * 3:
            return None
        # Equal is not identical (1 == 1.0 == True): keep the edit only if it rebuilds the same bytes.
        return best[0] if canonical(apply(best[1], best[2])) == data else None

    def encode(
        self, messages: Any, params: Any = None, encoded: Sequence[tuple[bytes, bytes]] | None = None
    ) -> PromptFields:
        """The fields recording ``messages`` and ``params``; the new ones join the sequence: the
        large values of ``params`` first (``PromptFields.params`` refers to them), then the messages.
        ``encoded``: each message's canonical JSON and its sha256 digest, if the caller has them."""
        roles: list[str] = []
        bodies: list[str] = []
        blobs: dict[str, bytes] = {}
        budget = [RECORD_MESSAGE_BUDGET]

        def add(value: Any, data: bytes, full: bytes, edit: bool) -> int:
            digest = full[:_ADDRESS]
            slot = self._slots.get(digest)
            if slot is not None:
                return slot
            slot = self._slots[digest] = self.size
            self.size += 1
            body = self._as_edit(value, data) if edit else None
            if body is not None:
                role = ""
            elif len(data) > budget[0]:
                blobs[full.hex()] = data
                role, body = "", pointer_body(BlobRef(full.hex(), len(data), UNSTORED, UNSTORED))
                edit = False  # out of line: not a base (a reader may lack the payload)
            else:
                budget[0] -= len(data)
                role, body = _stored_form(value, data)
            if edit and not role:
                self._remember(slot, None, value)
            roles.append(role)
            bodies.append(body)
            return slot

        def store(data: bytes, _address: str) -> int:
            full = hashlib.sha256(data).digest()
            return add(orjson.loads(data), data, full, True)

        first_new = self.size  # "plain" (no slots) means all of this record's entries, values too
        # Most calls send the params of the call before: one serialization finds them.
        whole = hashlib.sha256(canonical(params)).digest() if params else b""
        if whole and whole == self._last_params[0]:
            recorded_params = self._last_params[1]
        else:
            recorded_params = outline_params(params, store)
            # Params that held a large value (a framework's, sent with every request) are an entry
            # as a whole too; small params (a native call's) stay inline, where they cost least.
            if isinstance(recorded_params, dict) and recorded_params != params:
                data = canonical(recorded_params)
                if len(data) >= _PARAMS_ENTRY_MIN:
                    recorded_params = {REF: store(data, "")}
            self._last_params = (whole, recorded_params)
        if not isinstance(messages, list):
            return PromptFields(NOT_RECORDED, [], roles, bodies, blobs, recorded_params)
        slots: list[int] = []
        if encoded is None or len(encoded) != len(messages):
            # The canonical JSON of a {"role", "content"} message is exactly what message_json
            # rebuilds from its stored form, so one serialization serves the digest and the size.
            datas = [orjson.dumps(message, option=orjson.OPT_SORT_KEYS) for message in messages]
            encoded = [(data, hashlib.sha256(data).digest()) for data in datas]
        for message, (data, full) in zip(messages, encoded, strict=True):
            slots.append(add(message, data, full, True))
        self._results.clear()  # a response is sent back by the request that follows it, if at all
        plain = slots == list(range(first_new, self.size))
        # No messages but new values: one empty range (no ranges at all would read as "all new").
        ranges = [] if plain else _ranges(slots) or [first_new, 0]
        return PromptFields(len(messages), ranges, roles, bodies, blobs, recorded_params)


@dataclasses.dataclass(frozen=True)
class RecordedInput:
    """One model call's full input, rebuilt from the run's records."""

    position: int
    model: str
    messages: list[Any] | None  # None: recorded before prompts were (message_count -1)
    params: dict[str, Any]
    prompt_version: str | None
    args_hash: str
    missing: str | None = None  # a params value referred to that the records read do not hold


def rebuild_inputs(
    events: Iterable[Event], blobs: Mapping[str, str] | None = None
) -> dict[int, RecordedInput]:
    """Every model call's input in one run's records (after fencing, in log order), by position.

    ``blobs``: the text of messages stored out of line, by sha256 (runtime.log.records.payloads.read_blobs,
    already checked); a message not in it stays its pointer, which ``checked_args`` refuses.
    Raises PromptMissing when a prompt refers to messages the records do not hold."""
    blobs = blobs or {}
    sequence: list[str] = []
    addresses = _Addresses(sequence)
    results: dict[int, str] = {}  # model results recorded inline: what an edit entry may start from
    found: dict[int, RecordedInput] = {}
    for event in events:
        if isinstance(event, ModelCallCompleted) and event.result_offset is None:
            results[event.position] = full_text(event)
        if not isinstance(event, ModelCallScheduled):
            continue
        first_new = len(sequence)
        for role, body in zip(event.new_roles, event.new_messages, strict=True):
            ref = blob_ref(role, body)
            delta = delta_of(role, body) if ref is None else None
            edit = edit_of(role, body) if ref is None and delta is None else None
            if delta is not None:
                addresses.known[delta["d"]] = len(sequence)
                sequence.append(resolve_delta(delta, sequence, results) or body)
            elif edit is not None:
                data = resolve_edit(edit[0], edit[1], addresses.value, lambda p: _parsed(results.get(p)))
                if data is None:
                    addresses.unresolved.add(len(sequence))
                sequence.append(unresolved_edit(*edit) if data is None else data.decode())
            else:
                sequence.append(message_json(role, body) if ref is None else blobs.get(ref.sha256, body))
        messages: list[Any] | None = None
        if event.message_count != NOT_RECORDED:
            slots = (
                _expand(event.message_slots) if event.message_slots else list(range(first_new, len(sequence)))
            )
            if len(slots) != event.message_count or any(s >= len(sequence) or s < 0 for s in slots):
                raise PromptMissing(
                    f"run {event.run_id}: the prompt of model call {event.position} names messages "
                    f"{_describe(slots)} of a sequence of {len(sequence)} in the run's records"
                )
            messages = [orjson.loads(sequence[s]) for s in slots]
        addresses.missing = None
        params = resolve_refs(orjson.loads(event.params), addresses.lookup) if event.params else {}
        found[event.position] = RecordedInput(
            event.position,
            event.model,
            messages,
            params,
            event.prompt_version,
            event.args_hash,
            addresses.missing,
        )
    return found


class _Addresses:
    """The sequence's entries by address, hashed as far as a reference needs (most reads need none)."""

    def __init__(self, sequence: list[str]) -> None:
        self.sequence = sequence
        self.known: dict[str, int] = {}  # edit entries, by the address they carry
        self.hashed = 0
        self.missing: str | None = None  # the last address a params value named and the sequence lacks
        self.unresolved: set[int] = set()  # short-form edit entries whose base the records lack

    def value(self, slot: int) -> Any:
        """Entry ``slot``'s JSON, None when it is not there (or is an edit left unresolved)."""
        if not 0 <= slot < len(self.sequence) or slot in self.unresolved:
            return None
        text = self.sequence[slot]
        if text.startswith(_BLOB_PREFIX) or text.startswith('{"agentlog_delta":'):
            return None
        return orjson.loads(text)

    def lookup(self, wanted: str | int) -> str | None:
        if isinstance(wanted, int):
            if self.value(wanted) is None:
                self.missing = str(wanted)
                return None
            return self.sequence[wanted]
        while wanted not in self.known and self.hashed < len(self.sequence):
            text = self.sequence[self.hashed]
            self.known.setdefault(hashlib.sha256(text.encode()).hexdigest()[:32], self.hashed)
            self.hashed += 1
        slot = self.known.get(wanted)
        if slot is None:
            self.missing = wanted
            return None
        return self.sequence[slot]


def _parsed(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def _describe(slots: Sequence[int]) -> str:
    return str(slots) if len(slots) <= 8 else f"[{slots[0]} .. {slots[-1]}] ({len(slots)})"


def checked_args(recorded: RecordedInput) -> dict[str, Any]:
    """The call's arguments as the workflow issued them, checked against the recorded args hash
    (sha256 of canonical ``[kind, name, args]``, as runtime.workflow.canonical.args_hash)."""
    for i, message in enumerate(recorded.messages or [], start=1):
        ref = _ref_of(message)
        if ref is not None:
            raise PromptMissing(
                f"model call {recorded.position}: message {i} is stored out of line ({ref.size} bytes at "
                f"payloads[{ref.partition}]@{ref.offset}, sha256 {ref.sha256}) and was not read back"
            )
        if isinstance(message, dict) and set(message) == {OMITTED}:
            raise PromptMissing(
                f"model call {recorded.position}: message {i} was too large to record "
                f"({message[OMITTED].get('bytes')} bytes, sha256 {message[OMITTED].get('sha256')})"
            )
    left = unresolved(recorded.messages) or (
        f"params value {recorded.missing}" if recorded.missing is not None else None
    )
    if left is not None:
        raise PromptMissing(
            f"model call {recorded.position}: {left} is stored by reference and the run's records "
            "read here do not hold it"
        )
    args = {
        "messages": recorded.messages,
        "params": recorded.params,
        "prompt_version": recorded.prompt_version,
    }
    digest = hashlib.sha256(_canonical(["model", recorded.model, args]).encode()).hexdigest()[:16]
    if recorded.messages is None or digest != recorded.args_hash:
        raise PromptMissing(
            f"model call {recorded.position}: the input rebuilt from the records does not match its "
            f"args hash {recorded.args_hash} (rebuilt {digest}): a record of the run's message "
            "sequence is missing or altered"
            if recorded.messages is not None
            else f"model call {recorded.position} was recorded before prompts were (only its hash is kept)"
        )
    return args
