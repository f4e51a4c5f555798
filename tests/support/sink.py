"""Helpers of the sink, audit and analytics tests: writing real events, reading Kafka and the store back.

Everything here talks to the real services: events are encoded by ``runtime.log.schemas.serde`` through the
registry and produced with an idempotent producer, read back with read_committed consumers, and
the store is a real chDB directory per test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition

from analytics.results import QueryResult
from analytics.store import connect
from runtime.config import Settings
from runtime.log.port.partitioning import partition_for
from runtime.log.records import events as ev
from runtime.log.records.fencing import FenceFilter
from runtime.log.schemas.serde import Serde
from support.services import ROOT, agentlog, deployment_env, make_deployment
from support.wait import stop_process, wait_until

__all__ = ["ROOT", "agentlog", "make_deployment"]


def producer(settings: Settings, **extra: Any) -> Producer:
    return Producer(
        {
            **settings.kafka_common(),  # a secure cluster's SASL/TLS settings, as the settings' user
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            **extra,
        }
    )


class EventLog:
    """Writes real events (Serde, registry ids) into a deployment's events topic, in order."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.serde = Serde(settings)
        self.producer = producer(settings)
        self.topic = settings.events_topic

    def partition(self, run_id: str) -> int:
        return partition_for(run_id, self.settings.partitions)

    def append(self, records: Iterable[ev.Event], partition: int | None = None) -> list[int]:
        """Produce ``records`` in order; return their offsets."""
        offsets: list[int] = []
        pending: list[Message] = []

        def delivered(err: Any, msg: Message) -> None:
            assert err is None, err
            pending.append(msg)

        for record in records:
            p = partition if partition is not None else self.partition(record.run_id)
            key = record.run_id.encode() if record.run_id else None
            self._produce(key, self.serde.encode(record), p, delivered)
        assert self.producer.flush(30) == 0
        offsets = [
            int(m.offset() or 0) for m in sorted(pending, key=lambda m: (m.partition() or 0, m.offset() or 0))
        ]
        return offsets

    def append_raw(self, value: bytes | None, partition: int, key: bytes | None = None) -> int:
        got: list[int] = []
        self._produce(key, value, partition, lambda err, msg: got.append(int(msg.offset())))
        assert self.producer.flush(30) == 0
        return got[0]

    def _produce(
        self, key: bytes | None, value: bytes | None, partition: int, on_delivery: Callable[..., None]
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    self.topic, key=key, value=value, partition=partition, on_delivery=on_delivery
                )
                return
            except BufferError:
                self.producer.poll(0.05)

    def claim(self, partition: int, worker: str = "w") -> int:
        """An EpochClaimed on ``partition``; its offset is the new epoch."""
        record = ev.EpochClaimed(run_id="", partition=partition, worker=worker, occurred_at=_now_ms())
        return self.append([record], partition=partition)[0]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class RunWriter:
    """Builds one run's events with consecutive seq numbers and the writer's current epoch."""

    run_id: str
    epoch: int = 0
    worker: str = "w1"
    seq: int = 0

    def next(self, cls: type[ev.Event], **fields: Any) -> ev.Event:
        self.seq += 1
        return cls(
            run_id=self.run_id,
            seq=self.seq,
            epoch=self.epoch,
            worker=self.worker,
            occurred_at=_now_ms(),
            **fields,
        )

    def started(self, workflow: str = "refund") -> ev.Event:
        return self.next(ev.RunStarted, workflow=workflow, input=json.dumps({"order": 42}), command_offset=0)

    def tool_call(
        self, position: int, tool: str = "refund", key: str | None = None, attempts: int = 1
    ) -> list[ev.Event]:
        key = key or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.run_id}/{tool}/{position}"))
        out = [
            self.next(
                ev.ToolCallScheduled,
                position=position,
                tool=tool,
                args_hash="h",
                args="{}",
                effect=True,
                idempotency_key=key,
            )
        ]
        for attempt in range(1, attempts):
            out.append(
                self.next(
                    ev.ToolCallFailed,
                    position=position,
                    error_type="Timeout",
                    error="timed out",
                    attempt=attempt,
                    final=False,
                )
            )
        out.append(
            self.next(
                ev.ToolCallCompleted,
                position=position,
                result='{"ok":true}',
                attempt=attempts,
                latency_us=1500,
            )
        )
        return out

    def model_call(self, position: int, model: str = "gpt-test") -> list[ev.Event]:
        return [
            self.next(
                ev.ModelCallScheduled, position=position, model=model, args_hash="m", prompt_version="p1"
            ),
            self.next(ev.ModelCallCompleted, position=position, result='"ok"', latency_us=25000),
        ]

    def completed(self) -> ev.Event:
        return self.next(ev.RunCompleted, result='"done"')

    def history(self, steps: int = 2) -> list[ev.Event]:
        out = [self.started()]
        for step in range(steps):
            out += self.model_call(2 * step + 1)
            out += self.tool_call(2 * step + 2)
        out.append(self.completed())
        return out


def with_epoch(record: ev.Event, epoch: int) -> ev.Event:
    return replace(record, epoch=epoch)


