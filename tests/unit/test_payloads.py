"""Unit tests of out-of-line results: the pointer in the log, the value in the workflow (pure logic)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from runtime.errors import AgentlogError
from runtime.log.records.events import RunStarted, ToolCallCompleted
from runtime.log.records.payloads import inline, inlined, is_outlined, outlined, sha256_of
from runtime.workflow.app import App
from runtime.workflow.context import Context
from runtime.workflow.intents import Stamp
from runtime.workflow.machine import RunMachine

pytestmark = pytest.mark.unit

TEXT = json.dumps({"text": "x" * 50_000})


def machine() -> RunMachine:
    app = App("payloads")

    @app.tool("scrape")
    def scrape(url: str) -> Any:
        return None

    @app.workflow("wf")
    async def wf(ctx: Context, request: dict[str, Any]) -> int:
        page = await ctx.tool("scrape", url="https://example.test")
        return len(page["text"])

    started = RunStarted(run_id="r1", seq=1, occurred_at=1, workflow="wf", input="{}", command_offset=0)
    run = RunMachine(app, started, Stamp(itertools.count(5).__next__, "w1", 0))
    run.begin()
    return run


def test_the_log_gets_the_pointer_and_the_workflow_the_value() -> None:
    run = machine()
    _, (command,) = run.drain()
    data = TEXT.encode()
    pointer = outlined(ToolCallCompleted(run_id="", position=command.position, result=TEXT), 7, data)
    assert (pointer.result, pointer.result_offset, pointer.result_size) == ("", 7, len(data))
    assert pointer.result_sha256 == sha256_of(data) and is_outlined(pointer)
    run.record(pointer, result_text=TEXT)
    events, _ = run.drain()
    assert events[0].result == "" and events[0].result_offset == 7  # what is appended: small
    assert run.status == "completed" and run.result == 50_000  # what the workflow saw: the value


def test_read_back_results_are_carried_inline_again() -> None:
    pointer = outlined(ToolCallCompleted(run_id="r1", position=1, result=TEXT), 7, TEXT.encode())
    (back,) = inlined([pointer], {7: TEXT})
    assert back == inline(pointer, TEXT) and back.result == TEXT and not is_outlined(back)


def test_a_pointer_replayed_without_its_result_is_refused_by_name() -> None:
    run = machine()
    _, (command,) = run.drain()
    pointer = outlined(
        ToolCallCompleted(run_id="r1", position=command.position, result=TEXT), 7, TEXT.encode()
    )
    with pytest.raises(AgentlogError, match=r"position 1 is stored out of line \(payloads offset 7\)"):
        run.apply(pointer)
