"""A framework unit's body is let go once it has succeeded (runtime.integrations.calls.UnitRef).

A run keeps every command it issued, and each framework call's ``UnitRef`` among the arguments;
the body closes over the framework's objects of its step. These tests hold such an object only
through the body and check that it is freed once the call succeeded, that a failed attempt keeps
the body for its retry, and that an attempt after the success gets the same result.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest

from runtime.errors import RetryableError
from runtime.integrations.calls import ModelResult, UnitRef, register_model, register_tool
from runtime.workflow.app import App

pytestmark = pytest.mark.unit

UNIT = "unit"


class StepObjects:
    """Stands for what a framework's step holds (its run context, tool definitions ...)."""


def _body_holding(step: StepObjects, result: Any, calls: list[int]) -> Any:
    async def body() -> Any:
        calls.append(id(step))
        return result

    return body


def _tool(app: App) -> Any:
    register_tool(app, "op", unit_arg=UNIT, effect=False, key_args=None, retry=None)
    return app.tools["op"].fn


def test_a_tool_s_body_and_what_it_holds_are_let_go_once_it_succeeded() -> None:
    call = _tool(App("settle"))
    step, calls = StepObjects(), []
    held = weakref.ref(step)
    ref = UnitRef("op", _body_holding(step, {"ok": 1}, calls))
    del step

    assert asyncio.run(call(**{UNIT: ref})) == {"ok": 1}
    gc.collect()
    assert held() is None, "the step's objects outlived the call that needed them"
    # An attempt after the success (one the worker gave up on, then retried) gets the same result.
    assert asyncio.run(call(**{UNIT: ref})) == {"ok": 1}
    assert len(calls) == 1


def test_a_failed_attempt_keeps_the_body_for_its_retry() -> None:
    call = _tool(App("retry"))
    attempts: list[int] = []
    step = StepObjects()

    async def flaky() -> Any:
        attempts.append(id(step))
        if len(attempts) == 1:
            raise RetryableError("503 from the service")
        return "done"

    ref = UnitRef("op", flaky)
    with pytest.raises(RetryableError):
        asyncio.run(call(**{UNIT: ref}))
    assert ref.body is flaky
    assert asyncio.run(call(**{UNIT: ref})) == "done"
    assert len(attempts) == 2


def test_a_model_request_s_body_is_let_go_and_a_later_attempt_records_the_same_result() -> None:
    app = App("model")
    register_model(
        app, "requests", unit_arg=UNIT, retry=None, recorded=lambda response: ModelResult(response, {}, None)
    )
    call = app.models["requests"].fn
    step, calls = StepObjects(), []
    held = weakref.ref(step)
    ref = UnitRef("request", _body_holding(step, {"parts": ["hello"]}, calls))
    del step

    first = asyncio.run(call([], **{UNIT: ref}))
    gc.collect()
    assert held() is None
    assert asyncio.run(call([], **{UNIT: ref})) == first == {"response": {"parts": ["hello"]}}
    assert len(calls) == 1
