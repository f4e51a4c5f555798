"""OpenTelemetry spans of a run, captured with the SDK's in-memory exporter (no services).

The run goes through the real worker, machine and client on the in-memory log; the test checks
the GenAI names and attributes, that every span is in the trace id recorded in RunStarted, and
that each call span is a child of the run's span.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import RunStarted
from runtime.log.schemas.serde import Serde
from runtime.worker.loop import Worker
from runtime.worker.tracing import trace_id_for
from runtime.workflow.app import App, RetryPolicy
from runtime.workflow.context import Context

pytestmark = pytest.mark.unit

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    sdk = TracerProvider()
    sdk.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(sdk)  # once per process; the runtime's tracer is a proxy to it


def traced_app() -> App:
    app = App("traced")
    failures = iter([True])

    @app.model("planner")
    async def planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        return {
            "next": "lookup",
            "model": "fake-planner-2",
            "usage": {"prompt_tokens": 42, "completion_tokens": 7},
        }

    @app.tool("lookup", retry=RetryPolicy(attempts=2, initial_backoff=0.001))
    def lookup(order: str) -> dict[str, Any]:
        if next(failures, False):
            raise ConnectionError("flaky lookup")
        return {"order": order}

    @app.workflow("agent")
    async def agent(ctx: Context, request: dict[str, Any]) -> str:
        await ctx.model("planner", messages=[{"role": "user", "content": "go"}])
        await ctx.tool("lookup", order="48211")
        return "done"

    return app


def test_a_run_is_one_trace_with_a_span_per_run_and_per_call_attempt() -> None:
    EXPORTER.clear()
    settings = Settings(partitions=1)
    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    worker = Worker(traced_app(), settings, log=log, serde=serde, worker_id="w1", checkpoint_interval_s=3600)
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    try:
        with Client(settings, identity="test", log=log, serde=serde) as client:
            run_id = client.submit("agent", {}).run_id
            assert client.run(run_id).result(timeout=30) == "done"
            started = next(e.event for e in client.run(run_id).events() if isinstance(e.event, RunStarted))
    finally:
        worker.stop()
        thread.join(timeout=10)

    assert started.trace_id == trace_id_for(run_id)
    spans: list[ReadableSpan] = [
        s for s in EXPORTER.get_finished_spans() if s.attributes.get("agentlog.run_id") == run_id
    ]
    assert sorted(s.name for s in spans) == [
        "chat planner",
        "execute_tool lookup",
        "execute_tool lookup",
        "invoke_agent agent",
    ]
    assert {f"{s.context.trace_id:032x}" for s in spans} == {started.trace_id}
    (run,) = [s for s in spans if s.name == "invoke_agent agent"]
    assert (
        run.attributes["gen_ai.operation.name"] == "invoke_agent"
        and run.attributes["agentlog.status"] == "completed"
    )
    assert all(
        s.parent is not None and s.parent.span_id == run.context.span_id for s in spans if s is not run
    )

    (chat,) = [s for s in spans if s.name == "chat planner"]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "planner"
    assert chat.attributes["gen_ai.response.model"] == "fake-planner-2"
    assert (chat.attributes["gen_ai.usage.input_tokens"], chat.attributes["gen_ai.usage.output_tokens"]) == (
        42,
        7,
    )

    failed, ok = sorted(
        (s for s in spans if s.name == "execute_tool lookup"), key=lambda s: s.attributes["agentlog.attempt"]
    )
    assert (
        failed.status.status_code == trace.StatusCode.ERROR
        and failed.attributes["error.type"] == "ConnectionError"
    )
    assert ok.status.status_code == trace.StatusCode.UNSET and ok.attributes["gen_ai.tool.name"] == "lookup"
