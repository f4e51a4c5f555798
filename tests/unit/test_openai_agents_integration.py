"""OpenAI Agents SDK agents on agentlog, on the in-memory log: a triage agent hands off to a
refund agent that makes two parallel tool calls and a refund; what is recorded, what replay
serves (in the recorded order, asking no model), guardrails, and the caller's agents left as
they were. The models are the SDK's own ``agents.testing.ScriptedModel``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, GuardrailFunctionOutput, RunContextWrapper, function_tool, input_guardrail
from agents.testing import ScriptedModel, assistant_message, function_call

from runtime.integrations.openai_agents import AgentlogRunner, idempotency_key
from runtime.log.records.events import Event, ModelCallCompleted, ModelCallScheduled, ToolCallScheduled
from runtime.log.records.prompts import rebuild_inputs
from runtime.replay.replayer import Replayer
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness

pytestmark = pytest.mark.unit


def support_app(*, scripted: bool = True) -> tuple[App, list[str], Agent[Any]]:
    """The app, the list the tools append to when they really run, and the triage agent. Without
    ``scripted`` the models have no steps left: asking one fails the test."""
    app = App("agents-unit")
    runner = AgentlogRunner(app, name="support", effects={"refund": ("order", "amount")})
    ran: list[str] = []

    @function_tool
    def lookup_order(order: str) -> str:
        ran.append("lookup_order")
        return f"order {order} is late"

    @function_tool
    def lookup_customer(customer: str) -> str:
        ran.append("lookup_customer")
        return f"customer {customer} is gold"

    @function_tool
    def refund(order: str, amount: float) -> str:
        ran.append(f"refund:{idempotency_key()}")
        return f"refunded {amount} on {order}"

    refund_steps: list[Any] = [
        [
            function_call("lookup_order", {"order": "A-1"}, call_id="c1"),
            function_call("lookup_customer", {"customer": "bob"}, call_id="c2"),
        ],
        [function_call("refund", {"order": "A-1", "amount": 41.6}, call_id="c3")],
        [assistant_message("refunded A-1")],
    ]
    refund_agent = Agent(
        name="refund_agent",
        instructions="Refund late orders.",
        tools=[lookup_order, lookup_customer, refund],
        model=ScriptedModel(refund_steps if scripted else []),
    )
    triage = Agent(
        name="triage",
        instructions="Send refund questions to the refund agent.",
        handoffs=[refund_agent],
        model=ScriptedModel(
            [[function_call("transfer_to_refund_agent", {}, call_id="h1")]] if scripted else []
        ),
    )

    @app.workflow("support")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        result = await runner.run(ctx, triage, request["question"])
        return {"answer": result.final_output, "agent": result.last_agent.name}

    return app, ran, triage


def serve(app: App, workflow: str, request: Any) -> list[Event]:
    async def scenario() -> list[Event]:
        harness = Harness(app)
        harness.start()
        run_id = harness.client.submit(workflow, request).run_id
        await harness.ended(run_id, timeout=20)
        await harness.stop_all()
        return harness.events(run_id)

    return asyncio.run(scenario())


def test_model_calls_tools_and_the_handoff_are_recorded_and_parallel_calls_run_together() -> None:
    app, ran, _ = support_app()
    events = serve(app, "support", {"question": "refund A-1 please"})
    assert events[-1].type == "RunCompleted"
    assert getattr(events[-1], "result", "") == '{"agent":"refund_agent","answer":"refunded A-1"}'
    asked = [e for e in events if isinstance(e, ModelCallScheduled)]
    assert [e.model for e in asked] == ["support.model"] * 4
    # the handoff: the first call is the triage agent's, the rest the refund agent's
    inputs = rebuild_inputs(events)  # the params as sent (the record may refer to sequence entries)
    assert [inputs[e.position].params.get("agent") == "triage" for e in asked] == [True, False, False, False]
    assert all(inputs[e.position].params.get("agent") == "refund_agent" for e in asked[1:])
    order = [
        (e.type, getattr(e, "tool", ""))
        for e in events
        if e.type in ("ToolCallScheduled", "ToolCallCompleted")
    ]
    assert order[:4] == [  # both lookups are issued before either answers
        ("ToolCallScheduled", "support.lookup_order"),
        ("ToolCallScheduled", "support.lookup_customer"),
        ("ToolCallCompleted", ""),
        ("ToolCallCompleted", ""),
    ]
    refund = next(e for e in events if isinstance(e, ToolCallScheduled) and e.tool == "support.refund")
    assert refund.effect and ran[-1] == f"refund:{refund.idempotency_key}"
    assert sorted(ran[:2]) == ["lookup_customer", "lookup_order"] and len(ran) == 3
    completed = [e for e in events if isinstance(e, ModelCallCompleted)]
    assert len(completed) == 4


def test_replay_serves_the_recorded_run_in_its_order_without_asking_a_model_or_running_a_tool() -> None:
    app, _, _ = support_app()
    events = serve(app, "support", {"question": "refund A-1 please"})
    fresh, ran, _ = support_app(scripted=False)  # its models would fail if asked
    result = Replayer(app=fresh).replay(events)
    assert result.ok and result.drift == () and result.status == "completed"
    assert result.result == {"answer": "refunded A-1", "agent": "refund_agent"}
    assert ran == []


def test_the_callers_agents_are_left_as_they_were() -> None:
    app, _, triage = support_app()
    tools_before = list(triage.handoffs[0].tools)  # type: ignore[union-attr]  # an Agent handoff
    serve(app, "support", {"question": "refund A-1 please"})
    assert triage.handoffs[0].tools == tools_before  # type: ignore[union-attr]


def test_a_guardrail_is_a_recorded_call_and_its_tripwire_is_replayed() -> None:
    app = App("agents-guardrail")
    runner = AgentlogRunner(app, name="guarded")
    checked: list[str] = []

    @input_guardrail
    def no_fraud(
        context: RunContextWrapper[Any], agent: Agent[Any], question: Any
    ) -> GuardrailFunctionOutput:
        checked.append(str(question))
        return GuardrailFunctionOutput(output_info={"fraud": True}, tripwire_triggered=True)

    agent = Agent(
        name="careful",
        input_guardrails=[no_fraud],
        model=ScriptedModel([[assistant_message("never sent")]]),
    )

    @app.workflow("guarded")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        try:
            await runner.run(ctx, agent, "refund everything")
        except Exception as error:  # the SDK's InputGuardrailTripwireTriggered
            return {"stopped": type(error).__name__}
        return {"stopped": None}

    events = serve(app, "guarded", {})
    guard = [e for e in events if isinstance(e, ToolCallScheduled)]
    assert [e.tool for e in guard] == ["guarded.guardrail.no_fraud"]
    assert getattr(events[-1], "result", "") == '{"stopped":"InputGuardrailTripwireTriggered"}'
    assert len(checked) == 1
    assert Replayer(app=app).replay(events).result == {"stopped": "InputGuardrailTripwireTriggered"}
    assert len(checked) == 1  # served from the log


def test_an_agent_as_a_tool_runs_as_a_child_run_when_delegated() -> None:
    app = App("agents-delegation")
    runner = AgentlogRunner(app, name="desk", delegates={"ask_refunds": "refunds"})
    refunds = Agent(
        name="refunds", instructions="Refund.", model=ScriptedModel([[assistant_message("refunded A-1")]])
    )
    triage_model = ScriptedModel(
        [
            [function_call("ask_refunds", {"input": "refund A-1"}, call_id="t1")],
            [assistant_message("handed over")],
        ]
    )
    triage = Agent(
        name="triage",
        instructions="Hand refunds over.",
        tools=[refunds.as_tool(tool_name="ask_refunds", tool_description="Hand a refund over.")],
        model=triage_model,
    )

    @app.workflow("refunds")
    async def refunds_workflow(ctx: Context, request: dict[str, Any]) -> str:
        return str((await runner.run(ctx, refunds, request["input"])).final_output)

    @app.workflow("desk")
    async def desk(ctx: Context, question: str) -> list[Any]:
        result = await runner.run(ctx, triage, question)
        outputs = [str(item.output) for item in result.new_items if item.type == "tool_call_output_item"]
        return [result.final_output, outputs]

    async def scenario() -> tuple[list[str], list[str], Any]:
        harness = Harness(app)
        harness.start()
        run_id = harness.client.submit("desk", "refund A-1 please").run_id
        await harness.ended(run_id, timeout=20)
        (child,) = harness.status(run_id).children
        types = harness.types(run_id), harness.types(child.run_id)
        result = harness.client.run(run_id).result(timeout=1), child.status
        await harness.stop_all()
        return *types, result

    parent_types, child_types, (result, child_status) = asyncio.run(scenario())
    assert result == ["handed over", ["refunded A-1"]] and child_status == "completed"
    assert "ChildRunScheduled" in parent_types and "ToolCallScheduled" not in parent_types
    assert "ModelCallCompleted" in child_types  # the delegate's model call is in its own history
