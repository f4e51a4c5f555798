"""Unit tests of the usage read from a model's result into ModelCallCompleted (pure logic)."""

from __future__ import annotations

import time

import pytest

from runtime.log.records.events import ModelCallCompleted
from runtime.worker.calls import completed
from runtime.worker.usage import NO_USAGE, Usage, usage_of
from runtime.workflow.futures import DurableFuture
from runtime.workflow.intents import Intent

pytestmark = pytest.mark.unit


def test_the_openai_chat_shape_is_read() -> None:
    result = {
        "content": "ok",
        "model": "gpt-4o-2024-08-06",
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 80,
            "prompt_tokens_details": {"cached_tokens": 1024},
        },
    }
    assert usage_of(result) == Usage(1200, 80, 1024, "gpt-4o-2024-08-06")


def test_the_input_output_shape_is_read() -> None:
    result = {
        "model": "claude-x",
        "usage": {"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 4},
    }
    assert usage_of(result) == Usage(10, 3, 4, "claude-x")


def test_no_usage_is_recorded_as_none_never_guessed() -> None:
    assert usage_of({"next": "lookup"}) == NO_USAGE
    assert usage_of(["not", "a", "dict"]) == NO_USAGE
    assert usage_of({"usage": {"prompt_tokens": "12", "completion_tokens": True}}) == NO_USAGE
    assert usage_of({"model": "m"}) == Usage(response_model="m")


def test_a_completed_model_call_carries_its_usage() -> None:
    intent = Intent(3, "model", "planner", {}, "h", DurableFuture(3))
    event = completed(
        intent, {"usage": {"prompt_tokens": 7, "completion_tokens": 2}, "model": "m1"}, 1, time.perf_counter()
    )
    assert isinstance(event, ModelCallCompleted)
    assert (event.input_tokens, event.output_tokens, event.cached_tokens, event.response_model) == (
        7,
        2,
        None,
        "m1",
    )
