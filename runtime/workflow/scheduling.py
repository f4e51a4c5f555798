"""What a ctx call issues, and, live, the record that schedules it.

Each ``ctx.model`` / ``ctx.tool`` / ``ctx.sleep`` / ``ctx.wait_signal`` / ``ctx.patched`` call
becomes an :class:`~runtime.workflow.intents.Intent` at the next position: its recorded (redacted)
arguments, the hash replay matches it by, and for an effect its idempotency key. Once the run is
live and the intent is new to history, :func:`scheduled_record` writes the ``...Scheduled`` record
the worker appends before it carries the call out. Pure functions: the run machine
(:mod:`runtime.workflow.machine`) keeps the positions, the history and the outbox.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from runtime.errors import AgentlogError
from runtime.log.records.events import (
    Event,
    ModelCallScheduled,
    PatchRecorded,
    PromptDrifted,
    TimerScheduled,
    ToolCallScheduled,
)
from runtime.log.records.prompts import PromptBook
from runtime.workflow.app import App
from runtime.workflow.canonical import (
    args_hash,
    args_hash_and_size,
    canonical_json,
    idempotency_key,
    model_args_hash_and_size,
    sha256_hex,
)
from runtime.workflow.children import CHILD, CHILD_SIGNAL, scheduled_child
from runtime.workflow.earlier_form import Messages
from runtime.workflow.futures import DurableFuture
from runtime.workflow.intents import Drift, Intent, timer_hash
from runtime.workflow.redact import redact


def _note_redaction(command: Intent, recorded: Any) -> Intent:
    command.recorded_args = recorded
    if recorded is not command.args:
        command.legacy_hash = args_hash(command.kind, command.name, command.args)
    return command


def model_intent(
    app: App,
    next_position: Callable[[], int],
    name: str,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    prompt_version: str | None,
    key_root: str,
) -> Intent:
    if name not in app.models:
        raise AgentlogError(f"model {name!r} is not registered (known: {sorted(app.models)})")
    position = next_position()  # taken once the call is known to be valid
    args = {"messages": messages, "params": params, "prompt_version": prompt_version}
    # Params are named (api_key, headers ...); messages are content, not scanned for names.
    recorded_params = redact(params, key_root)
    recorded = args if recorded_params is params else {**args, "params": recorded_params}
    encoded = messages.encoded if isinstance(messages, Messages) else None
    if encoded is not None and len(encoded) == len(messages):
        transcript = messages.transcript if isinstance(messages, Messages) else None
        digest, size = model_args_hash_and_size(name, encoded, recorded["params"], prompt_version, transcript)
    else:
        digest, size = args_hash_and_size("model", name, recorded)
    command = Intent(position, "model", name, args, digest, DurableFuture(position))
    command.prompt_version = prompt_version
    command.size = size
    if isinstance(messages, Messages):
        earlier = messages.earlier
        command.earlier_hash = lambda: args_hash("model", name, {**recorded, "messages": earlier()})
    return _note_redaction(command, recorded)


def tool_intent(
    app: App,
    next_position: Callable[[], int],
    name: str,
    args: dict[str, Any],
    key_root: str,
    identical: Counter[str],
    *,
    key: str | None = None,
    compensates: int | None = None,
) -> Intent:
    """``identical`` counts the effects issued so far per (tool, key arguments): the n-th identical
    effect of a run gets its own key, the same on every replay. ``key``, ``compensates``: a
    compensation's (runtime.workflow.compensation)."""
    spec = app.tools.get(name)
    if spec is None:
        raise AgentlogError(f"tool {name!r} is not registered (known: {sorted(app.tools)})")
    position = next_position()  # taken once the call is known to be valid
    recorded = redact(args, key_root, spec.redact)
    with_carried = recorded
    if spec.carried and any(arg in recorded for arg in spec.carried):
        recorded = {k: v for k, v in recorded.items() if k not in spec.carried}
    command = Intent(position, "tool", name, args, args_hash("tool", name, recorded), DurableFuture(position))
    _note_redaction(command, recorded)
    if with_carried is not recorded:  # recorded before its carried arguments were left out: they were hashed
        command.earlier_hash = lambda: args_hash("tool", name, with_carried)
    if spec.effect:
        # From the recorded (redacted) arguments: nothing in the log is derived from a secret.
        key_args = recorded if spec.key_args is None else {k: recorded.get(k) for k in spec.key_args}
        identity = f"{name}/{sha256_hex(canonical_json(key_args))}"
        command.effect = True
        command.key = key or idempotency_key(key_root, name, key_args, identical[identity])
        identical[identity] += 1
    command.compensates = compensates
    return command


