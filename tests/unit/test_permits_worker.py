"""The worker's permits: shared when the app declares limits, nothing otherwise; a lease longer
than the session timeout refused naming the setting; partition 0's owner coordinates."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.config import ConfigError, Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.schemas.serde import Serde
from runtime.worker.limits.local import LocalPermits
from runtime.worker.limits.permits import Need
from runtime.worker.limits.shared import SharedPermits
from runtime.worker.loop import Worker
from runtime.workflow.app import App
from runtime.workflow.context import Context
from support.memory_harness import Harness, until

pytestmark = pytest.mark.unit


def limited_app(limited: bool = True) -> App:
    app = App("t")
    if limited:
        app.limit("payments", tools=["pay"], concurrent=2)

    @app.tool("pay")
    async def pay(amount: int) -> int:
        return amount

    @app.workflow("pay")
    async def workflow(ctx: Context, request: dict[str, Any]) -> int:
        paid: int = await ctx.tool("pay", amount=request["amount"])
        return paid

    return app


def worker(app: App, settings: Settings, **kwargs: Any) -> Worker:
    return Worker(
        app, settings, log=MemoryLog(settings), serde=Serde.offline(settings), worker_id="w", **kwargs
    )


def test_an_app_without_limits_builds_no_permits() -> None:
    built = worker(limited_app(limited=False), Settings(partitions=1))
    assert built.shared_permits is None and built.executor.permits is None


def test_an_app_with_limits_shares_them_or_in_one_process_keeps_them_whole() -> None:
    settings = Settings(partitions=1)
    assert isinstance(worker(limited_app(), settings).executor.permits, SharedPermits)
    assert isinstance(worker(limited_app(), settings, shared_limits=False).executor.permits, LocalPermits)


def test_a_lease_longer_than_the_session_timeout_is_refused_naming_the_setting() -> None:
    settings = Settings(partitions=1, limits_lease_s=8.0)
    with pytest.raises(
        ConfigError, match=r"limits_lease_s \(8 s\) is longer than the workers' session timeout"
    ):
        worker(limited_app(), settings, session_timeout_ms=6000)


async def test_the_owner_of_partition_0_coordinates_and_the_run_s_call_gets_its_permit() -> None:
    h = Harness(limited_app())
    serving = h.start()
    shared = serving.shared_permits
    assert shared is not None
    await until(lambda: shared.epoch is not None, what="the worker to coordinate")
    assert shared.epoch == serving.owned[0].epoch
    await until(lambda: shared.blocking([Need("payments", None, "concurrent", 1)]) is None, what="its share")
    h.client.submit("pay", {"amount": 3}, run_id="r")
    assert (await h.ended("r")).status == "completed"
    await h.stop_all()
    await asyncio.sleep(0)
    assert shared.epoch is None  # stopped: it grants nothing more
