"""Fork to compare: a new run from a run's history that leaves the original alone and never acts.

On the in-memory log, through the real worker, machine and client (no services).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import ModelCallScheduled, PromptDrifted, RunStarted, ToolCallCompleted
from runtime.log.schemas.serde import Serde
from runtime.worker.loop import Worker
from runtime.workflow.app import App
from runtime.workflow.context import Context

pytestmark = pytest.mark.unit


def refund_app(refunds: list[str], seen: list[dict[str, Any]]) -> App:
    app = App("fork")

    @app.model("planner")
    async def planner(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        return {"amount": 41.60, "why": f"v1 at step {params['step']}"}

    @app.model("planner-v2")
    async def planner_v2(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
        return {"amount": 20.80, "why": f"v2 at step {params['step']}"}

    @app.tool("refund", effect=True, key_args=("order", "amount"))
    def refund(order: str, amount: float, *, idempotency_key: str) -> dict[str, Any]:
        refunds.append(f"{order}:{amount}")
        return {"refunded": amount}

    @app.workflow("refund")
    async def refund_agent(ctx: Context, request: dict[str, Any]) -> list[Any]:
        outcomes = []
        for step in (1, 2):
            seen.append(ctx.overrides)
            model = ctx.overrides.get("model", "planner")
            version = ctx.overrides.get("prompt_version", "v1")
            decision = await ctx.model(
                model,
                messages=[{"role": "user", "content": f"prompt {version}"}],
                prompt_version=version,
                step=step,
            )
            outcomes.append(await ctx.tool("refund", order=request["order"], amount=decision["amount"]))
        return outcomes

    return app


@pytest.fixture
def served() -> Iterator[tuple[Client, list[str], list[dict[str, Any]]]]:
    refunds: list[str] = []
    seen: list[dict[str, Any]] = []
    settings = Settings(partitions=1)
    log = MemoryLog(settings)
    serde = Serde.offline(settings)
    worker = Worker(
        refund_app(refunds, seen), settings, log=log, serde=serde, worker_id="w1", checkpoint_interval_s=3600
    )
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    try:
        with Client(settings, identity="test", log=log, serde=serde) as client:
            yield client, refunds, seen
    finally:
        worker.stop()
        thread.join(timeout=10)


def test_a_fork_runs_the_new_model_from_its_position_and_never_calls_an_effect(
    served: tuple[Client, list[str], list[dict[str, Any]]],
) -> None:
    client, refunds, seen = served
    original = client.submit("refund", {"order": "48211"}).run_id
    assert client.run(original).result(timeout=30) == [{"refunded": 41.6}, {"refunded": 41.6}]
    assert refunds == ["48211:41.6", "48211:41.6"]
    before = [e.event for e in client.run(original).events()]
    seen.clear()

    fork = client.run(original).fork(3, {"model": "planner-v2", "prompt_version": "v2"}).run_id
    assert client.run(fork).result(timeout=30) == [{"refunded": 41.6}, {"skipped": "fork"}]
    assert refunds == ["48211:41.6", "48211:41.6"]  # nothing was called in the fork

    after = [e.event for e in client.run(original).events()]
    assert after == before  # the original is untouched (not cancelled, nothing appended)
    events = [e.event for e in client.run(fork).events()]
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.parent_run_id == original and started.fork_overrides is not None
    models = {e.position: e.model for e in events if isinstance(e, ModelCallScheduled)}
    assert models == {1: "planner", 3: "planner-v2"}
    skipped = [e for e in events if isinstance(e, ToolCallCompleted) and e.position == 4]
    assert [e.result for e in skipped] == ['{"skipped":"fork"}']
    assert not [e for e in events if isinstance(e, PromptDrifted)]  # overrides start at the fork position
    assert {"model": "planner-v2", "prompt_version": "v2"} in seen and {} in seen


def test_a_run_that_is_not_a_fork_has_no_overrides(
    served: tuple[Client, list[str], list[dict[str, Any]]],
) -> None:
    client, refunds, seen = served
    run = client.submit("refund", {"order": "7"})
    run.result(timeout=30)
    assert seen == [{}, {}] and refunds == ["7:41.6", "7:41.6"]