# -- reading Kafka back ----------------------------------------------------------------------------
def read_partition(
    settings: Settings, partition: int, topic: str | None = None, timeout: float = 30.0
) -> list[Message]:
    """Every committed record of a partition, in offset order (read_committed, like the sink)."""
    topic = topic or settings.events_topic
    consumer = Consumer(
        {
            **settings.kafka_common(),
            "group.id": f"test-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    out: list[Message] = []

    def at_the_end() -> bool:
        message = consumer.poll(0.5)
        if message is None:
            return False
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return True
            raise AssertionError(error)
        out.append(message)
        return False

    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        wait_until(at_the_end, timeout, f"partition {partition} of {topic} read to its end", interval=0)
        return out
    finally:
        consumer.close()


def kafka_offsets(settings: Settings) -> dict[int, list[int]]:
    """Offsets of the committed records per non-empty partition (what the store must hold)."""
    offsets = {
        p: [int(m.offset() or 0) for m in read_partition(settings, p)] for p in range(settings.partitions)
    }
    return {p: o for p, o in offsets.items() if o}


def kafka_timeline(settings: Settings, run_id: str) -> list[tuple[int, str]]:
    """(seq, type) of the run's events as the log holds them: offset order, fenced ones dropped."""
    serde = Serde(settings)
    fence = FenceFilter()
    out: list[tuple[int, str]] = []
    for message in read_partition(settings, partition_for(run_id, settings.partitions)):
        record = serde.decode(message.value() or b"", message.key())
        assert isinstance(record, ev.Event)
        if fence.admit(record, int(message.offset() or 0)) and record.run_id == run_id:
            out.append((record.seq, record.type))
    return out


# -- the store ---------------------------------------------------------------------------------------
def query(dsn: str, sql: str, parameters: dict[str, Any] | None = None) -> QueryResult:
    with connect(dsn, wait=30) as store:
        return store.query(sql, parameters)


def scalar(dsn: str, sql: str, parameters: dict[str, Any] | None = None) -> Any:
    return query(dsn, sql, parameters).rows[0][0]


def wait_for_rows(
    dsn: str, topic: str, expected: int, timeout: float = 60.0, proc: subprocess.Popen[bytes] | None = None
) -> int:
    """Until the store holds ``expected`` rows of ``topic`` (fails at once if the sink ``proc`` exits)."""

    def count() -> int:
        try:
            return int(
                scalar(dsn, "SELECT count() FROM agentlog.events WHERE topic = {t:String}", {"t": topic})
            )
        except Exception:  # the store may not exist or be migrated yet
            return -1

    landed: list[int] = []
    wait_until(
        lambda: landed.append(n := count()) or n >= expected,
        timeout,
        f"{expected} rows of {topic} in the store",
        interval=0.2,
        process=proc,
        detail=lambda: f"{landed[-1]} rows so far",
    )
    return landed[-1]


def store_offsets(dsn: str, topic: str) -> dict[int, list[int]]:
    result = query(
        dsn,
        "SELECT partition, groupArray(offset) FROM (SELECT partition, offset FROM agentlog.events "
        "WHERE topic = {t:String} ORDER BY partition, offset) GROUP BY partition",
        {"t": topic},
    )
    return {int(p): [int(o) for o in offsets] for p, offsets in result.rows}


# -- the sink and the CLI as processes ------------------------------------------------------------
class SinkProcess:
    """``agentlog sink`` as a real subprocess against one deployment and store."""

    def __init__(
        self, settings: Settings, dsn: str, log_path: Path, driver: str = "direct", *extra: str, **env: str
    ) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "sink", "--dsn", dsn, "--driver", driver, *extra],
            cwd=ROOT,
            env=deployment_env(settings, **env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the sink's output, for failure messages only."""
        return self.log_path.read_text(errors="replace")[-chars:]

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 30.0) -> int:
        stop_process(self.proc, timeout)
        self._log.close()
        return int(self.proc.returncode)


def seq_types(events: Sequence[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(int(e["seq"]), str(e["type"])) for e in events]


class InProcessSink:
    """``run_sink`` on a thread of the test process (the direct driver), stopped on exit."""

    def __init__(self, settings: Settings, dsn: str, **config: Any) -> None:
        from consumers.core import SinkConfig

        self.settings = settings
        self.dsn = dsn
        self.stop_event = threading.Event()
        self.config = SinkConfig(**{"flush_interval": 0.1, **config})
        self.stats: Any = None
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="test-sink")

    def _run(self) -> None:
        from consumers.runner import run_sink

        try:
            self.stats = run_sink(
                self.settings,
                dsn=self.dsn,
                driver="direct",
                config=self.config,
                stop=self.stop_event,
                on_ready=lambda _endpoint: self.ready.set(),
            )
        except BaseException as exc:  # re-raised by stop() in the test's thread
            self.error = exc
            self.ready.set()

    def __enter__(self) -> InProcessSink:
        self.thread.start()
        assert self.ready.wait(60), "the sink did not start"
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> Any:
        self.stop_event.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the sink did not stop"
        if self.error is not None:
            raise self.error
        return self.stats


def bulk_fill(settings: Settings, runs: int, steps: int = 2, prefix: str = "bulk") -> int:
    """Many runs fast: one run encoded once, then its bytes re-keyed per run id (same length)."""
    template_id = f"{prefix}-{'X' * 8}"
    log = EventLog(settings)
    templates = [log.serde.encode(e) for e in RunWriter(template_id).history(steps)]
    needle = template_id.encode()
    sink = producer(settings, **{"linger.ms": 50, "batch.size": 1_000_000})
    for i in range(runs):
        run_id = f"{prefix}-{i:08d}".encode()
        for value in templates:
            while True:
                try:
                    sink.produce(settings.events_topic, key=run_id, value=value.replace(needle, run_id))
                    break
                except BufferError:
                    sink.poll(0.05)
    assert sink.flush(60) == 0
    return runs * len(templates)
