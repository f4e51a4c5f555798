"""Upgrades with runs in flight, with real workers (issue 12; seed 003's P-204 story).

A v1 worker drafts a purchase order and the run waits for approval; the v1 worker is stopped;
a v2 worker (reworded prompt, prompt_version v2, a compliance check behind a patch marker) takes
over; the approval arrives; the run finishes on the path it started on, the order is placed
once, and its status shows the drift. A new run on v2 takes the new path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.client import Client
from runtime.config import Settings
from support.po_apps import placed_orders
from support.services import agentlog
from support.sink import SinkProcess, kafka_offsets, scalar, wait_for_rows
from support.wait import wait_for_event, wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

REQUEST = {"item": "paper", "quantity": 40}


def po_worker(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, version: str
) -> WorkerProcess:
    worker = WorkerProcess(
        deployment,
        f"support.po_apps:app_{version}",
        f"po-{version}",
        tmp_path / f"po-{version}-{len(workers)}.log",
        TEST_COUNTER_DIR=str(tmp_path),
    )
    workers.append(worker)
    return worker


def waiting_run(client: Client, run_id: str) -> None:
    """Submit a purchase order and wait until it waits for approval (its two tool calls done)."""
    client.submit("purchase_order", REQUEST, run_id=run_id)
    client.flush()
    wait_for_event(client, run_id, "ToolCallCompleted", count=2)


def types(client: Client, run_id: str) -> list[str]:
    return [e["type"] for e in client.run(run_id).history()]


def test_p204_finishes_on_the_old_path_after_a_prompt_and_patch_deploy(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    client = Client(deployment)
    v1 = po_worker(deployment, workers, tmp_path, "v1")
    waiting_run(client, "P-204")
    v1.stop()  # Monday's code is undeployed while the run waits

    po_worker(deployment, workers, tmp_path, "v2")  # Wednesday's deploy
    client.run("P-204").signal("approve", {"by": "maria"})  # Friday
    result = client.run("P-204").result(timeout=60)
    assert result["order"] == "PO-P-204" and result["compliance"] is None  # the old path

    history = client.run("P-204").history()
    kinds = [e["type"] for e in history]
    tools = [e["tool"] for e in history if e["type"] == "ToolCallScheduled"]
    assert tools == ["lookup_vendor", "check_budget", "place_order"]  # no compliance check
    assert "PatchRecorded" not in kinds and "NonDeterminismDetected" not in kinds
    drifted = [e for e in history if e["type"] == "PromptDrifted"]
    assert len(drifted) == 1 and drifted[0]["position"] == 1
    assert (drifted[0]["recorded_prompt_version"], drifted[0]["issued_prompt_version"]) == ("v1", "v2")
    assert kinds.count("ModelCallScheduled") == 1  # the recorded draft was served, not re-asked
    assert [row[0] for row in placed_orders(tmp_path / "orders.sqlite")] == ["P-204"]  # placed once

    status = client.run("P-204").status()
    assert status.status == "completed"
    assert [(d.position, d.recorded_prompt_version, d.issued_prompt_version) for d in status.drift] == [
        (1, "v1", "v2")
    ]
    shown = agentlog(deployment, "status", "P-204")
    assert shown.returncode == 0, shown.stderr
    assert "drift     position 1 decided under prompt v1; code now issues v2" in shown.stdout
    print(shown.stdout)

    # A new run on v2 takes the new path.
    waiting_run(client, "P-205")
    client.run("P-205").signal("approve", {"by": "maria"})
    fresh = client.run("P-205").result(timeout=60)
    assert fresh["compliance"] == {"vendor": "acme", "item": "paper", "compliant": True}
    history = client.run("P-205").history()
    assert [e["patch_id"] for e in history if e["type"] == "PatchRecorded"] == ["compliance-check"]
    assert [e["tool"] for e in history if e["type"] == "ToolCallScheduled"] == [
        "lookup_vendor",
        "check_budget",
        "compliance_check",
        "place_order",
    ]
    assert "PromptDrifted" not in types(client, "P-205")
    assert client.run("P-205").status().drift == ()
    assert [row[0] for row in placed_orders(tmp_path / "orders.sqlite")] == ["P-204", "P-205"]
    client.close()


def test_upgrade_check_tells_a_safe_change_a_prompt_change_and_a_reordering_apart(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    client = Client(deployment)
    po_worker(deployment, workers, tmp_path, "v1")
    waiting_run(client, "P-300")
    client.submit("purchase_order", REQUEST, run_id="P-299")  # a finished run is not in flight
    client.flush()
    wait_for_event(client, "P-299", "ToolCallCompleted", count=2)
    client.run("P-299").signal("approve", {"by": "maria"})
    client.run("P-299").result(timeout=60)

    safe = agentlog(deployment, "upgrade", "check", "--app", "support.po_apps:app_safe")
    print(safe.stdout)
    assert safe.returncode == 0, safe.stdout + safe.stderr
    assert "P-300  purchase_order  ok" in safe.stdout and "P-299" not in safe.stdout
    assert "patches still needed: none" in safe.stdout

    prompt = agentlog(deployment, "upgrade", "check", "--app", "support.po_apps:app_v2")
    print(prompt.stdout)
    assert prompt.returncode == 0, prompt.stdout + prompt.stderr
    assert "P-300  purchase_order  drift at 1: v1 -> v2" in prompt.stdout
    assert "patches still needed: compliance-check (old branch kept by P-300)" in prompt.stdout

    reordered = agentlog(deployment, "upgrade", "check", "--app", "support.po_apps:app_reordered")
    print(reordered.stdout)
    assert reordered.returncode == 1, reordered.stdout + reordered.stderr
    assert (
        "P-300  purchase_order  would park at position 2: history holds tool 'lookup_vendor'"
        in reordered.stdout
    )
    assert "code issues tool 'check_budget'" in reordered.stdout

    as_json = json.loads(
        agentlog(deployment, "upgrade", "check", "--app", "support.po_apps:app_v2", "--json").stdout
    )
    assert as_json["ok"] is True
    assert [(r["run_id"], r["verdict"]) for r in as_json["runs"]] == [("P-300", "drift")]
    assert as_json["patches_still_needed"] == {"compliance-check": ["P-300"]}

    # The run itself is untouched by the checks: still waiting, nothing written for it.
    assert client.run("P-300").status().status == "running"
    assert "PromptDrifted" not in types(client, "P-300")
    client.close()


def test_upgrade_check_from_the_store_gives_the_verdict_of_the_full_scan(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """Issue 12 item 2(b): ``--from-store`` takes the in-flight runs from the analytics store (the
    ``agentlog.in_flight_runs`` provider, through the running sink's proxy) and reads only theirs."""
    client = Client(deployment)
    po_worker(deployment, workers, tmp_path, "v1")
    waiting_run(client, "P-310")
    client.submit("purchase_order", REQUEST, run_id="P-309")  # a finished run is not in flight
    client.flush()
    wait_for_event(client, "P-309", "ToolCallCompleted", count=2)
    client.run("P-309").signal("approve", {"by": "maria"})
    client.run("P-309").result(timeout=60)

    dsn = f"chdb://{tmp_path / 'store'}"
    sink = SinkProcess(deployment, dsn, tmp_path / "sink.log")
    try:
        records = sum(len(offsets) for offsets in kafka_offsets(deployment).values())
        wait_for_rows(dsn, deployment.events_topic, records, proc=sink.proc)
        wait_until(
            lambda: scalar(dsn, "SELECT count() FROM agentlog.runs WHERE status = 'running'") == 1,
            30,
            "P-310 running in the store",
            process=sink.proc,
        )
        args = ("upgrade", "check", "--app", "support.po_apps:app_v2", "--json")
        scanned = agentlog(deployment, *args)
        stored = agentlog(deployment, *args, "--from-store", AGENTLOG_CLICKHOUSE_DSN=dsn)
        assert scanned.returncode == stored.returncode == 0, scanned.stderr + stored.stderr
        assert json.loads(stored.stdout) == json.loads(scanned.stdout)
        assert [(r["run_id"], r["verdict"]) for r in json.loads(stored.stdout)["runs"]] == [
            ("P-310", "drift")
        ]

        reordered = agentlog(
            deployment,
            "upgrade",
            "check",
            "--app",
            "support.po_apps:app_reordered",
            "--from-store",
            AGENTLOG_CLICKHOUSE_DSN=dsn,
        )
        assert reordered.returncode == 1, reordered.stdout + reordered.stderr
        assert "P-310  purchase_order  would park at position 2" in reordered.stdout
    finally:
        sink.stop()

    unreachable = agentlog(
        deployment,
        "upgrade",
        "check",
        "--app",
        "support.po_apps:app_v2",
        "--from-store",
        AGENTLOG_CLICKHOUSE_DSN="http://127.0.0.1:9",
    )
    assert unreachable.returncode != 0 and unreachable.stdout == ""
    # One agentlog line (clickhouse-connect may log its own line before it, as for `agentlog audit`).
    said = [line for line in unreachable.stderr.splitlines() if line.startswith("agentlog:")]
    assert len(said) == 1 and "--from-store: cannot open the analytics store http://127.0.0.1:9" in said[0]
    assert client.run("P-310").status().status == "running"
    client.close()
