"""Mixed code versions on one log, both directions, with real workers (issue 12, item 3).

"v2" is a copy of this checkout's ``runtime/`` and ``schemas/`` in a tmp dir, patched the way a
real schema change ships: ``ToolCallCompleted`` gains an optional field (``note``, default null)
and v2's worker writes it on every tool result. Its schemas are registered beside v1's under
FULL_TRANSITIVE. Then on one deployment:

(a) a v1 worker starts a purchase order, which waits for approval; v1 is stopped; a v2 worker
    replays v1's records, the approval arrives, and v2 finishes the run -- its last tool result
    is written with v2's schema and carries ``note``;
(b) a v2 worker starts a run (its tool results carry ``note``); v2 is stopped (a rollback, or the
    old half of a rolling deploy); a v1 worker replays v2's records with its own reader schema
    and finishes the run.

Which code wrote a record is read from the record itself: the writer schema id in its frame,
and the fields of that writer schema.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader

from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.reader import read_partition
from runtime.log.schemas.frame import HEADER_SIZE, schema_id_of
from runtime.log.schemas.registry import registry_client
from runtime.log.schemas.registry_admin import SchemaAdmin
from support.events import LogReader
from support.po_apps import placed_orders
from support.services import ROOT
from support.wait import wait_for_event
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

REQUEST = {"item": "paper", "quantity": 40}
NOTE_FIELD = {"name": "note", "type": ["null", "string"], "default": None, "doc": "v2: a note on the result."}


def patch(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} is not there exactly once (the v2 patch is stale)"
    path.write_text(text.replace(old, new))


def make_v2(root: Path) -> Path:
    """A copy of this checkout's code whose ToolCallCompleted has an optional ``note`` it writes."""
    ignore = shutil.ignore_patterns("__pycache__")
    # runtime/log/schemas/avsc stays a link, so the copy reads the copy's schemas/ (v2's), not this checkout's.
    shutil.copytree(ROOT / "runtime", root / "runtime", ignore=ignore, symlinks=True)
    shutil.copytree(ROOT / "schemas", root / "schemas", ignore=ignore)
    avsc = root / "schemas" / "ToolCallCompleted.avsc"
    schema = json.loads(avsc.read_text())
    schema["fields"].append(NOTE_FIELD)
    avsc.write_text(json.dumps(schema, indent=2) + "\n")
    patch(
        root / "runtime" / "log" / "records" / "events.py",
        "    result_size: int = 0\n\n\n@record_type\nclass ToolCallFailed",
        "    result_size: int = 0\n    note: str | None = None\n\n\n@record_type\nclass ToolCallFailed",
    )
    patch(
        root / "runtime" / "worker" / "calls.py",
        '    return ToolCallCompleted(\n        run_id="",',
        '    return ToolCallCompleted(\n        note="written by v2",\n        run_id="",',
    )
    return root


def worker(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, version: str, code: Path | None
) -> WorkerProcess:
    started = WorkerProcess(
        deployment,
        "support.po_apps:app_v1",  # the same workflow code: only the runtime and its schemas differ
        f"mixed-{version}-{len(workers)}",
        tmp_path / f"mixed-{version}-{len(workers)}.log",
        code=code,
        TEST_COUNTER_DIR=str(tmp_path),
    )
    workers.append(started)
    return started


def tool_results(deployment: Settings, run_id: str) -> list[tuple[int, dict[str, Any]]]:
    """(writer schema id, values as that writer wrote them) of the run's ToolCallCompleted records,
    decoded with the writer schema itself -- no code version's reader schema in between."""
    client = registry_client(deployment)
    writers: dict[int, tuple[str, Any]] = {}
    out: list[tuple[int, dict[str, Any]]] = []
    with LogReader(deployment) as reader:
        for partition in range(deployment.partitions):
            for record in read_partition(
                deployment,
                deployment.events_topic,
                partition,
                consumer=reader.consumer,
                keep=lambda key: key == run_id.encode(),
            ):
                if not record.value:
                    continue
                schema_id = schema_id_of(record.value)
                if schema_id not in writers:
                    parsed = json.loads(client.get_schema(schema_id).schema_str or "{}")
                    writers[schema_id] = (parsed["name"], parse_schema(parsed))
                name, writer = writers[schema_id]
                if name == "ToolCallCompleted":
                    values = schemaless_reader(io.BytesIO(record.value[HEADER_SIZE:]), writer, None)
                    assert isinstance(values, dict)
                    out.append((schema_id, values))
    return out


