"""Stage marks (runtime.stagemarks) are taken at a few seams: the batcher marks every record it
queues and a run's ending's ack, and no other module tests ``stagemarks.ON``."""

from __future__ import annotations

import asyncio

import pytest

from runtime import stagemarks
from runtime.log.port.memory import MemoryLog
from runtime.log.records.events import RunCompleted, RunStarted, TimerScheduled
from runtime.log.schemas.serde import Serde
from runtime.worker.batching import TurnBatcher
from runtime.worker.partition import OwnedPartition
from runtime.workflow.intents import Stamp
from support.memory_harness import SETTINGS
from support.services import ROOT

pytestmark = pytest.mark.unit

SEAMS = {
    "runtime/worker/intake.py",  # a command polled
    "runtime/worker/execution.py",  # a call: its Scheduled ack, its start and end
    "runtime/worker/batching.py",  # each record appended, each batch sent
    "runtime/log/kafka/writer.py",  # each broker ack
    "runtime/results.py",  # the client's tail
}


def test_only_the_seams_test_whether_marks_are_on() -> None:
    testing = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "runtime").rglob("*.py")
        if "stagemarks.ON" in path.read_text() and path.name != "stagemarks.py"
    }
    assert testing == SEAMS


def test_the_batcher_marks_each_record_queued_and_the_ack_of_an_ending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stagemarks, "ON", True)
    monkeypatch.setattr(stagemarks, "_marks", {})
    monkeypatch.setattr(stagemarks, "write", lambda: None)
    batcher = TurnBatcher(SETTINGS, Serde.offline(SETTINGS), MemoryLog(SETTINGS))
    owned = OwnedPartition(0, 1, Stamp(lambda: 0, "w1", 1), 0, set())
    started = RunStarted(
        run_id="r1", seq=1, occurred_at=0, worker="w1", epoch=1, workflow="wf", input="1", command_offset=0
    )
    scheduled = TimerScheduled(
        run_id="r1", seq=2, occurred_at=0, worker="w1", epoch=1, position=1, fire_at=5, duration_ms=5
    )
    ended = RunCompleted(run_id="r1", seq=3, occurred_at=0, worker="w1", epoch=1, result="1")

    async def append() -> None:
        durable = batcher.append(owned, [started, scheduled, ended])
        assert durable is not None
        await durable
        await asyncio.sleep(0)  # the ack's done callbacks

    asyncio.run(append())
    marks = [(stage, run, position) for _, stage, run, position in stagemarks._marks.popitem()[1]]
    assert marks[:3] == [
        ("append RunStarted", "r1", -1),
        ("append TimerScheduled", "r1", 1),
        ("append RunCompleted", "r1", -1),
    ]
    assert ("sent", "r1", -1) in marks and ("end acked", "r1", -1) in marks
