"""A sealed submission whose data key reaches Kafka after it, against the real Kafka and registry and a
real worker subprocess: the worker holds the command and fetches the key off its event loop, so a run
beside it in the same partition keeps stepping (on the log) and the signal sent behind it waits its
turn; once the key is written the run starts with its input opened. A submission whose key never
comes ends as RunRejected naming the run and the key, and the partition goes on. The real
`agentlog erase --subject` refuses while a run of the subject has not ended, naming it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.backend import KafkaLog
from runtime.log.port.partitioning import name_in_partition
from runtime.log.schemas.serde import Serde
from support.late_keys import LateKeySubmission
from support.services import agentlog, make_deployment
from support.wait import wait_until
from support.workers import WorkerProcess

pytestmark = pytest.mark.integration

PARTITION = 1  # the held submission, the run beside it and the one after it all live here


@pytest.fixture(scope="module")
def sealed(
    services: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, WorkerProcess]]:
    settings = make_deployment(services, partitions=2).model_copy(update={"seal_contents": True})
    worker = WorkerProcess(
        settings, "support.erasure_apps:app", "w1", tmp_path_factory.mktemp("key-arrival") / "worker.log"
    )
    try:
        worker.wait_ready(2)
        yield settings, worker
    finally:
        worker.stop()


def held(worker: WorkerProcess, run_id: str) -> bool:
    text = worker.log_path.read_text(errors="replace")
    return '"event": "submission_key_awaited"' in text and f'"run": "{run_id}"' in text


def steps(client: Client, run_id: str) -> int:
    return sum(e["type"] == "ToolCallCompleted" for e in client.history(run_id))


def test_a_submission_written_before_its_key_starts_once_the_key_arrives_while_its_neighbour_steps(
    sealed: tuple[Settings, WorkerProcess],
) -> None:
    settings, worker = sealed
    log = KafkaLog(settings)
    with Client(settings) as client:
        ticking = client.submit("ticks", {"count": 120}, run_id=name_in_partition("ticking", PARTITION, 2))
        client.flush()
        wait_until(
            lambda: steps(client, ticking) >= 1, 30, "the ticking run's first step", process=worker.proc
        )
        late_id = name_in_partition("late", PARTITION, 2)
        late = LateKeySubmission(
            settings, Serde(settings), late_id, "intake", {"note": "hello", "wait": True}
        )
        assert late.partition == PARTITION
        log.append(settings.commands_topic, PARTITION, late_id.encode(), late.command).result(30)
        wait_until(
            lambda: held(worker, late_id), 30, "the worker holding the submission", process=worker.proc
        )
        # The same run's signal, behind the held submission in the partition: applied after it.
        log.append(settings.commands_topic, PARTITION, late_id.encode(), late.signal("go", None)).result(30)
        before = steps(client, ticking)
        wait_until(
            lambda: steps(client, ticking) >= before + 3, 30, "the ticking run stepping", process=worker.proc
        )
        assert client.history(late_id) == []  # still held: nothing of it in the log, its key unwritten
        log.append(settings.keys_topic, late.partition, late_id.encode(), late.key).result(30)
        assert client.result(late_id, timeout=60)["filed"] == "hello"
        started = next(e for e in client.history(late_id) if e["type"] == "RunStarted")
        assert started["input"] == '{"note":"hello","wait":true}'
        assert client.result(ticking, timeout=60) == 120
    log.close()


def test_a_submission_whose_key_never_comes_is_rejected_naming_it_and_the_partition_goes_on(
    sealed: tuple[Settings, WorkerProcess],
) -> None:
    settings, worker = sealed
    log = KafkaLog(settings)
    lost_id = name_in_partition("lost-key", PARTITION, 2)
    lost = LateKeySubmission(settings, Serde(settings), lost_id, "intake", {"note": "lost"})
    log.append(settings.commands_topic, PARTITION, lost_id.encode(), lost.command).result(30)
    with Client(settings) as client:
        after = client.submit("intake", {"note": "after"}, run_id=name_in_partition("after", PARTITION, 2))
        assert client.result(after, timeout=90)["filed"] == "after"  # behind the held one, ~10 s later
        status = client.status(lost_id)
        assert status.status == "rejected", worker.log_tail()
        (rejected,) = client.history(lost_id)
        assert rejected["type"] == "RunRejected"
        assert rejected["reason"].startswith(
            f"run {lost_id}: its data key '{lost_id}' is not in the keys topic '{settings.keys_topic}' 10 s after"
        )
    log.close()


def test_erasing_a_subject_refuses_while_one_of_its_runs_goes_on_naming_it(
    sealed: tuple[Settings, WorkerProcess],
) -> None:
    settings, worker = sealed
    with Client(settings) as client:
        ended = client.submit("intake", {"note": "first"}, subject="customer-31")
        assert client.result(ended, timeout=60)["filed"] == "first"
        waiting = client.submit("intake", {"note": "second", "wait": True}, subject="customer-31")
        wait_until(
            lambda: client.status(waiting).status == "running", 30, "the waiting run", process=worker.proc
        )
        refused = agentlog(settings, "erase", "--subject", "customer-31")
        assert refused.returncode != 0
        assert refused.stderr.startswith(
            f"agentlog: data subject 'customer-31' has runs that have not ended: {waiting} (running); "
        ), refused.stderr
        assert client.status(ended).result != "erased"  # nothing destroyed
        client.signal(waiting, "go", None)
        assert client.result(waiting, timeout=60)["filed"] == "second"
    done = agentlog(settings, "erase", "--subject", "customer-31")
    assert done.returncode == 0, done.stderr
    with Client(settings) as client:
        assert client.status(ended).result == "erased"
        assert client.status(waiting).result == "erased"