def timer_intent(position: int, duration_ms: int) -> Intent:
    command = Intent(
        position,
        "timer",
        "sleep",
        duration_ms,
        timer_hash("timer", "sleep", duration_ms),
        DurableFuture(position),
    )
    command.duration_ms = duration_ms
    return command


def signal_intent(position: int, name: str, timeout_ms: int | None) -> Intent:
    command = Intent(
        position,
        "signal",
        name,
        timeout_ms,
        timer_hash("signal", name, timeout_ms or 0),
        DurableFuture(position),
    )
    command.duration_ms = timeout_ms or 0
    command.recorded = timeout_ms is not None  # a wait without timeout has nothing to record or match
    return command


def patch_intent(position: int, change_id: str) -> Intent:
    command = Intent(
        position, "patch", change_id, None, args_hash("patch", change_id, None), DurableFuture(position)
    )
    command.future.set_result(True)
    return command


def scheduled_record(
    command: Intent, run_id: str, prompts: PromptBook, blobs: dict[str, bytes], clock: Callable[[], int]
) -> Event:
    """The record that schedules ``command`` (a live timer's ``fire_at`` is set from ``clock``).
    A model call's messages join the run's message sequence ``prompts``; the ones stored out of
    line go into ``blobs``, for the worker to append before the record that points at them."""
    if command.kind == "model":
        # The whole input is recorded: the messages through the run's message sequence (each
        # distinct one once per run), the params as JSON whose large values are entries of that
        # sequence too (runtime.log.records.references). ``args`` stays null (the input is in the
        # fields below; the replay match needs only args_hash, over the whole input).
        messages = command.recorded_args["messages"]
        prompt = prompts.encode(messages, command.recorded_args["params"], getattr(messages, "encoded", None))
        blobs.update(prompt.blobs)
        params = prompt.params
        return ModelCallScheduled(
            run_id=run_id,
            position=command.position,
            model=command.name,
            args_hash=command.hash,
            prompt_version=command.prompt_version,
            message_count=prompt.message_count,
            message_slots=prompt.message_slots,
            new_roles=prompt.new_roles,
            new_messages=prompt.new_messages,
            params=canonical_json(params) if params else None,
        )
    if command.kind == "tool":
        return ToolCallScheduled(
            run_id=run_id,
            position=command.position,
            tool=command.name,
            args_hash=command.hash,
            args=canonical_json(command.recorded_args),
            effect=command.effect,
            idempotency_key=command.key,
            compensates=command.compensates,
        )
    if command.kind in ("timer", "signal"):
        command.fire_at = clock() + command.duration_ms
        return TimerScheduled(
            run_id=run_id,
            position=command.position,
            name="sleep" if command.kind == "timer" else f"signal:{command.name}",
            fire_at=command.fire_at,
            duration_ms=command.duration_ms,
        )
    if command.kind == "patch":
        return PatchRecorded(run_id=run_id, position=command.position, patch_id=command.name)
    if command.kind in (CHILD, CHILD_SIGNAL):
        return scheduled_child(command, run_id)
    raise AgentlogError(f"no record schedules a {command.kind!r} command")


def prompt_drift(recorded: Event, command: Intent) -> Drift | None:
    """The drift between a model call's record and the call issued at its position: same model,
    another args hash (a prompt is activity input, seed 003, so a changed one is served the
    recorded decision and noted). None when the two are not a model call that drifted."""
    if (
        command.kind != "model"
        or not isinstance(recorded, ModelCallScheduled)
        or recorded.model != command.name
        or command.matches(recorded.args_hash)
    ):
        return None
    return Drift(
        command.position,
        command.name,
        recorded.prompt_version,
        command.prompt_version,
        recorded.args_hash,
        command.hash,
    )


def drift_record(run_id: str, drift: Drift) -> PromptDrifted:
    return PromptDrifted(
        run_id=run_id,
        position=drift.position,
        model=drift.model,
        recorded_prompt_version=drift.recorded_prompt_version,
        issued_prompt_version=drift.issued_prompt_version,
        recorded_args_hash=drift.recorded_args_hash,
        issued_args_hash=drift.issued_args_hash,
    )
