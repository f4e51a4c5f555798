"""The floor under any Kafka-backed runtime on this machine, measured in the same run as it.

- one-message transactions back to back (produce + commit): latency median/p90/p99;
- 200 messages per transaction: throughput;
- an idempotent produce + flush: latency (what agentlog pays per recorded call);
- after an idle pause, one record produced -> consumed and -> acked (what a submission to an idle
  worker pays before any agentlog code runs).
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from runtime.config import Settings


def floor_topic_for(settings: Settings) -> str:
    """A topic of its own (3 partitions): the floors must not feed the workers' commands topic."""
    topic = f"{settings.commands_topic}.floor"
    admin = AdminClient(settings.kafka_common())
    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(timeout=30)
    return topic


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def transactional_latency(settings: Settings, topic: str, n: int = 200) -> dict[str, Any]:
    producer = Producer(
        {**settings.kafka_common(), "transactional.id": f"floor-{uuid.uuid4().hex[:6]}", "linger.ms": 0}
    )
    producer.init_transactions(30)
    samples = []
    for i in range(n):
        started = time.perf_counter()
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=b"x" * 100, partition=i % 3)
        producer.commit_transaction(30)
        samples.append((time.perf_counter() - started) * 1000)
    producer.flush(10)
    return {
        "floor": "kafka_txn_one_message_ms",
        "median": round(statistics.median(samples), 3),
        "p90": round(_pct(samples, 0.9), 3),
        "p99": round(_pct(samples, 0.99), 3),
        "n": n,
    }


def transactional_throughput(
    settings: Settings, topic: str, batches: int = 50, per_batch: int = 200
) -> dict[str, Any]:
    producer = Producer(
        {**settings.kafka_common(), "transactional.id": f"floor-{uuid.uuid4().hex[:6]}", "linger.ms": 1}
    )
    producer.init_transactions(30)
    started = time.perf_counter()
    for _ in range(batches):
        producer.begin_transaction()
        for i in range(per_batch):
            producer.produce(topic, key=b"k", value=b"x" * 100, partition=i % 3)
        producer.commit_transaction(30)
    elapsed = time.perf_counter() - started
    return {
        "floor": "kafka_txn_200_per_commit_msgs_per_s",
        "value": round(batches * per_batch / elapsed),
        "n": batches * per_batch,
    }


def idempotent_latency(settings: Settings, topic: str, n: int = 500) -> dict[str, Any]:
    producer = Producer(
        {**settings.kafka_common(), "enable.idempotence": True, "acks": "all", "linger.ms": 0}
    )
    producer.produce(topic, value=b"warm", partition=0)
    producer.flush(10)
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        producer.produce(topic, key=b"k", value=b"x" * 100, partition=0)
        producer.flush(10)
        samples.append((time.perf_counter() - started) * 1000)
    return {
        "floor": "kafka_idempotent_produce_flush_ms",
        "median": round(statistics.median(samples), 3),
        "p90": round(_pct(samples, 0.9), 3),
        "n": n,
    }


def idle_round_trip(settings: Settings, topic: str, idle_s: float, n: int = 20) -> dict[str, Any]:
    """After ``idle_s`` of quiet, one record: produce -> consumed by a consumer already waiting on
    the partition (fetch.wait.max.ms as the workers' commands feed), and produce -> acked. Plain
    confluent-kafka, no agentlog code: what a submission to an idle worker pays before any of ours
    runs -- on a VM whose idle CPUs wake slowly, far more than the same hop under load."""
    producer = Producer({**settings.kafka_common(), "acks": "all", "linger.ms": 0})
    consumer = Consumer(
        {
            **settings.kafka_common(),
            "group.id": f"floor-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, 1, OFFSET_END)])
    consumer.poll(1.0)  # the assignment's first fetch
    consumed: list[float] = []
    acked: list[float] = []
    done: list[int] = []

    def delivered(_error: object, _message: object) -> None:
        done.append(time.perf_counter_ns())

    for _ in range(n):
        time.sleep(idle_s)
        done.clear()
        started = time.perf_counter_ns()
        producer.produce(topic, value=b"x" * 100, partition=1, on_delivery=delivered)
        producer.poll(0)
        message = consumer.poll(10.0)
        arrived = time.perf_counter_ns()
        if message is None or message.error() is not None:
            raise SystemExit(f"the idle floor's record was not consumed: {message and message.error()}")
        producer.flush(10)
        consumed.append((arrived - started) / 1000)
        acked.append((done[0] - started) / 1000)
    consumer.close()
    return {
        "floor": "kafka_after_idle_us",
        "idle_s": idle_s,
        "produce_to_consumed_median": round(statistics.median(consumed)),
        "produce_to_consumed_p90": round(_pct(consumed, 0.9)),
        "produce_to_acked_median": round(statistics.median(acked)),
        "n": n,
    }
