"""A PydanticAI run's request parameters dumped once while they stay the same values
(runtime.integrations.pydantic_ai.parameter_forms), again when a tool or the output changes."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

import orjson
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from runtime.config import Settings
from runtime.integrations.pydantic_ai import units
from runtime.integrations.pydantic_ai.parameter_forms import ParameterForms
from runtime.log.records.prompts import checked_args, rebuild_inputs
from runtime.replay.replayer import Replayer
from support.memory_worker import serving

pytestmark = pytest.mark.unit

WHAT = "model 'a.model' request parameters"


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


class _Counting:
    """The uncached dump, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, parameters: Any, what: str) -> Any:
        self.calls += 1
        return units.recorded_parameters(parameters, what)


def _agent_parameters(steps: int) -> list[ModelRequestParameters]:
    """The parameters PydanticAI builds for each request of a real agent run (two tools)."""
    seen: list[ModelRequestParameters] = []

    def plan(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(seen) >= steps:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(
            parts=[ToolCallPart("record", {"step": len(seen)}, tool_call_id=f"c{len(seen)}")]
        )

    class Capturing(FunctionModel):
        async def request(self, messages: Any, settings: Any, parameters: Any) -> ModelResponse:
            seen.append(parameters)
            return await super().request(messages, settings, parameters)

    agent = Agent(Capturing(plan), instructions="Work step by step.", name="a")

    @agent.tool_plain
    def record(step: int) -> int:
        """Record the step."""
        return step

    @agent.tool_plain
    def effect(step: int, note: str = "") -> str:
        """Apply the step's effect."""
        return note

    asyncio.run(agent.run("go"))
    return seen


def test_the_same_parameters_of_successive_requests_are_dumped_once_and_read_the_same() -> None:
    requests = _agent_parameters(4)
    assert len(requests) == 4 and len({id(p) for p in requests}) == 4  # a new object each request
    dump, forms = _Counting(), ParameterForms()
    served = [forms.recorded(p, WHAT, dump) for p in requests]
    assert dump.calls == 1
    assert all(s is served[0] for s in served)
    for parameters, recorded in zip(requests, served, strict=True):
        assert _canonical(recorded) == _canonical(units.recorded_parameters(parameters, WHAT))
    # through units, as the capability calls it
    kept = ParameterForms()
    assert _canonical(units.recorded_parameters(requests[1], WHAT, kept)) == _canonical(served[0])


def test_a_tool_added_or_changed_or_another_output_is_dumped_again() -> None:
    first = _agent_parameters(1)[0]
    dump, forms = _Counting(), ParameterForms()
    forms.recorded(first, WHAT, dump)
    tool = first.function_tools[0]

    def check(parameters: ModelRequestParameters, calls: int) -> None:
        recorded = forms.recorded(parameters, WHAT, dump)
        assert dump.calls == calls
        assert _canonical(recorded) == _canonical(units.recorded_parameters(parameters, WHAT))

    added = ToolDefinition(name="refund", parameters_json_schema={"type": "object"}, description="Refund.")
    check(dataclasses.replace(first, function_tools=[*first.function_tools, added]), 2)
    check(dataclasses.replace(first, function_tools=[*first.function_tools, added]), 2)  # same values: kept
    described = dataclasses.replace(tool, description="Record the step, twice.")
    check(dataclasses.replace(first, function_tools=[described, *first.function_tools[1:]]), 3)
    check(dataclasses.replace(first, function_tools=first.function_tools[:1]), 4)  # a tool removed

    # A schema copied anew (the durable path's): the same JSON, kept. One whose JSON differs though
    # it is equal (1 == 1.0 == True), or whose keys are in another order: dumped again.
    def with_schema(schema: dict[str, Any]) -> ModelRequestParameters:
        changed = dataclasses.replace(tool, parameters_json_schema=schema)
        return dataclasses.replace(first, function_tools=[changed, *first.function_tools[1:]])

    check(first, 5)
    check(with_schema(copy.deepcopy(tool.parameters_json_schema)), 5)
    check(with_schema({**tool.parameters_json_schema, "minProperties": 1}), 6)
    check(with_schema({**tool.parameters_json_schema, "minProperties": 1.0}), 7)
    check(with_schema({**tool.parameters_json_schema, "minProperties": True}), 8)
    check(with_schema({**tool.parameters_json_schema, "minProperties": True}), 8)
    check(with_schema(dict(reversed(tool.parameters_json_schema.items()))), 9)
    check(with_schema({**tool.parameters_json_schema, "x": float("nan")}), 10)
    # NaN is recorded as null (orjson, which every record and hash is made by): the same record
    check(with_schema({**tool.parameters_json_schema, "x": None}), 10)
    check(with_schema({**tool.parameters_json_schema, "x": ("a",)}), 11)
    check(with_schema({**tool.parameters_json_schema, "x": ["a"]}), 11)  # a tuple dumps as a list
    check(dataclasses.replace(first, allow_text_output=False, output_mode="tool"), 12)
    check(dataclasses.replace(first, allow_text_output=False, output_mode="tool"), 12)
    check(first, 13)  # back to the first: the one kept was the output's


def test_parameters_it_cannot_read_are_never_reused_and_models_are_kept_apart() -> None:
    dump, forms = _Counting(), ParameterForms()
    plain = {"tools": []}
    forms.recorded(plain, WHAT, dump)
    forms.recorded(plain, WHAT, dump)
    assert dump.calls == 2  # not a dataclass: dumped each time
    parameters = ModelRequestParameters()
    a = forms.recorded(parameters, "model 'a.model' request parameters", dump)
    b = forms.recorded(parameters, "model 'a.model.fast' request parameters", dump)
    assert dump.calls == 4 and a == b
    forms.recorded(ModelRequestParameters(), "model 'a.model' request parameters", dump)
    assert dump.calls == 4


def test_values_orjson_does_not_read_as_json_are_compared_by_identity_or_never_reused() -> None:
    first = _agent_parameters(1)[0]
    tool = first.function_tools[0]
    dump, forms = _Counting(), ParameterForms()

    class Text(str):
        pass

    def with_tool(**changes: Any) -> ModelRequestParameters:
        return dataclasses.replace(first, function_tools=[dataclasses.replace(tool, **changes)])

    text = Text("Record the step.")
    forms.recorded(with_tool(description=text), WHAT, dump)
    forms.recorded(with_tool(description=text), WHAT, dump)
    assert dump.calls == 1  # the same object: kept
    forms.recorded(with_tool(description=Text("Record the step.")), WHAT, dump)
    assert dump.calls == 2  # a str subclass is another value when it is another object
    odd = {1: "a"}  # a key that is not a string: orjson refuses, so the parameters are never reused
    for _ in range(2):
        recorded = forms.recorded(with_tool(metadata=odd), WHAT, dump)
        assert _canonical(recorded) == _canonical(units.recorded_parameters(with_tool(metadata=odd), WHAT))
    assert dump.calls == 4


def test_each_model_call_of_a_run_is_recorded_whole_and_replays() -> None:
    """With the parameters kept and the transcript hashed on from the call before, every call's
    request, rebuilt from the records, hashes to its recorded args hash (what a replay matches)."""
    from examples import refund_pydantic_ai

    with serving(refund_pydantic_ai.app, Settings(partitions=1)) as (client, _log):
        handle = client.submit("refund", {"order": "48211", "steps": 4})
        handle.result(timeout=60)
        history = [e.event for e in handle.events()]
    inputs = rebuild_inputs(history)
    assert len(inputs) >= 4
    params = [checked_args(recorded)["params"] for recorded in inputs.values()]  # raises on a mismatch
    assert all(p == params[0] for p in params) and params[0]["parameters"]["function_tools"]
    replayed = Replayer(app=refund_pydantic_ai.app).replay(history)
    assert replayed.ok and replayed.drift == ()
