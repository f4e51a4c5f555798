"""``agentlog audit`` against a store the sink filled from real Kafka, through the real CLI.

(Audit after the sink was SIGKILLed: tests/chaos/test_audit_store_handoff.py.)

One deployment holds the cases every question needs: a run continued by a new worker while
the fenced old one (a zombie) keeps writing, a run over a low history threshold, a tool whose
effect completed twice under one idempotency key, and a run that diverged and was parked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from runtime.config import Settings
from runtime.log.records import events as ev
from support.sink import (
    EventLog,
    RunWriter,
    SinkProcess,
    agentlog,
    kafka_offsets,
    kafka_timeline,
    make_deployment,
    query,
    seq_types,
    wait_for_rows,
    with_epoch,
)

pytestmark = pytest.mark.integration

WARN_EVENTS = 10


@dataclass
class Scenario:
    settings: Settings
    dsn: str
    sink: SinkProcess
    zombie_key: str
    duplicate_key: str


def _zombie_run(log: EventLog) -> str:
    """Worker 1 runs the run; worker 2 claims the partition and goes on; worker 1 keeps writing."""
    run = RunWriter("run-zombie")
    p = log.partition(run.run_id)
    run.epoch = log.claim(p, worker="w1")
    log.append([run.started(), *run.model_call(1)])
    new_epoch = log.claim(p, worker="w2")
    old_epoch, run.epoch, run.worker = run.epoch, new_epoch, "w2"
    resumed = run.tool_call(2)
    zombie_key = "zombie-" + str(resumed[0].idempotency_key)  # type: ignore[attr-defined]
    zombie = ev.ToolCallScheduled(
        run_id=run.run_id,
        seq=resumed[0].seq,
        epoch=old_epoch,
        worker="w1",
        occurred_at=resumed[0].occurred_at,
        position=2,
        tool="refund",
        args_hash="z",
        args="{}",
        effect=True,
        idempotency_key=zombie_key,
    )
    log.append([resumed[0], zombie, resumed[1], with_epoch(zombie, old_epoch), run.completed()])
    return zombie_key


def _duplicate_effect(log: EventLog) -> str:
    """A refund that completed, then ran again after a crash left it in doubt: same key, two completions."""
    run = RunWriter("run-duplicate")
    scheduled, completed = run.tool_call(1, key="refund-order-42")
    again = run.next(ev.ToolCallCompleted, position=1, result='{"ok":true}', attempt=2, in_doubt=True)
    log.append([run.started(), scheduled, completed, again, *run.tool_call(2, tool="email"), run.completed()])
    return "refund-order-42"


def _diverged(log: EventLog) -> None:
    run = RunWriter("run-diverged")
    log.append(
        [
            run.started(),
            run.next(
                ev.Redecided,
                position=1,
                original="refund 40",
                check="order already refunded",
                replacement="notify",
            ),
            run.next(
                ev.NonDeterminismDetected,
                position=2,
                expected="tool refund",
                issued="tool email",
                message="position 2 differs",
            ),
            run.next(ev.RunParked, reason="non-determinism at position 2", position=2),
        ]
    )


@pytest.fixture(scope="module")
def scenario(services: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    settings = make_deployment(services, partitions=4)
    tmp = tmp_path_factory.mktemp("audit")
    log = EventLog(settings)
    duplicate_key = _duplicate_effect(log)
    _diverged(log)
    big = RunWriter("run-big")
    log.append(
        [big.started(), *[e for i in range(5) for e in big.tool_call(i + 1, tool="lookup")], big.completed()]
    )
    small = RunWriter("run-small")
    log.append([small.started(), small.completed()])
    zombie_key = _zombie_run(log)  # last: its claims raise the epoch of whatever its partition holds next
    dsn = f"chdb://{tmp / 'analytics'}"
    sink = SinkProcess(settings, dsn, tmp / "sink.log")
    total = sum(len(offsets) for offsets in kafka_offsets(settings).values())
    wait_for_rows(dsn, settings.events_topic, total, proc=sink.proc)
    yield Scenario(settings, dsn, sink, zombie_key, duplicate_key)
    sink.stop()


def _json(scenario: Scenario, *args: str, **env: str) -> list[dict[str, Any]]:
    result = agentlog(scenario.settings, "audit", *args, "--dsn", scenario.dsn, "--json", **env)
    assert result.returncode == 0, result.stderr
    value = json.loads(result.stdout)
    assert isinstance(value, list)
    return value


def test_audit_run_lists_the_logs_events_in_log_order_without_the_zombies(scenario: Scenario) -> None:
    events = _json(scenario, "run", "run-zombie")
    assert seq_types(events) == kafka_timeline(scenario.settings, "run-zombie")
    assert [e["type"] for e in events] == [
        "RunStarted",
        "ModelCallScheduled",
        "ModelCallCompleted",
        "ToolCallScheduled",
        "ToolCallCompleted",
        "RunCompleted",
    ]
    assert scenario.zombie_key not in json.dumps(events)
    assert all(e["worker"] == ("w1" if e["seq"] <= 3 else "w2") for e in events)
    offsets = [e["offset"] for e in events]
    assert offsets == sorted(offsets)


def test_audit_run_matches_agentlog_history(scenario: Scenario) -> None:
    history = agentlog(scenario.settings, "history", "run-zombie", "--json")
    assert history.returncode == 0, history.stderr
    audited = _json(scenario, "run", "run-zombie")
    logged = json.loads(history.stdout)
    assert seq_types(audited) == seq_types(logged)
    common = ("seq", "type", "run_id", "epoch", "worker", "occurred_at", "offset", "partition")
    assert [{k: e[k] for k in common} for e in audited] == [{k: e[k] for k in common} for e in logged]


def test_fenced_records_are_kept_flagged_but_never_counted(scenario: Scenario) -> None:
    fenced = query(
        scenario.dsn,
        "SELECT count(), any(idempotency_key) FROM agentlog.events WHERE run_id = 'run-zombie' AND fenced = 1",
    ).rows
    assert fenced == [[2, scenario.zombie_key]]
    sizes = {r["run_id"]: r for r in _json(scenario, "history-size", "--top", "100")}
    assert sizes["run-zombie"]["events"] == 6
    keys = {r["idempotency_key"] for r in _json(scenario, "tools")}
    assert scenario.zombie_key not in keys
    runs = {r["run_id"]: r["status"] for r in _json(scenario, "runs")}
    assert runs["run-zombie"] == "completed"


def test_history_size_over_warn_flags_only_the_run_over_the_threshold(scenario: Scenario) -> None:
    env = {"AGENTLOG_HISTORY_WARN_EVENTS": str(WARN_EVENTS)}
    flagged = _json(scenario, "history-size", "--over", "warn", **env)
    assert [r["run_id"] for r in flagged] == ["run-big"]
    assert (
        flagged[0]["events"] == 12 and flagged[0]["over_warn"] is True and flagged[0]["over_limit"] is False
    )
    everyone = _json(scenario, "history-size", "--top", "100", **env)
    assert {r["run_id"] for r in everyone if r["over_warn"]} == {"run-big"}
    assert len(everyone) == 5
    assert _json(scenario, "history-size", "--over", "limit", **env) == []
    table = agentlog(
        scenario.settings, "audit", "history-size", "--over", "warn", "--dsn", scenario.dsn, **env
    )
    assert table.returncode == 0 and "run-big" in table.stdout and "run-small" not in table.stdout


def test_tools_shows_attempts_per_key_so_a_duplicate_effect_stands_out(scenario: Scenario) -> None:
    rows = _json(scenario, "tools")
    by_key = {r["idempotency_key"]: r for r in rows}
    duplicate = by_key[scenario.duplicate_key]
    assert (
        duplicate["completions"],
        duplicate["attempts"],
        duplicate["duplicate"],
        duplicate["in_doubt"],
    ) == (2, 2, True, True)
    assert rows[0]["idempotency_key"] == scenario.duplicate_key  # duplicates first
    assert sum(1 for r in rows if r["duplicate"]) == 1
    assert {r["tool"] for r in _json(scenario, "tools", "--tool", "email")} == {"email"}
    assert _json(scenario, "tools", "--since", "2099-01-01") == []
    assert len(_json(scenario, "tools", "--since", "1h")) == len(rows)


def test_divergences_lists_redecisions_nondeterminism_and_parking(scenario: Scenario) -> None:
    rows = _json(scenario, "divergences")
    assert [(r["run_id"], r["kind"]) for r in rows] == [
        ("run-diverged", "redecided"),
        ("run-diverged", "non_determinism"),
        ("run-diverged", "parked"),
    ]
    assert "order already refunded" in str(rows[0]["detail"])
    assert "history: tool refund; code issued: tool email" in str(rows[1]["detail"])
    assert {r["run_id"]: r["status"] for r in _json(scenario, "runs", "--status", "parked")} == {
        "run-diverged": "parked"
    }


def test_sql_is_read_only(scenario: Scenario) -> None:
    count = _json(scenario, "sql", "SELECT count() AS n FROM agentlog.events WHERE fenced = 0")
    assert count[0]["n"] > 0
    refused = agentlog(scenario.settings, "audit", "sql", "DROP TABLE agentlog.events", "--dsn", scenario.dsn)
    assert refused.returncode == 1 and "only read-only statements" in refused.stderr
    sneaky = agentlog(
        scenario.settings, "audit", "sql", "SELECT 1; DROP TABLE agentlog.events", "--dsn", scenario.dsn
    )
    assert sneaky.returncode == 1
    assert _json(scenario, "sql", "SELECT count() AS n FROM agentlog.events")[0]["n"] == count[0]["n"] + 2
