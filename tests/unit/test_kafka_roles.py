"""runtime.log.kafka.roles: only a worker may write history; every role's grants name its deployment."""

from __future__ import annotations

import pytest

from runtime.config import Settings
from runtime.log.kafka.roles import ROLES, Role, grants, start_checks

pytestmark = pytest.mark.unit

SETTINGS = Settings(
    commands_topic="d.commands",
    events_topic="d.events",
    checkpoints_topic="d.checkpoints",
    payloads_topic="d.payloads",
    keys_topic="d.keys",
    limits_topic="d.limits",
    schedules_topic="d.schedules",
    stream_topic="d.stream",
    exposed_topic="d.exposed",
    worker_group="d.workers",
)
HISTORY = ("d.events", "d.checkpoints", "d.payloads")


def writes(role: str) -> set[str]:
    return {
        g.name for g in grants(role, SETTINGS) if g.resource == "topic" and g.operation in ("WRITE", "ALL")
    }  # type: ignore[arg-type]


def test_only_the_worker_and_the_admin_write_the_history_topics() -> None:
    # a sealed run's key is its submitter's; schedules are a submitter's (`agentlog schedule`, `scheduler`)
    assert writes("submitter") == {"d.commands", "d.keys", "d.schedules"}
    assert writes("sink") == set()
    assert writes("worker") == {
        "d.commands",
        "d.keys",
        "d.limits",
        "d.stream",
        "d.exposed",
        *HISTORY,
    }  # limits: its reports and grants; stream and exposed: what runs do and expose, for watchers
    assert writes("admin") == {"*"}


def test_the_sink_reads_events_payloads_and_keys_with_its_own_groups_only() -> None:
    sink = grants("sink", SETTINGS)
    # keys: the audit store's readers (agentlog audit, the UI) open sealed values with its credentials
    assert {(g.name, g.operation) for g in sink if g.resource == "topic"} == {
        ("d.events", "READ"),
        ("d.payloads", "READ"),
        ("d.keys", "READ"),
    }
    groups = {g.name for g in sink if g.resource == "group" and not g.prefixed}
    assert groups == {
        "agentlog-sink-d.events",
        "agentlog-sink-d.payloads",
        "agentlog-sink-metrics",
        "agentlog-auth-probe",
    }


def test_only_the_worker_joins_the_workers_group() -> None:
    joins = {
        r
        for r in ROLES
        if any(g.name == "d.workers" and g.operation in ("READ", "ALL") for g in grants(r, SETTINGS))
    }  # type: ignore[arg-type]
    assert joins == {"worker"}


def test_an_unknown_role_is_named() -> None:
    with pytest.raises(ValueError, match="unknown role 'auditor'"):
        grants("auditor", SETTINGS)  # type: ignore[arg-type]


def test_the_start_check_of_each_reader_of_contents_covers_reading_the_keys_topic() -> None:
    """What runtime.log.kafka.access.missing asks the cluster about at start: every role that
    opens sealed contents (the sink's readers among them) is checked for READ on the keys topic."""
    readers: tuple[Role, ...] = ("submitter", "worker", "sink")
    for role in readers:
        checked = {(g.name, g.operation) for g in start_checks(role, SETTINGS)}
        assert ("d.keys", "READ") in checked, role
