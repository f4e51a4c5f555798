"""The sink SIGKILLed mid-stream, several times, and restarted: every record exactly once, no gap."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import Settings
from support.sink import (
    SinkProcess,
    bulk_fill,
    kafka_offsets,
    make_deployment,
    query,
    scalar,
    store_offsets,
    wait_for_rows,
)
from support.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def _assert_exactly_once(dsn: str, settings: Settings, total: int) -> None:
    counts = query(
        dsn,
        "SELECT partition, count(), uniqExact(offset) FROM agentlog.events WHERE topic = {t:String} GROUP BY partition",
        {"t": settings.events_topic},
    ).rows
    assert all(rows == unique for _, rows, unique in counts), counts  # no duplicate offsets
    assert sum(rows for _, rows, _ in counts) == total
    assert store_offsets(dsn, settings.events_topic) == kafka_offsets(
        settings
    )  # per partition: same offsets, no gap


def _kill_during_insert(sink: SinkProcess, dsn: str, target: str, timeout: float = 60.0) -> None:
    """SIGKILL the sink while ClickHouse runs one of its inserts into ``target`` (seen in system.processes)."""
    wait_until(  # no pause between looks: an insert lasts milliseconds
        lambda: scalar(
            dsn,
            "SELECT count() FROM system.processes WHERE startsWith(query, {q:String})",
            {"q": f"INSERT INTO {target}"},
        ),
        timeout,
        f"an insert into {target}",
        interval=0,
        process=sink.proc,
    )
    sink.kill()


# Each kill lands while an insert is running: into the stage (a batch half staged), then into the
# events table (the atomic insert itself), then into either.
KILL_DURING = ("agentlog._stage", "agentlog.events", "agentlog.")


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("driver", "runs", "batch_rows", "kill_at"),
    # direct: 18,000 records in twelve 1,500-row batches, so each of three kills lands mid-stream
    [("direct", 3_000, 1_500, (0.1, 0.4, 0.7)), ("faust", 1_500, 3_000, (0.2, 0.6))],
)
def test_a_sink_killed_mid_batch_resumes_with_no_duplicate_and_no_gap(
    services: Settings, tmp_path: Path, driver: str, runs: int, batch_rows: int, kill_at: tuple[float, ...]
) -> None:
    settings = make_deployment(services, partitions=6)
    total = bulk_fill(settings, runs)
    dsn = f"chdb://{tmp_path / 'analytics'}"
    kills = []
    for n, fraction in enumerate(kill_at):
        sink = SinkProcess(
            settings,
            dsn,
            tmp_path / f"sink-{n}.log",
            driver,
            "--batch-rows",
            str(batch_rows),
            "--flush-interval",
            "0.05",
        )
        landed = wait_for_rows(dsn, settings.events_topic, int(total * fraction), timeout=240, proc=sink.proc)
        _kill_during_insert(sink, dsn, KILL_DURING[n % len(KILL_DURING)])  # SIGKILL: no flush, no cleanup
        kills.append(landed)
    assert min(kills) > 0
    assert int(scalar(dsn, "SELECT count() FROM agentlog.events")) < total, (
        "every kill came after the end: not mid-stream"
    )
    final = SinkProcess(settings, dsn, tmp_path / "sink-final.log", driver)
    try:
        wait_for_rows(dsn, settings.events_topic, total, timeout=300, proc=final.proc)
    finally:
        assert final.stop() == 0, final.log_tail()
    _assert_exactly_once(dsn, settings, total)