def assert_finished_cleanly(client: Client, run_id: str) -> None:
    result = client.run(run_id).result(timeout=60)
    assert result == {
        "order": f"PO-{run_id}",
        "approved_by": "maria",
        "vendor": "acme",
        "budget_ok": True,
        "compliance": None,
    }
    history = client.run(run_id).history()
    kinds = [e["type"] for e in history]
    assert "RunParked" not in kinds and "NonDeterminismDetected" not in kinds, kinds
    tools = [e["tool"] for e in history if e["type"] == "ToolCallScheduled"]
    assert tools == ["lookup_vendor", "check_budget", "place_order"]  # each tool called once
    completed = [e["position"] for e in history if e["type"] == "ToolCallCompleted"]
    assert len(completed) == len(set(completed)) == 3, completed
    assert client.run(run_id).status().status == "completed"


def test_v1_and_v2_workers_take_over_each_others_runs(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    v2_code = make_v2(tmp_path / "v2")
    reports = {r.subject: r for r in SchemaAdmin(deployment, schema_dir=v2_code / "schemas").register()}
    assert all(r.ok for r in reports.values()), reports
    changed = {s: r for s, r in reports.items() if r.status != "unchanged"}
    subject = f"{deployment.events_topic}-dev.agentlog.events.ToolCallCompleted"
    assert list(changed) == [subject] and changed[subject].status == "registered", changed
    v2_id = int(changed[subject].detail[0].removeprefix("id "))
    v1_id = registry_client(deployment).get_version(subject, 1).schema_id
    assert v1_id != v2_id

    client = Client(deployment)
    # (a) v1 starts M-1, which waits for approval; v1 goes away.
    v1 = worker(deployment, workers, tmp_path, "v1", None)
    client.submit("purchase_order", REQUEST, run_id="M-1")
    client.flush()
    wait_for_event(client, "M-1", "ToolCallCompleted", count=2, timeout=60)
    v1.stop()

    # v2 takes over (replaying M-1's v1 records) and starts M-2, which waits too.
    v2 = worker(deployment, workers, tmp_path, "v2", v2_code)
    client.run("M-1").signal("approve", {"by": "maria"})
    assert_finished_cleanly(client, "M-1")
    client.submit("purchase_order", REQUEST, run_id="M-2")
    client.flush()
    wait_for_event(client, "M-2", "ToolCallCompleted", count=2, timeout=60)
    v2.stop()

    # (b) v1 again (the rollback): it replays M-2's v2 records with its own reader schema.
    worker(deployment, workers, tmp_path, "v1", None)
    client.run("M-2").signal("approve", {"by": "maria"})
    assert_finished_cleanly(client, "M-2")
    client.close()

    assert [row[0] for row in placed_orders(tmp_path / "orders.sqlite")] == ["M-1", "M-2"]  # once each

    # Who wrote what, from the records themselves.
    m1 = tool_results(deployment, "M-1")
    assert [schema_id for schema_id, _ in m1] == [v1_id, v1_id, v2_id]
    assert ["note" in values for _, values in m1] == [False, False, True]
    assert m1[2][1]["note"] == "written by v2"
    m2 = tool_results(deployment, "M-2")
    assert [schema_id for schema_id, _ in m2] == [v2_id, v2_id, v1_id]
    assert [values.get("note") for _, values in m2] == ["written by v2", "written by v2", None]
    assert "note" not in m2[2][1]

    # schema_version is what the frame says, whoever reads it: the registry's version of the
    # writer schema under its subject (v1's ToolCallCompleted is version 1, v2's version 2).
    with Client(deployment) as reader:
        for run_id, expected in (("M-1", [1, 1, 2]), ("M-2", [2, 2, 1])):
            history = reader.run(run_id).history()
            versions = [e["schema_version"] for e in history if e["type"] == "ToolCallCompleted"]
            assert versions == expected, (run_id, versions)
            assert {e["schema_version"] for e in history if e["type"] != "ToolCallCompleted"} == {1}


OLD_ENVELOPE_FIELD = {
    "name": "schema_version",
    "type": "int",
    "default": 1,
    "doc": "Version of this record's schema the writer used.",
}


def test_the_envelope_without_schema_version_registers_over_the_old_one(
    services: Settings, tmp_path: Path
) -> None:
    """Schemas registered before schema_version left the Avro value (it was the constant 1, now
    the decoder fills it from the frame): this code's schemas are accepted over them under
    FULL_TRANSITIVE, one new version per subject -- the upgrade a running deployment makes."""
    deployment = scratch_deployment(services, partitions=1, register=False)
    old = tmp_path / "old-schemas"
    shutil.copytree(ROOT / "schemas", old, ignore=shutil.ignore_patterns("__pycache__"))
    for path in old.glob("*.avsc"):
        schema = json.loads(path.read_text())
        schema["fields"].insert(1, OLD_ENVELOPE_FIELD)
        path.write_text(json.dumps(schema, indent=2))
    assert {r.status for r in SchemaAdmin(deployment, schema_dir=old).register()} == {"registered"}
    reports = SchemaAdmin(deployment).register()
    assert {r.status for r in reports} == {"registered"}, [r for r in reports if r.status != "registered"]
    client = registry_client(deployment)
    assert {tuple(client.get_versions(r.subject)) for r in reports} == {(1, 2)}
