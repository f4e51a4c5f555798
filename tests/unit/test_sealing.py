"""Crypto-shredding on the in-memory log: contents sealed at the serde, opened for readers, and
read as "erased" once the run's key is destroyed -- structure, hashes, tokens kept."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import threading
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr

from runtime.client import Client
from runtime.config import Settings
from runtime.erasure import ErasureRefused, erase_run, erase_subject
from runtime.log.port.memory import MemoryLog
from runtime.log.port.protocol import LogRecord
from runtime.log.records.chain import chain_key_of, first_break, link_of
from runtime.log.records.events import ModelCallScheduled, RunSubmitted, ToolCallCompleted, ToolCallScheduled
from runtime.log.records.sealed_form import ERASED
from runtime.log.schemas.serde import Serde
from runtime.log.sealing.keys import KeyStore
from runtime.log.sealing.sealer import Sealer, SealError
from runtime.worker.loop import Worker
from support.erasure_apps import COMPLETION_TOKENS, PROMPT_TOKENS, app
from support.wait import wait_until

pytestmark = pytest.mark.unit

MARKER = "MARKER-unit-7f3a"


class Local:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.log = MemoryLog(settings)
        self.serde = Serde.offline(settings)
        self.worker = Worker(
            app, settings, log=self.log, serde=self.serde, worker_id="w", checkpoint_interval_s=3600
        )
        self.thread = threading.Thread(target=lambda: asyncio.run(self.worker.serve()), daemon=True)
        self.thread.start()
        self.client = Client(settings, identity="t", log=self.log, serde=self.serde)

    def raw(self, *topics: str) -> bytes:
        return b"".join(
            r.value or b""
            for t in topics
            for p in range(self.settings.partitions)
            for r in self.log.read(t, p)
        )

    def close(self) -> None:
        self.client.close()
        self.worker.stop()
        self.thread.join(timeout=10)


@pytest.fixture
def local() -> Iterator[Local]:
    deployment = Local(Settings(partitions=2, seal_contents=True))
    yield deployment
    deployment.close()


def content_topics(s: Settings) -> tuple[str, ...]:
    return (s.commands_topic, s.events_topic, s.payloads_topic)


def test_contents_are_sealed_in_the_log_and_open_for_readers(local: Local) -> None:
    run = local.client.submit("intake", {"note": MARKER + " " + "z" * 40_000})  # a result out of line
    result = run.result(timeout=20)
    assert result["filed"].startswith(MARKER)
    assert MARKER.encode() not in local.raw(*content_topics(local.settings))
    assert b"sealed:v1:" in local.raw(local.settings.payloads_topic)
    history = run.history(payloads=True)
    assert MARKER in json.dumps(history)


def test_an_erased_run_reads_erased_and_keeps_its_structure(local: Local) -> None:
    run_id = local.client.submit("intake", {"note": MARKER + " " + "z" * 40_000}).run_id
    local.client.run(run_id).result(timeout=20)
    before = local.client.run(run_id).history(payloads=True)
    assert erase_run(local.client, run_id) == run_id
    fresh = Client(local.settings, identity="reader", log=local.log, serde=Serde.offline(local.settings))
    for reader in (local.client, fresh):
        after = reader.run(run_id).history(payloads=True)
        assert MARKER not in json.dumps(after)
        assert [e["type"] for e in after] == [e["type"] for e in before]
        assert [e.get("args_hash") for e in after] == [e.get("args_hash") for e in before]
        completed = next(e for e in after if e["type"] == "ModelCallCompleted")
        assert (completed["input_tokens"], completed["output_tokens"]) == (PROMPT_TOKENS, COMPLETION_TOKENS)
        assert completed["result"] == ERASED
        assert reader.run(run_id).status().result == "erased"
        assert MARKER not in str(reader.run(run_id).prompts()[1].messages)
    fresh.close()


def test_a_running_run_refuses_erasure(local: Local) -> None:
    run_id = local.client.submit("intake", {"note": MARKER, "wait": True}).run_id
    deadline = 200
    while local.client.run(run_id).status().status != "running" and deadline:
        deadline -= 1
        threading.Event().wait(0.05)
    with pytest.raises(ErasureRefused, match=f"run {run_id} is running"):
        erase_run(local.client, run_id)
    local.client.run(run_id).signal("go", None)
    assert local.client.run(run_id).result(timeout=20)["filed"] == MARKER


def test_a_subject_key_erases_every_run_submitted_with_it(local: Local) -> None:
    runs = [local.client.submit("intake", {"note": f"{MARKER}-{i}"}, subject="customer-42").run_id for i in range(2)]
    other = local.client.submit("intake", {"note": f"{MARKER}-other"}).run_id
    for run_id in (*runs, other):
        local.client.run(run_id).result(timeout=20)
    erase_subject(local.client, "customer-42")
    fresh = Client(local.settings, identity="reader", log=local.log, serde=Serde.offline(local.settings))
    for run_id in runs:
        assert MARKER not in json.dumps(fresh.run(run_id).history())
    assert f"{MARKER}-other" in json.dumps(fresh.run(other).history())
    fresh.close()


def test_a_deployment_that_does_not_seal_refuses_erasure() -> None:
    deployment = Local(Settings(partitions=1))
    try:
        run_id = deployment.client.submit("intake", {"note": MARKER}).run_id
        deployment.client.run(run_id).result(timeout=20)
        assert MARKER.encode() in deployment.raw(deployment.settings.events_topic)
        with pytest.raises(ErasureRefused, match="does not seal"):
            erase_run(deployment.client, run_id)
    finally:
        deployment.close()


def test_an_altered_sealed_value_is_refused_not_read_as_erased() -> None:
    settings = Settings(partitions=1)
    sealer = Sealer(KeyStore(MemoryLog(settings), settings.keys_topic, 1))
    sealed = sealer.seal(ToolCallScheduled(run_id="r1", position=1, tool="t", args_hash="h", args='{"a":1}'))
    assert isinstance(sealed, ToolCallScheduled) and sealed.args.startswith("sealed:v1:r1:")
    assert sealer.open(sealed) == ToolCallScheduled(
        run_id="r1", position=1, tool="t", args_hash="h", args='{"a":1}'
    )
    # the same ciphertext moved to another field does not open (the field is in the associated data)
    moved = RunSubmitted(run_id="r1", workflow="w", input=sealed.args)
    with pytest.raises(SealError, match="sealed input of run r1"):
        sealer.open(moved)


def test_a_fork_of_a_sealed_run_reads_its_copied_records_and_is_erased_on_its_own(local: Local) -> None:
    run = local.client.submit("intake", {"note": MARKER})
    run.result(timeout=20)
    fork_id = run.fork(2, {}).run_id
    assert local.client.run(fork_id).result(timeout=20)["filed"] == MARKER
    assert MARKER.encode() not in local.raw(*content_topics(local.settings))
    erase_run(local.client, fork_id)
    assert MARKER in json.dumps(run.history())
    assert local.client.run(fork_id).status().result == "erased"


def test_a_sealed_and_chained_run_still_verifies_after_its_erasure() -> None:
    # The chain covers the bytes as written -- the sealed text -- so destroying the key changes
    # nothing an auditor verifies: the erased run's chain still holds, link by link.
    settings = Settings(partitions=1, seal_contents=True, chain_key=SecretStr("workers-only"))
    deployment = Local(settings)
    try:
        run_id = deployment.client.submit("intake", {"note": MARKER}).run_id
        deployment.client.run(run_id).result(timeout=20)
        erase_run(deployment.client, run_id)
        values = [
            r.value
            for r in deployment.log.read(settings.events_topic, 0)
            if r.key == run_id.encode() and r.value is not None
        ]
        assert values and all(link_of(v) for v in values)  # every record of the run carries a link
        key = chain_key_of("workers-only")
        assert key is not None
        assert first_break(key, run_id, values) is None
        assert MARKER.encode() not in b"".join(values)
        assert deployment.client.run(run_id).status().result == "erased"
    finally:
        deployment.close()


class _NoRangeReads(MemoryLog):
    """The in-memory log, refusing range reads of the keys topic once ``strict``: what a follower
    or a fresh run id must do without."""

    strict = False

    def read(self, topic: str, *args: object, **kwargs: object) -> Iterator[LogRecord]:  # type: ignore[override]
        if self.strict and topic == self.settings.keys_topic:
            raise AssertionError("the keys partition was range-read")
        return super().read(topic, *args, **kwargs)


def test_a_followed_keys_partition_gives_a_new_runs_key_without_a_range_read() -> None:
    settings = Settings(partitions=2)
    log = _NoRangeReads(settings)
    worker_keys, client_keys = KeyStore(log, settings.keys_topic, 2), KeyStore(log, settings.keys_topic, 2)
    worker_keys.follow([0, 1])
    log.strict = True
    try:
        key = client_keys.new_key("fresh-run-id")  # a drawn id: no read either
        assert worker_keys.opening_key("fresh-run-id", wait=5) == key
        client_keys.destroy("fresh-run-id")
        wait_until(  # the tombstone arrives the same way
            lambda: worker_keys.held("fresh-run-id") is None,
            5,
            "the follower to see the tombstone",
            interval=0.01,
        )
    finally:
        worker_keys.close()


def test_a_run_submitted_with_its_own_id_reuses_the_key_it_has() -> None:
    # A repeated submission of an id the client did not draw must not replace the run's key.
    settings = Settings(partitions=1, seal_contents=True)
    log = MemoryLog(settings)
    first = Client(settings, identity="a", log=log, serde=Serde.offline(settings))
    second = Client(settings, identity="b", log=log, serde=Serde.offline(settings))
    try:
        first.submit("intake", {"note": MARKER}, run_id="given-id")
        second.submit("intake", {"note": MARKER}, run_id="given-id")
        keys = [r for r in log.read(settings.keys_topic, 0) if r.key == b"given-id"]
        assert len(keys) == 1
        drawn = first.submit("intake", {"note": MARKER}).run_id
        assert [r.key for r in log.read(settings.keys_topic, 0)].count(drawn.encode()) == 1
    finally:
        first.close()
        second.close()


def test_a_value_sealed_with_the_earlier_nonce_layout_still_opens() -> None:
    # Records written before the 96-bit nonce counter (a random 8-byte prefix and a 4-byte
    # counter) are in Kafka for good: the nonce travels with each value, so they open as before.
    settings = Settings(partitions=1)
    keys = KeyStore(MemoryLog(settings), settings.keys_topic, 1)
    key = keys.sealing_key("r1")
    nonce = os.urandom(8) + (7).to_bytes(4, "big")
    blob = nonce + AESGCM(key).encrypt(nonce, b'{"a":1}', b"r1/args")
    old = "sealed:v1:r1:" + base64.b64encode(blob).decode()
    assert Sealer(keys).open_text(old, "args", "r1") == '{"a":1}'


def test_nonces_never_repeat_within_a_writer_nor_across_writers_under_one_key() -> None:
    settings = Settings(partitions=1)
    keys = KeyStore(MemoryLog(settings), settings.keys_topic, 1)
    writers = [Sealer(keys), Sealer(keys)]  # a client and a worker, say: each draws its own start
    values = [
        w.seal(ToolCallCompleted(run_id="r1", position=i, result=f'{{"n":{i}}}')).result
        for i in range(200)
        for w in writers
    ]
    nonces = {base64.b64decode(v.rsplit(":", 1)[1])[:12] for v in values}
    assert len(nonces) == len(values)
    assert all(writers[1].open_text(v, "result", "r1").startswith('{"n":') for v in values)


def test_each_message_of_a_prompt_is_sealed_on_its_own_and_one_moved_elsewhere_fails() -> None:
    settings = Settings(partitions=1)
    sealer = Sealer(KeyStore(MemoryLog(settings), settings.keys_topic, 1))
    plain = ModelCallScheduled(
        run_id="r1",
        position=1,
        model="m",
        args_hash="h",
        new_roles=["system", "user"],
        new_messages=["be brief", MARKER],
        params='{"t":0}',
    )
    sealed = sealer.seal(plain)
    assert isinstance(sealed, ModelCallScheduled) and len(sealed.new_messages) == 2
    assert all(m.startswith("sealed:v1:r1:") for m in (*sealed.new_messages, sealed.params))
    assert MARKER not in repr(sealed)
    assert sealer.open(sealed) == plain
    assert sealer.seal(sealed) == sealed  # sealed values are left as they are (a fork's copies)
    swapped = dataclasses.replace(sealed, params=sealed.new_messages[1])  # a message moved to params
    with pytest.raises(SealError, match="sealed params of run r1"):
        sealer.open(swapped)
    other_run = dataclasses.replace(sealed, run_id="r2")  # the key id in the value still names r1's key
    assert sealer.open(other_run).new_messages == ["be brief", MARKER]


def test_a_run_sealed_under_its_subject_uses_the_subjects_key_even_after_a_record_under_its_own() -> None:
    settings = Settings(partitions=1)
    sealer = Sealer(KeyStore(MemoryLog(settings), settings.keys_topic, 1))
    before = sealer.seal(ToolCallCompleted(run_id="r9", position=1, result='"x"'))
    assert before.result.startswith("sealed:v1:r9:")
    sealer.use_subject("r9", "customer-42")  # the cipher cached for r9 must not outlive this
    after = sealer.seal(ToolCallCompleted(run_id="r9", position=2, result='"y"'))
    assert after.result.startswith("sealed:v1:subject/customer-42:")
    sealer.keys.destroy("subject/customer-42")
    sealer.forget("subject/customer-42")
    assert sealer.open(after).result == ERASED
    assert sealer.open(before).result == '"x"'


def test_text_that_only_looks_sealed_is_sealed_and_a_copy_that_opens_is_kept() -> None:
    # The sealer leaves alone what is sealed already (a fork's or a reset's copies of another run's
    # records); a user's text that merely begins with the prefix must not slip through in the clear.
    settings = Settings(partitions=1)
    keys = KeyStore(MemoryLog(settings), settings.keys_topic, 1)
    sealer = Sealer(keys)
    origin = sealer.seal(
        ToolCallScheduled(run_id="origin", position=1, tool="t", args_hash="h", args='{"card":"4111"}')
    ).args
    lookalike = "sealed:v1:origin:" + base64.b64encode(b"my card is 4111 1111").decode()
    copied = sealer.seal(ToolCallScheduled(run_id="fork", position=1, tool="t", args_hash="h", args=origin))
    spoofed = sealer.seal(
        ToolCallScheduled(run_id="fork", position=2, tool="t", args_hash="h", args=lookalike)
    )
    messages = sealer.seal(
        ModelCallScheduled(
            run_id="fork", position=3, model="m", args_hash="h", new_roles=["user"], new_messages=[lookalike]
        )
    )
    assert copied.args == origin  # sealed under the origin's key, as it was
    for value in (spoofed.args, messages.new_messages[0]):
        assert value.startswith("sealed:v1:fork:") and "my card" not in value
    assert Sealer(keys).open_text(spoofed.args, "args", "fork") == lookalike
    assert Sealer(keys).open_text(messages.new_messages[0], "new_messages", "fork") == lookalike


KEYS = Settings(partitions=1, seal_contents=True)


class CountingLog(MemoryLog):
    """The in-memory log, counting the keys topic's lookups: each asks for the partition's end
    first (a round trip to the broker, on Kafka)."""

    reads = 0

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        if topic == KEYS.keys_topic:
            self.reads += 1
        return super().watermarks(topic, partition)


def test_a_store_that_follows_what_it_reads_looks_a_given_id_up_without_reading_again() -> None:
    log = CountingLog(KEYS)
    store = KeyStore(log, KEYS.keys_topic, KEYS.partitions)
    store.serve_submitter(follow_reads=True)
    try:
        store.sealing_key("run-a")
        store.sealing_key("run-b")  # the partition's second read: followed from here on
        reads = log.reads
        keys = {store.sealing_key(f"run-{i}") for i in range(20)}
        assert log.reads == reads, "an id of a followed partition was looked up with a read"
        assert len(keys) == 20
        # A key another process writes is brought by the follower: the same id reuses it.
        other = KeyStore(log, KEYS.keys_topic, KEYS.partitions)
        written = other.sealing_key("run-elsewhere")
        wait_until(lambda: store.held("run-elsewhere") is not None, 5, "the followed key", interval=0.01)
        assert store.sealing_key("run-elsewhere") == written
        assert log.reads == reads + 1  # the other store's own lookup
        # Stopped (a client's close), the store reads again, and follows again once it has read twice.
        store.stop_following()
        before = log.reads
        assert store.sealing_key("run-elsewhere") == written  # cached: no read
        store.sealing_key("run-after-stop")
        store.sealing_key("run-after-stop-2")
        assert log.reads == before + 2
        store.sealing_key("run-after-stop-3")
        assert log.reads == before + 2
    finally:
        store.close()


def test_a_store_that_does_not_follow_reads_for_every_given_id() -> None:
    log = CountingLog(KEYS)
    store = KeyStore(log, KEYS.keys_topic, KEYS.partitions)  # a worker's: it follows what it owns
    for i in range(5):
        store.sealing_key(f"run-{i}")
    assert log.reads == 5


def _chain(client: Client, run_id: str) -> list[str]:
    """``run_id`` and the runs it continued as, in order."""
    chain = [run_id]
    while True:
        continued = [e for e in client.run(chain[-1]).history() if e["type"] == "RunContinuedAsNew"]
        if not continued:
            return chain
        chain.append(continued[0]["new_run_id"])


def test_a_subject_runs_successors_are_sealed_under_the_subject_and_erased_with_it(local: Local) -> None:
    first = local.client.submit("generations", {"note": MARKER, "left": 2}, subject="customer-7").run_id
    local.client.run(first).result(timeout=20, follow=True)
    runs = _chain(local.client, first)
    assert len(runs) == 3
    erase_subject(local.client, "customer-7")
    fresh = Client(local.settings, identity="reader", log=local.log, serde=Serde.offline(local.settings))
    for run_id in runs:
        history = json.dumps(fresh.run(run_id).history())
        assert "ToolCallCompleted" in history and MARKER not in history, (
            f"run {run_id} of the chain was not erased"
        )
    fresh.close()


def test_a_worker_drops_the_ciphers_of_the_runs_that_have_ended() -> None:
    settings = Settings(partitions=1, seal_contents=True)
    log, serde = MemoryLog(settings), Serde.offline(settings)
    worker = Worker(app, settings, log=log, serde=serde, worker_id="w", checkpoint_interval_s=3600)
    thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
    thread.start()
    client = Client(settings, identity="t", log=log, serde=Serde.offline(settings))  # a sealer of its own
    try:
        runs = [client.submit("intake", {"note": f"n-{i}"}).run_id for i in range(30)]
        for run_id in runs:
            client.run(run_id).result(timeout=20)
        sealer = serde.sealer
        assert sealer is not None
        still = [r for r in runs if sealer.knows_key_of(r)]
        assert not still, f"the worker still keeps the key ids and ciphers of {len(still)} ended runs"
        # What it dropped is a cache: a signal to an ended run still opens, and the history reads.
        assert all(e["type"] for e in client.run(runs[0]).history())
    finally:
        client.close()
        worker.stop()
        thread.join(timeout=10)


def test_a_sealers_ciphers_are_a_bounded_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runtime.log.sealing.sealer.CACHED_CIPHERS", 8)
    sealer = Sealer(KeyStore(MemoryLog(KEYS), KEYS.keys_topic, 1))
    sealed = {}
    for i in range(20):
        sealed[f"run-{i}"] = sealer.seal_text(f"text {i}", "input", f"run-{i}")
    assert not sealer.knows_key_of("run-0") and sealer.knows_key_of("run-19")
    # A cipher dropped from the cache is made again from the cached key: every value still opens.
    assert all(sealer.open_text(value, "input", run) == f"text {run[4:]}" for run, value in sealed.items())
