"""Any producer can submit (docs/producers.md): a Go client built from clients/go, a producer
with librdkafka's default partitioner, and a keyless one -- against the real Kafka and registry."""

from __future__ import annotations

import json
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest
from confluent_kafka import Producer

from runtime.client import Client, RunError
from runtime.config import Settings
from runtime.log.port.partitioning import partition_for
from runtime.log.records.events import RunSubmitted
from runtime.log.schemas.serde import Serde
from runtime.worker.commands import keyless_run_id
from support.services import ROOT, deployment_env
from support.workers import WorkerProcess, start_worker

# A cold Go cache compiles franz-go first (minutes on two busy cores): the module fixture gets the
# time its `go test` and `go build` are given, not the suite's 180 s per test.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

GO_CLIENT = ROOT / "clients" / "go"


@pytest.fixture(scope="module")
def go_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go client, built from clients/go (modules from the Go module proxy, then Go's cache),
    after its own unit test (murmur2 agrees with Kafka's) passes."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    tested = subprocess.run(
        [go, "test", "./..."], cwd=GO_CLIENT, capture_output=True, text=True, timeout=600, check=False
    )
    assert tested.returncode == 0, f"go test failed:\n{tested.stdout}\n{tested.stderr}"
    binary = tmp_path_factory.mktemp("go") / "agentlog-submit"
    built = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=GO_CLIENT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, f"go build failed:\n{built.stdout}\n{built.stderr}"
    return binary


def run_go(binary: Path, settings: Settings, *args: str) -> tuple[int, list[dict[str, object]], str]:
    done = subprocess.run(
        [str(binary), *args],
        env=deployment_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, lines, done.stderr


def test_a_go_client_submits_a_run_and_reads_its_result(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, go_client: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    code, lines, stderr = run_go(
        go_client, deployment, "-workflow", "short", "-input", '{"order": "go-48211"}', "-timeout", "60s"
    )
    assert code == 0, (lines, stderr, workers[0].log_tail())
    submitted, outcome = lines
    run_id = str(submitted["submitted"])
    assert (
        submitted["partition"] == submitted["home_partition"] == partition_for(run_id, deployment.partitions)
    )
    assert outcome == {
        "run_id": run_id,
        "status": "completed",
        "event": "RunCompleted",
        "result": "go-48211",
        "events_read": outcome["events_read"],
    }
    # The Python side reads the same run: it is an ordinary agentlog run.
    client = Client(deployment)
    status = client.run(run_id).status()
    assert status.status == "completed" and status.result == "go-48211"
    client.close()


def test_a_go_submission_on_the_wrong_partition_is_forwarded_and_completes_once(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path, go_client: Path
) -> None:
    worker = start_worker(deployment, workers, tmp_path)
    run_id = "go-misrouted-1"
    home = partition_for(run_id, deployment.partitions)
    wrong = (home + 1) % deployment.partitions
    code, lines, stderr = run_go(
        go_client,
        deployment,
        "-workflow",
        "short",
        "-input",
        '{"order": "wrong-partition"}',
        "-run-id",
        run_id,
        "-partition",
        str(wrong),
    )
    assert code == 0, (lines, stderr, worker.log_tail())
    assert lines[0]["partition"] == wrong and lines[0]["home_partition"] == home
    assert lines[1]["status"] == "completed" and lines[1]["result"] == "wrong-partition"
    client = Client(deployment)
    assert [e["type"] for e in client.run(run_id).history()].count("RunStarted") == 1
    client.close()
    forwarded = [
        json.loads(line[line.index("{") :])
        for line in worker.log_path.read_text().splitlines()
        if "command_forwarded" in line
    ]
    assert [f["run"] for f in forwarded] == [run_id]
    assert "murmur2" in str(forwarded[0]["why"]) and "consistent_random" in str(forwarded[0]["why"])


def test_librdkafka_default_partitioner_and_keyless_submissions_are_never_silently_lost(
    deployment: Settings, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    start_worker(deployment, workers, tmp_path)
    serde = Serde(deployment)

    def value(order: str) -> bytes:
        return serde.encode(RunSubmitted(run_id="", workflow="short", input=json.dumps({"order": order})))

    # librdkafka's default partitioner (consistent_random: CRC32) disagrees with murmur2 for most keys.
    producer = Producer({"bootstrap.servers": deployment.bootstrap_servers})
    runs = [f"crc32-run-{i}" for i in range(12)]
    misrouted = [
        r
        for r in runs
        if zlib.crc32(r.encode()) % deployment.partitions != partition_for(r, deployment.partitions)
    ]
    assert len(misrouted) >= 4, "the test needs submissions that land on the wrong partition"
    for run_id in runs:
        producer.produce(deployment.commands_topic, key=run_id.encode(), value=value(run_id))
    delivered: list[tuple[int, int]] = []
    producer.produce(
        deployment.commands_topic,
        key=None,
        value=value("no key"),
        on_delivery=lambda err, msg: delivered.append((msg.partition(), msg.offset())),
    )
    assert producer.flush(10) == 0 and len(delivered) == 1
    client = Client(deployment)
    for run_id in runs:
        assert client.run(run_id).result(timeout=60) == run_id
    partition, offset = delivered[0]
    with pytest.raises(RunError) as rejected:
        client.run(keyless_run_id(partition, offset, deployment.partitions)).result(timeout=30)
    assert rejected.value.status == "rejected" and "has no key" in rejected.value.reason
    client.close()
