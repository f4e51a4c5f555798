"""``upgrade check --from-store``: the selection of in-flight runs from a store's list (pure: a fake
log, a pickling serde, a fake provider function)."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator

import pytest

from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.port.partitioning import partition_for
from runtime.log.port.protocol import LogRecord
from runtime.log.records.events import EpochClaimed, Event, RunCompleted, RunStarted
from runtime.replay import upgrade
from runtime.replay.upgrade import in_flight_histories, store_in_flight

pytestmark = pytest.mark.unit

SETTINGS = Settings(partitions=4)


class PickleSerde:
    def decode(self, data: bytes, key: bytes | None = None, topic: str | None = None) -> Event:
        event = pickle.loads(data)
        assert isinstance(event, Event)
        return event


class FakeLog:
    """Only ``read``; remembers which partitions were read and whether a key filter was given."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[LogRecord]] = {}
        self.reads: list[tuple[int, bool]] = []

    def add(self, event: Event, keyless: bool = False) -> None:
        partition = (
            event.partition
            if isinstance(event, EpochClaimed)
            else partition_for(event.run_id, SETTINGS.partitions)
        )
        held = self.partitions.setdefault(partition, [])
        key = None if keyless else event.run_id.encode()
        held.append(LogRecord(len(held), key, pickle.dumps(event)))

    def read(
        self,
        topic: str,
        partition: int,
        start: int | None = None,
        end: int | None = None,
        keep: Callable[[bytes | None], bool] | None = None,
    ) -> Iterator[LogRecord]:
        assert topic == SETTINGS.events_topic
        self.reads.append((partition, keep is not None))
        for record in self.partitions.get(partition, []):
            if keep is None or keep(record.key):
                yield record


def _started(run_id: str, epoch: int = 0) -> RunStarted:
    return RunStarted(run_id=run_id, workflow="wf", input="{}", command_offset=0, epoch=epoch)


def _log(runs: dict[str, bool]) -> FakeLog:
    """``runs``: run id -> ended."""
    log = FakeLog()
    for run_id, ended in runs.items():
        log.add(_started(run_id))
        if ended:
            log.add(RunCompleted(run_id=run_id, result="1", epoch=0))
    return log


def _ids(histories: list[list[Event]]) -> list[str]:
    return [h[0].run_id for h in histories]


def _runs_on_distinct_partitions(n: int) -> list[str]:
    found: dict[int, str] = {}
    i = 0
    while len(found) < n:
        found.setdefault(partition_for(f"run-{i}", SETTINGS.partitions), f"run-{i}")
        i += 1
    return list(found.values())


def test_only_the_listed_runs_partitions_are_read_with_a_key_filter() -> None:
    a, b, c = _runs_on_distinct_partitions(3)
    log = _log({a: False, b: False, c: False})
    histories, skipped = in_flight_histories(log, PickleSerde(), SETTINGS, [a, c])  # type: ignore[arg-type]
    assert sorted(_ids(histories)) == sorted([a, c]) and skipped == []
    assert sorted(log.reads) == sorted(
        [(partition_for(a, SETTINGS.partitions), True), (partition_for(c, SETTINGS.partitions), True)]
    )


def test_the_same_verdict_as_a_full_scan_for_what_the_store_lists() -> None:
    runs = {f"r{i}": i % 3 == 0 for i in range(12)}
    full, _ = in_flight_histories(_log(runs), PickleSerde(), SETTINGS)  # type: ignore[arg-type]
    listed = [r for r, ended in runs.items() if not ended]
    selected, _ = in_flight_histories(_log(runs), PickleSerde(), SETTINGS, listed)  # type: ignore[arg-type]
    assert sorted(_ids(selected)) == sorted(_ids(full)) == sorted(listed)


def test_a_run_the_log_shows_ended_or_never_started_is_not_in_flight() -> None:
    log = _log({"done": True, "open": False})
    histories, skipped = in_flight_histories(log, PickleSerde(), SETTINGS, ["done", "open", "ghost"])  # type: ignore[arg-type]
    assert _ids(histories) == ["open"] and skipped == []


def test_fenced_records_are_dropped_keyless_epoch_claims_still_read() -> None:
    (run,) = _runs_on_distinct_partitions(1)
    partition = partition_for(run, SETTINGS.partitions)
    log = FakeLog()
    log.add(_started(run, epoch=0))
    log.add(EpochClaimed(run_id="", partition=partition, epoch=5), keyless=True)
    log.add(RunCompleted(run_id=run, result="zombie", epoch=0))  # fenced: epoch 0 < 5
    histories, _ = in_flight_histories(log, PickleSerde(), SETTINGS, [run])  # type: ignore[arg-type]
    assert _ids(histories) == [run]
    assert [type(e).__name__ for e in histories[0]] == ["RunStarted"]


def test_the_provider_list_is_deduplicated() -> None:
    assert store_in_flight(SETTINGS, lambda s: ["b", "a", "b"]) == ["b", "a"]


def test_a_provider_failure_is_one_agentlog_error_line() -> None:
    def broken(settings: Settings) -> list[str]:
        raise ConnectionError("refused\nby the server")

    with pytest.raises(AgentlogError) as caught:
        store_in_flight(SETTINGS, broken)
    assert "\n" not in str(caught.value) and "ConnectionError: refused by the server" in str(caught.value)


def test_no_provider_installed_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    with pytest.raises(AgentlogError, match=r"no provider in the 'agentlog\.in_flight_runs'"):
        upgrade.in_flight_provider()
