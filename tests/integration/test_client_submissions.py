"""A client's commands on real Kafka and the real registry: submissions go through a producer of
their own (at least once, no ProducerId to wait for), signals through the idempotent one, and a
signal never lands ahead of the submission sent before it. A fresh process's first submission
resolves its schema id with one plain lookup, without importing the registry client."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from infra.deployment import environment
from runtime.client import Client, new_run_id
from runtime.config import Settings
from runtime.log.records.events import RunSubmitted, SignalSent
from support.services import ROOT

pytestmark = pytest.mark.integration


def _commands(client: Client, run_id: str) -> list[str]:
    """The types of ``run_id``'s records in its commands partition, in log order."""
    settings = client.settings
    key = run_id.encode()
    return [
        type(client.serde.decode(record.value or b"", record.key)).__name__
        for record in client.log.read(
            settings.commands_topic, client.run(run_id).partition, keep=lambda k: k == key
        )
    ]


def test_a_signal_sent_right_after_its_runs_submission_lands_after_it(deployment: Settings) -> None:
    with Client(deployment) as client:
        client.run(new_run_id()).signal("warm", {})  # both producers connected: no head start for either
        runs = [new_run_id() for _ in range(20)]
        for run_id in runs:
            client.submit("sleepy", {"sleep": 0}, run_id=run_id)
            client.run(run_id).signal("go", {"n": 1})
        for run_id in runs:
            assert _commands(client, run_id) == [RunSubmitted.__name__, SignalSent.__name__]


_FRESH_PROCESS = """
import json, sys
from runtime.client import Client
client = Client()
run_id = client.submit("sleepy", {"sleep": 0}).run_id
client.flush()
print(json.dumps({"run_id": run_id, "registry_client_imported": "runtime.log.schemas.registry_client" in sys.modules,
                  "submissions_idempotent": client._writer._submissions.idempotent}))
client.close()
"""


def test_a_fresh_processs_first_submission_lands_without_the_registry_client_or_idempotence(
    deployment: Settings,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS],
        check=False,
        cwd=ROOT,
        env=environment(deployment, str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["registry_client_imported"] is False
    assert answer["submissions_idempotent"] is False
    with Client(deployment) as client:
        assert _commands(client, answer["run_id"]) == [RunSubmitted.__name__]
