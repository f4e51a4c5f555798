"""PydanticAI agents on agentlog, on the in-memory log: what is recorded, what replay serves,
retries, structured output, approvals that wait for a signal, values that cannot be recorded,
prompt drift, and the capability's transparency outside a workflow.

The models are PydanticAI's own offline ones (``TestModel``, ``FunctionModel``); each counts the
requests it really received, so "nothing re-sent" is counted, not assumed.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic import BaseModel
from pydantic_ai import Agent, DeferredToolRequests, ModelRetry
from pydantic_ai.capabilities import RequestInput
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from runtime.integrations.pydantic_ai import AgentlogDurability, idempotency_key, run_agent
from runtime.log.records.events import Event, ModelCallCompleted, ModelCallFailed, ToolCallScheduled
from runtime.replay.replayer import Replayer
from runtime.replay.upgrade import shadow_replay
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def scripted(*steps: list[Any], seen: list[int] | None = None) -> FunctionModel:
    """A model that answers request n with ``steps[n]`` (parts), counting requests in ``seen``."""
    counter = seen if seen is not None else []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        counter.append(n)
        return ModelResponse(parts=steps[min(n, len(steps) - 1)])

    return FunctionModel(answer)


def serve(app: App, workflow: str, request: Any, *, signals: list[tuple[str, Any]] = ()) -> list[Event]:
    """Run one workflow on a fresh in-memory deployment (sending ``signals`` once it waits)."""

    async def scenario() -> list[Event]:
        harness = Harness(app)
        harness.start()
        run_id = harness.client.submit(workflow, request).run_id
        for name, payload in signals:
            # the agent has had its answer and is waiting: nothing else happens until the signal
            await until(lambda: "ModelCallCompleted" in harness.types(run_id), 5, "the first answer")
            await asyncio.sleep(0.2)
            assert harness.status(run_id).status == "running"
            assert harness.types(run_id)[-1] == "ModelCallCompleted", harness.types(run_id)
            harness.client.run(run_id).signal(name, payload)
        await harness.ended(run_id, timeout=20)
        await harness.stop_all()
        return harness.events(run_id)

    return asyncio.run(scenario())


def _end(events: list[Event]) -> Event:
    return events[-1]


def refund_app(
    instructions: str = "Refund politely.", seen: list[int] | None = None
) -> tuple[App, list[str]]:
    app = App("pydantic-ai-unit")
    effects: list[str] = []
    model = scripted(
        [ToolCallPart("lookup", {"order": "A-1"}, tool_call_id="c1")],
        [ToolCallPart("refund", {"order": "A-1", "amount": 41.6, "reason": "late"}, tool_call_id="c2")],
        [TextPart("refunded")],
        seen=seen,
    )
    agent = Agent(
        model,
        name="support",
        instructions=instructions,
        capabilities=[AgentlogDurability(app, effects={"refund": ("order", "amount")})],
    )

    @agent.tool_plain
    def lookup(order: str) -> dict[str, str]:
        return {"order": order, "status": "late"}

    @agent.tool_plain
    def refund(order: str, amount: float, reason: str) -> str:
        effects.append(idempotency_key())
        return f"refunded {amount} on {order}"

    @app.workflow("refund")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        result = await run_agent(ctx, agent, request["prompt"])
        return {"output": result.output, "requests": result.usage.requests}

    return app, effects


def test_each_model_request_and_tool_call_is_one_recorded_call_and_an_effect_gets_the_runs_key() -> None:
    seen: list[int] = []
    app, effects = refund_app(seen=seen)
    events = serve(app, "refund", {"prompt": "order A-1 came late"})
    assert _end(events).type == "RunCompleted"
    calls = [
        (e.type, getattr(e, "model", "") or getattr(e, "tool", "")) for e in events if "Scheduled" in e.type
    ]
    assert calls == [
        ("ModelCallScheduled", "support.model"),
        ("ToolCallScheduled", "support.lookup"),
        ("ModelCallScheduled", "support.model"),
        ("ToolCallScheduled", "support.refund"),
        ("ModelCallScheduled", "support.model"),
    ]
    refund = next(e for e in events if isinstance(e, ToolCallScheduled) and e.tool == "support.refund")
    assert refund.effect and refund.idempotency_key == effects[0] and len(effects) == 1
    assert seen == [0, 1, 2]
    completed = [e for e in events if isinstance(e, ModelCallCompleted)]
    assert all(c.input_tokens and c.output_tokens for c in completed)  # FunctionModel's usage


def test_replay_serves_every_recorded_call_without_asking_the_model_or_running_a_tool() -> None:
    app, first_effects = refund_app()
    events = serve(app, "refund", {"prompt": "order A-1 came late"})
    seen: list[int] = []
    fresh, fresh_effects = refund_app(seen=seen)
    result = Replayer(app=fresh).replay(events)
    assert result.ok and result.drift == () and result.status == "completed"
    assert result.result == {"output": "refunded", "requests": 3}
    assert seen == [] and fresh_effects == [] and len(first_effects) == 1  # served from the log


def test_changed_instructions_are_drift_for_upgrade_check_not_a_park() -> None:
    app, _ = refund_app()
    events = serve(app, "refund", {"prompt": "order A-1 came late"})
    changed, _ = refund_app(instructions="Refund politely, and apologise.")
    (verdict,) = shadow_replay(changed, [events])
    assert verdict.verdict == "drift", verdict.detail
    assert [d.position for d in verdict.drift] == [1, 3, 5]  # the three model requests


class Refund(BaseModel):
    order: str
    amount: float


def test_structured_output_and_model_retry_are_recorded_and_replayed() -> None:
    app = App("pydantic-ai-structured")
    tries: list[str] = []
    agent = Agent(
        TestModel(custom_output_args={"order": "A-1", "amount": 41.6}),
        name="typed",
        output_type=Refund,
        capabilities=[AgentlogDurability(app)],
    )

    @agent.tool_plain
    def lookup(order: str) -> str:
        tries.append(order)
        if len(tries) == 1:
            raise ModelRetry("the order service was warming up; ask again")
        return "late"

    @app.workflow("typed")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        result = await run_agent(ctx, agent, "refund A-1")
        return result.output.model_dump()

    events = serve(app, "typed", {})
    assert _end(events).type == "RunCompleted"
    assert getattr(_end(events), "result", None) == '{"amount":41.6,"order":"A-1"}'
    lookups = [e for e in events if isinstance(e, ToolCallScheduled) and e.tool == "typed.lookup"]
    assert len(lookups) == 2 and len(tries) == 2  # the ModelRetry was a recorded value, then a retry
    result = Replayer(app=app).replay(events)
    assert result.ok and len(tries) == 2  # the replay served both, the tool was not run again


def test_a_tool_that_needs_approval_waits_for_a_signal_and_runs_once_approved() -> None:
    app = App("pydantic-ai-approval")
    applied: list[str] = []
    agent = Agent(
        scripted(
            [ToolCallPart("refund", {"order": "A-1"}, tool_call_id="refund-1")],
            [TextPart("done")],
        ),
        name="approving",
        output_type=[str, DeferredToolRequests],
        capabilities=[AgentlogDurability(app, effects={"refund": None})],
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        applied.append(idempotency_key())
        return f"refunded {order}"

    @app.workflow("approve")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        result = await run_agent(ctx, agent, "refund A-1", deferred_signal="approval")
        return result.output

    events = serve(app, "approve", {}, signals=[("approval", {"approvals": {"refund-1": True}})])
    assert _end(events).type == "RunCompleted", _end(events)
    assert [e.type for e in events if e.type in ("SignalReceived", "ToolCallScheduled")] == [
        "SignalReceived",
        "ToolCallScheduled",
    ]
    assert len(applied) == 1
    assert Replayer(app=app).replay(events).ok and len(applied) == 1


def test_a_result_that_cannot_be_recorded_fails_the_call_naming_the_tool_and_the_value() -> None:
    app = App("pydantic-ai-unrecordable")

    class Handle:
        def __repr__(self) -> str:
            return "<Handle 7>"

    agent = Agent(TestModel(), name="leaky", capabilities=[AgentlogDurability(app)])

    @agent.tool_plain
    def open_handle() -> Any:
        return Handle()

    @app.workflow("leak")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        return (await run_agent(ctx, agent, "go")).output

    events = serve(app, "leak", {})
    failures = [e for e in events if e.type == "ToolCallFailed"]
    assert len(failures) == 1 and failures[0].final  # terminal: not retried
    message = getattr(failures[0], "error", "")
    assert "leaky.open_handle" in message and "Handle" in message, message
    assert _end(events).type == "RunFailed"


# A rate limit (429, 503, 529) spends no attempts while within the policy's patience (the unit tests
# of runtime.worker.retrying): with none, it fails at once, naming the patience.
@pytest.mark.parametrize(("status", "attempts"), [(429, 1), (503, 1), (500, 3), (400, 1), (401, 1)])
def test_model_http_errors_are_retried_by_status(status: int, attempts: int) -> None:
    app = App(f"pydantic-ai-http-{status}")

    def refuse(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(status, "m", {"error": "no"})

    agent = Agent(
        FunctionModel(refuse),
        name="refused",
        capabilities=[
            AgentlogDurability(
                app, model_retry=RetryPolicy(attempts=3, initial_backoff=0.01, rate_limit_patience=0)
            )
        ],
    )

    @app.workflow("ask")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        return (await run_agent(ctx, agent, "hi")).output

    events = serve(app, "ask", {})
    failed = [e.attempt for e in events if isinstance(e, ModelCallFailed)]
    assert failed == list(range(1, attempts + 1))
    assert _end(events).type == "RunFailed"
    if status in (429, 503):
        (failure,) = [e for e in events if isinstance(e, ModelCallFailed)]
        assert failure.error_type == "ModelRateLimited" and failure.final and failure.retry_at == 0
        assert "past its retry policy's rate_limit_patience of 0 s" in failure.error, failure.error


def test_sync_callbacks_run_inline_on_the_agent_loop_and_sync_tools_off_the_workers_loop() -> None:
    # The agent loop is driven on the workflow's thread: a sync callback there runs inline (a
    # thread of its own would only be waited for); a sync tool is a call and still runs in a thread.
    app = App("pydantic-ai-sync")
    agent = Agent(
        scripted([ToolCallPart("where", {}, tool_call_id="c1")], [TextPart("done")]),
        name="sync",
        capabilities=[AgentlogDurability(app)],
    )
    threads: dict[str, str] = {}

    @agent.instructions
    def instructions() -> str:
        threads["instructions"] = threading.current_thread().name
        return "Be brief."

    @agent.output_validator
    def validate(output: str) -> str:
        threads["validator"] = threading.current_thread().name
        return output

    @agent.tool_plain
    def where() -> str:
        threads["tool"] = threading.current_thread().name
        return "here"

    @app.workflow("sync")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        return (await run_agent(ctx, agent, "hi")).output

    events = serve(app, "sync", {})
    assert _end(events).type == "RunCompleted", _end(events)
    main = threading.main_thread().name
    assert threads["instructions"] == threads["validator"] == main
    assert threads["tool"] != main


def test_outside_a_workflow_the_capability_is_transparent() -> None:
    plain = Agent(TestModel(), name="plain", capabilities=[AgentlogDurability(App("unused"))])
    assert asyncio.run(plain.run("hi")).output == "success (no tool calls)"


def test_run_agent_refuses_an_agent_without_the_capability() -> None:
    app = App("pydantic-ai-missing")
    bare = Agent(TestModel(), name="bare")

    @app.workflow("bare")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        return (await run_agent(ctx, bare, "hi")).output

    events = serve(app, "bare", {})
    assert _end(events).type == "RunFailed"
    assert "AgentlogDurability" in getattr(_end(events), "error", "")


def test_request_input_waits_for_the_signal_its_token_names_and_asks_once() -> None:
    app = App("pydantic-ai-request-input")
    tokens: list[str] = []
    applied: list[str] = []

    def ask(ctx: Any, requests: DeferredToolRequests, token: str) -> None:
        tokens.append(token)  # a real ask would post the token to Slack, email ...

    agent = Agent(
        scripted(
            [ToolCallPart("refund", {"order": "A-1"}, tool_call_id="refund-1")],
            [TextPart("done")],
        ),
        name="asking",
        capabilities=[AgentlogDurability(app, effects={"refund": None}), RequestInput(ask=ask)],
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        applied.append(order)
        return f"refunded {order}"

    @app.workflow("ask")
    async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
        return (await run_agent(ctx, agent, "refund A-1")).output

    async def scenario() -> tuple[list[Event], str]:
        harness = Harness(app)
        harness.start()
        run_id = harness.client.submit("ask", {}).run_id
        await until(lambda: tokens, 5, "the ask")
        await asyncio.sleep(0.2)
        assert harness.status(run_id).status == "running" and applied == []
        token_run, signal = tokens[0].split("/", 1)
        assert token_run == run_id
        harness.client.run(run_id).signal(signal, {"approvals": {"refund-1": True}})
        await harness.ended(run_id, timeout=20)
        await harness.stop_all()
        return harness.events(run_id), signal

    events, signal = asyncio.run(scenario())
    assert _end(events).type == "RunCompleted", _end(events)
    assert signal.endswith("#0") and applied == ["A-1"] and len(tokens) == 1
    assert Replayer(app=app).replay(events).ok and len(tokens) == 1 and applied == ["A-1"]


def test_an_event_stream_handler_sees_the_events_on_the_first_execution_only() -> None:
    def make() -> tuple[App, list[str]]:
        app = App("pydantic-ai-events")
        seen: list[str] = []

        async def handler(ctx: Any, events: Any) -> None:
            async for event in events:
                seen.append(type(event).__name__)

        agent = Agent(
            TestModel(),
            name="streaming",
            capabilities=[AgentlogDurability(app, event_stream_handler=handler)],
        )

        @agent.tool_plain
        def lookup(order: str) -> str:
            return "late"

        @app.workflow("stream")
        async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
            return (await run_agent(ctx, agent, "refund A-1")).output

        return app, seen

    app, seen = make()
    events = serve(app, "stream", {})
    assert _end(events).type == "RunCompleted", _end(events)
    assert "PartStartEvent" in seen  # the model streamed inside its call
    assert "FunctionToolCallEvent" in seen and "FunctionToolResultEvent" in seen
    fresh, seen_again = make()
    assert Replayer(app=fresh).replay(events).ok and seen_again == []


def test_parallel_tool_calls_run_side_by_side_and_replay_in_the_recorded_order() -> None:
    def make() -> tuple[App, list[str]]:
        app = App("pydantic-ai-parallel")
        ran: list[str] = []
        agent = Agent(TestModel(), name="parallel", capabilities=[AgentlogDurability(app)])

        @agent.tool_plain
        async def slow(order: str) -> str:
            await asyncio.sleep(0.05)
            ran.append("slow")
            return "slow answer"

        @agent.tool_plain
        async def quick(order: str) -> str:
            ran.append("quick")
            return "quick answer"

        @app.workflow("parallel")
        async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
            return (await run_agent(ctx, agent, "look both up")).output

        return app, ran

    app, ran = make()
    events = serve(app, "parallel", {})
    calls = [(e.type, getattr(e, "tool", "")) for e in events if e.type.startswith("ToolCall")]
    assert calls == [
        ("ToolCallScheduled", "parallel.slow"),
        ("ToolCallScheduled", "parallel.quick"),
        ("ToolCallCompleted", ""),
        ("ToolCallCompleted", ""),
    ]
    assert ran == ["quick", "slow"]  # side by side: the quick one finished first
    fresh, ran_again = make()
    replayed = Replayer(app=fresh).replay(events)
    assert replayed.ok and replayed.result == '{"slow":"slow answer","quick":"quick answer"}'
    assert ran_again == []


def test_mcp_tool_listings_and_calls_are_recorded_and_replay_needs_no_server(tmp_path: Path) -> None:
    calls_log = tmp_path / "mcp-calls"

    def make(script: Path) -> App:
        app = App("pydantic-ai-mcp")
        transport = StdioTransport(sys.executable, [str(script)], env={"MCP_ORDERS_LOG": str(calls_log)})
        agent = Agent(
            TestModel(),
            name="mcp",
            toolsets=[MCPToolset(transport, id="orders")],
            capabilities=[AgentlogDurability(app)],
        )

        @app.workflow("mcp")
        async def workflow(ctx: Context, request: dict[str, Any]) -> Any:
            return (await run_agent(ctx, agent, "status of A-1")).output

        return app

    events = serve(make(Path(__file__).parent.parent / "support" / "mcp_orders.py"), "mcp", {})
    assert _end(events).type == "RunCompleted", _end(events)
    scheduled = [e for e in events if isinstance(e, ToolCallScheduled)]
    assert [e.tool for e in scheduled] == ["mcp.operation", "mcp.orders.order_status"]
    assert "get_tools" in scheduled[0].args  # the listing is a recorded call
    assert calls_log.read_text().splitlines() == ["a"]
    # pydantic-ai#5875: a listing cached or changed since must not break replay -- here the server
    # is gone altogether; the replay reads the listing and the call from the log.
    replayed = Replayer(app=make(tmp_path / "no-such-server.py")).replay(events)
    assert replayed.ok and replayed.result == '{"order_status":"order a is late"}'
    assert calls_log.read_text().splitlines() == ["a"]


def test_an_agent_delegating_to_another_runs_the_delegate_as_a_child_run() -> None:
    app = App("pydantic-ai-delegation")
    body_ran: list[str] = []
    seen_by_triage: list[Any] = []

    def triage_answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("ask_refunds", {"order": "A-1"}, tool_call_id="d1")])
        seen_by_triage.extend(
            p.content for m in messages for p in getattr(m, "parts", []) if p.part_kind == "tool-return"
        )
        return ModelResponse(parts=[TextPart("handed over")])

    refunds = Agent(
        scripted([TextPart("refunded A-1")]),
        name="refunds",
        capabilities=[AgentlogDurability(app)],
    )
    triage = Agent(
        FunctionModel(triage_answer),
        name="triage",
        capabilities=[AgentlogDurability(app, delegates={"ask_refunds": "refunds"})],
    )

    @triage.tool_plain
    async def ask_refunds(order: str) -> str:
        body_ran.append(order)  # what runs outside agentlog; durably, the child run does the work
        return str((await refunds.run(f"refund {order}")).output)

    @app.workflow("refunds")
    async def refunds_workflow(ctx: Context, request: dict[str, Any]) -> str:
        return str((await run_agent(ctx, refunds, f"refund {request['order']}")).output)

    @app.workflow("triage")
    async def triage_workflow(ctx: Context, prompt: str) -> str:
        return str((await run_agent(ctx, triage, prompt)).output)

    async def scenario() -> tuple[list[str], list[str], str]:
        harness = Harness(app)
        harness.start()
        run_id = harness.client.submit("triage", "my order A-1 was late").run_id
        await harness.ended(run_id, timeout=20)
        child = harness.status(run_id).children[0].run_id
        parent_types, child_types = harness.types(run_id), harness.types(child)
        result = harness.client.run(run_id).result(timeout=1)
        await harness.stop_all()
        return parent_types, child_types, result

    parent_types, child_types, result = asyncio.run(scenario())
    assert result == "handed over"
    assert seen_by_triage == ["refunded A-1"]  # the child's result is the tool's return
    assert body_ran == []  # the tool's body is replaced by the child run
    assert "ChildRunScheduled" in parent_types and "ChildRunEnded" in parent_types
    assert "ToolCallScheduled" not in parent_types  # the delegation is not a tool call
    assert child_types[0] == "RunStarted" and "ModelCallCompleted" in child_types  # its own history
