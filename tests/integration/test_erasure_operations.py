"""A sealed submission whose data key reaches Kafka after it, against the real Kafka and registry and a
real worker subprocess: the worker holds the command and fetches the key off its event loop, so a run
beside it in the same partition keeps stepping (on the log) and the signal sent behind it waits its
turn; once the key is written the run starts with its input opened. A submission whose key never
comes ends as RunRejected naming the run and the key, and the partition goes on. The real
`agentlog erase --subject` refuses while a run of the subject has not ended, naming it. A client that
signals a run it did not submit seals the payload under the run's subject key (and makes no key of the
run's id); a signal for a run never submitted is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime.client import Client, new_run_id
from runtime.config import Settings
from runtime.errors import AgentlogError
from runtime.log.kafka.backend import KafkaLog
from runtime.log.port.partitioning import name_in_partition, partition_for
from runtime.log.records.events import SignalReceived, SignalSent
from runtime.log.records.sealed_form import ERASED, key_id_of, subject_key_id
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
    return sum(e["type"] == "ToolCallCompleted" for e in client.run(run_id).history())


def test_a_submission_written_before_its_key_starts_once_the_key_arrives_while_its_neighbour_steps(
    sealed: tuple[Settings, WorkerProcess],
) -> None:
    settings, worker = sealed
    log = KafkaLog(settings)
    with Client(settings) as client:
        ticking = client.submit("ticks", {"count": 120}, run_id=name_in_partition("ticking", PARTITION, 2)).run_id
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
        assert client.run(late_id).history() == []  # still held: nothing of it in the log, its key unwritten
        log.append(settings.keys_topic, late.partition, late_id.encode(), late.key).result(30)
        assert client.run(late_id).result(timeout=60)["filed"] == "hello"
        started = next(e for e in client.run(late_id).history() if e["type"] == "RunStarted")
        assert started["input"] == '{"note":"hello","wait":true}'
        assert client.run(ticking).result(timeout=60) == 120
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
        after = client.submit("intake", {"note": "after"}, run_id=name_in_partition("after", PARTITION, 2)).run_id
        assert client.run(after).result(timeout=90)["filed"] == "after"  # behind the held one, ~10 s later
        status = client.run(lost_id).status()
        assert status.status == "rejected", worker.log_tail()
        (rejected,) = client.run(lost_id).history()
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
        ended = client.submit("intake", {"note": "first"}, subject="customer-31").run_id
        assert client.run(ended).result(timeout=60)["filed"] == "first"
        waiting = client.submit("intake", {"note": "second", "wait": True}, subject="customer-31").run_id
        wait_until(
            lambda: client.run(waiting).status().status == "running", 30, "the waiting run", process=worker.proc
        )
        refused = agentlog(settings, "erase", "--subject", "customer-31")
        assert refused.returncode != 0
        assert refused.stderr.startswith(
            f"agentlog: data subject 'customer-31' has runs that have not ended: {waiting} (running); "
        ), refused.stderr
        assert client.run(ended).status().result != "erased"  # nothing destroyed
        client.run(waiting).signal("go", None)
        assert client.run(waiting).result(timeout=60)["filed"] == "second"
    done = agentlog(settings, "erase", "--subject", "customer-31")
    assert done.returncode == 0, done.stderr
    with Client(settings) as client:
        assert client.run(ended).status().result == "erased"
        assert client.run(waiting).status().result == "erased"


def signal_sent(settings: Settings, run_id: str) -> bytes:
    """The run's SignalSent record as the commands topic holds it."""
    plain = Serde(settings.model_copy(update={"seal_contents": False}))
    log = KafkaLog(settings)
    try:
        key = run_id.encode()
        for record in log.read(
            settings.commands_topic, partition_for(run_id, settings.partitions), keep=lambda k: k == key
        ):
            if isinstance(plain.decode(record.value or b""), SignalSent):
                return record.value or b""
    finally:
        log.close()
    raise AssertionError(f"no SignalSent of run {run_id}")


def keys_named(settings: Settings, key_id: str) -> int:
    log = KafkaLog(settings)
    try:
        return sum(
            1
            for record in log.read(settings.keys_topic, partition_for(key_id, settings.partitions))
            if record.key == key_id.encode()
        )
    finally:
        log.close()


@pytest.mark.parametrize("started", [True, False], ids=["running", "submitted"])
def test_a_signal_from_another_client_is_sealed_under_the_run_s_subject_key(
    sealed: tuple[Settings, WorkerProcess], started: bool
) -> None:
    # The client that signals did not submit the run: it must seal the payload under the key the
    # run's contents are under (the subject's), never make a key of the run's id -- one that
    # `erase --subject` would leave behind, the payload readable.
    settings, worker = sealed
    subject = f"customer-{'77' if started else '78'}"
    with Client(settings) as submitter:
        waiting = submitter.submit("intake", {"note": "third", "wait": True}, subject=subject)
        submitter.flush()
        if started:
            wait_until(
                lambda: waiting.status().status == "running", 30, "the run", process=worker.proc
            )
        with Client(settings) as other:
            other.run(waiting.run_id).signal("go", {"said": "MARKER-signal-5e7a"})
        assert waiting.result(timeout=60)["filed"] == "third"
    sent = signal_sent(settings, waiting.run_id)
    plain = Serde(settings.model_copy(update={"seal_contents": False}))
    assert key_id_of(plain.decode(sent).payload) == subject_key_id(subject)
    assert keys_named(settings, waiting.run_id) == 0, "the signalling client made a key of the run's id"
    assert agentlog(settings, "erase", "--subject", subject).returncode == 0
    with Client(settings) as reader:  # the payload, as sent and as received, goes with the subject's key
        assert reader.serde.decode(sent).payload == ERASED
        [signal] = [e for e in reader.run(waiting.run_id).events() if isinstance(e.event, SignalReceived)]
        assert signal.event.payload == ERASED


def test_a_signal_for_a_run_never_submitted_is_refused_naming_it(
    sealed: tuple[Settings, WorkerProcess],
) -> None:
    settings, _ = sealed
    nobody = f"nobody-{new_run_id()}"
    with (
        Client(settings) as client,
        pytest.raises(AgentlogError, match=rf"run {nobody}: no submission of it"),
    ):
        client.run(nobody).signal("go", None)
    assert keys_named(settings, nobody) == 0
