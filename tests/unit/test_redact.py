"""Unit tests of redaction: secrets never reach the recorded arguments (pure logic)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from runtime.log.records.events import (
    Event,
    ModelCallCompleted,
    ModelCallScheduled,
    RunStarted,
    ToolCallCompleted,
    ToolCallScheduled,
)
from runtime.log.records.prompts import checked_args, rebuild_inputs
from runtime.workflow.app import App, RegistrationError
from runtime.workflow.canonical import args_hash, canonical_json
from runtime.workflow.context import Context
from runtime.workflow.intents import Stamp
from runtime.workflow.machine import RunMachine
from runtime.workflow.redact import is_secret_name, redact

pytestmark = pytest.mark.unit

CARD = "4111111111111111"
API_KEY = "sk-live-0123456789abcdef"


def test_names_like_secrets_are_redacted_and_others_are_not() -> None:
    for name in ("api_key", "API_KEY", "Authorization", "password", "token", "access_token", "x-api-key"):
        assert is_secret_name(name), name
    for name in ("max_tokens", "tokens", "order", "keyword", "author"):
        assert not is_secret_name(name), name
    args = {"order": "48211", "headers": {"Authorization": "Bearer abc"}, "items": [{"password": "pw"}]}
    out = redact(args, "run-1")
    assert out["order"] == "48211"
    assert out["headers"]["Authorization"].startswith("[redacted sha256:")
    assert "abc" not in canonical_json(out) and "pw" not in canonical_json(out)
    plain = {"order": "48211", "max_tokens": 100}
    assert redact(plain, "run-1") is plain


def pay_app(card: str = CARD) -> tuple[App, list[dict[str, Any]]]:
    app = App("pay")
    received: list[dict[str, Any]] = []

    @app.model("chat")
    def chat(messages: list[dict[str, Any]], **params: Any) -> Any:
        return None

    @app.tool("charge", effect=True, key_args=("card", "cents"), redact=("card",))
    def charge(card: str, cents: int, api_key: str, *, idempotency_key: str) -> Any:
        received.append({"card": card, "api_key": api_key})

    @app.workflow("pay")
    async def pay(ctx: Context, request: dict[str, Any]) -> int:
        await ctx.model("chat", messages=[{"role": "user", "content": "charge it"}], api_key=API_KEY)
        await ctx.tool("charge", card=card, cents=4160, api_key=API_KEY)
        return 1

    return app, received


def run(app: App, history: Sequence[Event] = ()) -> tuple[RunMachine, list[Event]]:
    started = RunStarted(run_id="r1", seq=1, occurred_at=1, workflow="pay", input="{}", command_offset=0)
    machine = RunMachine(app, started, Stamp(itertools.count(5).__next__, "w1", 0))
    machine.begin(history)
    if history:
        machine.replay(history)
        machine.finish_replay()
    emitted: list[Event] = list(history)
    for _ in range(10):
        events, ready = machine.drain()
        emitted += events
        if not ready:
            break
        for intent in ready:
            done = ToolCallCompleted if intent.kind == "tool" else ModelCallCompleted
            machine.record(done(run_id="r1", position=intent.position, result="null"))
    return machine, emitted


def test_the_recorded_arguments_hold_no_secret_but_the_call_gets_it() -> None:
    app, _ = pay_app()
    machine, events = run(app)
    text = " ".join(
        canonical_json(getattr(e, f))
        for e in events
        for f in e.__dataclass_fields__
        if f not in ("chain", "signature")
    )
    assert CARD not in text and API_KEY not in text
    charge = next(e for e in events if isinstance(e, ToolCallScheduled))
    assert '"card":"[redacted sha256:' in charge.args and '"api_key":"[redacted sha256:' in charge.args
    model = next(e for e in events if isinstance(e, ModelCallScheduled))
    assert model.params is not None and "[redacted sha256:" in model.params
    intent = machine.commands[2]
    assert intent.args["card"] == CARD and intent.args["api_key"] == API_KEY  # what the tool is called with
    checked_args(rebuild_inputs(events)[1])  # the recorded (redacted) input verifies


def test_equal_secrets_keep_their_key_and_a_changed_one_is_a_divergence() -> None:
    first = next(e for e in run(pay_app()[0])[1] if isinstance(e, ToolCallScheduled))
    again = next(e for e in run(pay_app()[0])[1] if isinstance(e, ToolCallScheduled))
    other = next(e for e in run(pay_app("5555555555554444")[0])[1] if isinstance(e, ToolCallScheduled))
    assert first.idempotency_key == again.idempotency_key and first.args_hash == again.args_hash
    assert other.idempotency_key != first.idempotency_key and other.args_hash != first.args_hash


def test_a_record_written_before_redaction_still_replays() -> None:
    app, _ = pay_app()
    _, events = run(app)
    # As older code recorded it: the hash of the raw arguments.
    raw = {"card": CARD, "cents": 4160, "api_key": API_KEY}
    legacy = [
        ToolCallScheduled(
            **{
                **{f: getattr(e, f) for f in e.__dataclass_fields__},
                "args_hash": args_hash("tool", "charge", raw),
            }
        )
        if isinstance(e, ToolCallScheduled)
        else e
        for e in events
        if not isinstance(e, RunStarted)
    ]
    machine, _ = run(app, history=legacy)
    assert machine.divergence is None and machine.status == "completed"


def test_redact_must_name_a_parameter() -> None:
    app = App("bad")
    with pytest.raises(RegistrationError, match="redact names 'pan'"):

        @app.tool("charge", redact=("pan",))
        def charge(card: str) -> None: ...
