"""Writing a record whose schema is not registered fails with a message naming
`agentlog schemas register` -- for a client, for the CLI, and for a worker, which stops before the
command is committed (a valid submission is not rejected) and handles it once registration is done.

Real registry, scratch topics whose subjects are not (or not all) registered.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings
from runtime.log.schemas.catalog import DEFAULT_SCHEMA_DIR
from runtime.log.schemas.registry_admin import SchemaAdmin
from runtime.log.schemas.serde import SchemaNotRegistered
from support.services import agentlog
from support.wait import wait_until
from support.workers import WorkerProcess, start_worker

pytestmark = pytest.mark.integration


def test_a_client_submitting_before_registration_is_told_to_register(services: Settings) -> None:
    deployment = scratch_deployment(services, partitions=1, register=False)
    client = Client(deployment)
    with pytest.raises(SchemaNotRegistered) as raised:
        client.submit("short", {"order": "A-1"})
    message = str(raised.value)
    subject = f"{deployment.commands_topic}-dev.agentlog.commands.RunSubmitted"
    assert raised.value.subject == subject and repr(subject) in message
    # The registry's status code stays in its own parenthesis; the subject is left out of the check,
    # as its random prefix can hold the digits (t9c07404e did).
    said = message.split("(registry:", maxsplit=1)[0].replace(subject, "<subject>")
    assert "`agentlog schemas register`" in message and "404" not in said
    client.close()
    done = agentlog(deployment, "submit", "short", "--input", '{"order": "A-1"}')
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("agentlog: the schema of RunSubmitted is not registered")
    assert "agentlog schemas register" in done.stderr and "Traceback" not in done.stderr


def test_a_worker_stops_on_an_unregistered_schema_and_runs_the_submission_after_registration(
    services: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deployment = scratch_deployment(services, partitions=1, register=False)
    partial = tmp_path / "schemas"
    shutil.copytree(DEFAULT_SCHEMA_DIR, partial)
    (partial / "RunStarted.avsc").unlink()  # a deploy whose new RunStarted was never registered
    assert all(r.ok for r in SchemaAdmin(deployment, partial).register())

    first = start_worker(deployment, workers, tmp_path, "w1")
    first.wait_ready(1)
    client = Client(deployment)
    run = client.submit("short", {"order": "A-2"})
    client.flush()
    wait_until(lambda: first.proc.poll() is not None, 60, "the worker to stop", detail=first.log_tail)
    assert first.proc.returncode != 0
    output = first.log_tail(20_000)
    assert "stopping at command 0@0" in output and "RunStarted is not registered" in output
    assert "`agentlog schemas register`" in output
    assert run.status().status == "unknown"  # not rejected: nothing was written for it

    assert all(r.ok for r in SchemaAdmin(deployment).register())  # the operator runs the command
    start_worker(deployment, workers, tmp_path, "w2")
    assert run.result(timeout=60) == "A-2"
    assert run.status().status == "completed"
    client.close()
