"""A reader holding the chain key (an auditor's `agentlog status`) marks a run record that breaks
the run's chain as forged: a forged heartbeat is not shown in the run's status as genuine."""

from __future__ import annotations

import pytest

from runtime.client.reading import RunReader
from runtime.config import Settings
from runtime.log.port.memory import MemoryLog
from runtime.log.records.chain import START, ChainKey, link_of, seal
from runtime.log.records.events import Event, RunStarted, ToolCallHeartbeat, ToolCallScheduled
from runtime.log.schemas.serde import Serde
from runtime.run_status import summarize

pytestmark = pytest.mark.unit

KEY = "the workers' chain key"
RUN = "run-h"


def _history() -> list[Event]:
    return [
        RunStarted(run_id=RUN, seq=1, workflow="w", input="{}", command_offset=0),
        ToolCallScheduled(
            run_id=RUN, seq=2, position=1, tool="export", args_hash="h", idempotency_key="k", args="{}"
        ),
        ToolCallHeartbeat(run_id=RUN, seq=3, position=1, details='{"done": 10}', beat_at=1),
    ]


def _write(log: MemoryLog, serde: Serde, settings: Settings, chain: ChainKey | None) -> int:
    """The run's records chained with the workers' key, then a heartbeat chained with a guess."""
    tip = START
    for event in _history():
        value = serde.encode(event)
        if chain is not None:
            value = seal(chain, RUN.encode(), tip, value)
            tip = link_of(value) or START
        log.append(settings.events_topic, 0, RUN.encode(), value).result()
    forged = ToolCallHeartbeat(run_id=RUN, seq=4, position=1, details='{"done": 99}', beat_at=2)
    value = seal(ChainKey(b"a guess"), RUN.encode(), tip, serde.encode(forged))
    return log.append(settings.events_topic, 0, RUN.encode(), value).result()


def test_a_chain_key_holder_does_not_show_a_forged_heartbeat() -> None:
    settings = Settings(partitions=1, chain_key=KEY)
    serde = Serde.offline(settings)
    log = MemoryLog(settings)
    forged_at = _write(log, serde, settings, ChainKey(KEY.encode()))
    logged = list(RunReader(settings, log, serde).events(RUN))
    assert [e.forged is not None for e in logged] == [False, False, False, True]
    assert logged[3].forged is not None and f"@{forged_at} (ToolCallHeartbeat)" in logged[3].forged
    status = summarize(RUN, logged)
    assert [beat.details for beat in status.heartbeats] == [{"done": 10}], status.heartbeats
    assert len(status.forged) == 1
    # Without the key the reader cannot tell: the forged progress shows.
    plain = Settings(partitions=1)
    shown = summarize(RUN, list(RunReader(plain, log, serde).events(RUN)))
    assert [beat.details for beat in shown.heartbeats] == [{"done": 99}]


def test_a_run_written_before_the_chain_key_is_read_unchecked() -> None:
    settings = Settings(partitions=1, chain_key=KEY)
    serde = Serde.offline(settings)
    log = MemoryLog(settings)
    _write(log, serde, settings, None)  # unchained: recorded before the workers had the key
    assert all(e.forged is None for e in RunReader(settings, log, serde).events(RUN))
