"""Run streams: from a model's chunk to the caller's iterator, and what streaming costs a step.

- latency: a model emits 100 deltas 5 ms apart, each carrying ``time.time()`` when emitted; a
  client reading ``Client.stream`` notes when each arrives (same machine, same clock): p50/p99 ms.
  The floor, in the same sitting: one record produced -> consumed on the same broker with the
  same client settings as the stream's producer and follower (linger 1 ms, fetch wait 50 ms).
- cost: a worker runs ``runs`` runs of 20 model calls emitting 20 deltas each, with streaming on
  (``stream_runs``) and off; its CPU (utime + stime from /proc) per step, after a warm-up run.

Run: `python bench/stream.py [runs]` (services up). Prints JSON lines.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _deploy import fresh_deployment, start_worker
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from runtime.client import Client
from runtime.config import Settings
from runtime.log.kafka.config import reader_config

APP = "bench.stream_app:app"
STEPS, CHUNKS = 20, 20


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ready(client: Client, workflow: str, request: dict[str, int]) -> None:
    client.submit(workflow, request).result(timeout=120)  # the worker is up and warm


def latency(settings: Settings, log_dir: Path) -> dict[str, float]:
    worker = start_worker(settings, "bench-stream", log_dir / "stream-latency.log", app=APP)
    try:
        with Client(settings) as client:
            _ready(client, "paced", {"calls": 1, "chunks": 5})
            run = client.submit("paced", {"calls": 3, "chunks": 100})
            seen: list[float] = []
            for event in client.stream(run.run_id):
                if event.kind == "delta":
                    seen.append((time.time() - float(event.data["text"])) * 1000)
        return {"n": len(seen), "p50_ms": round(_pct(seen, 0.5), 2), "p99_ms": round(_pct(seen, 0.99), 2)}
    finally:
        worker.terminate()
        worker.wait(30)


def floor(settings: Settings, n: int = 300) -> dict[str, float]:
    topic = f"{settings.commands_topic}.streamfloor"
    admin = AdminClient(settings.kafka_common())  # kept until its futures resolve
    for future in admin.create_topics([NewTopic(topic, num_partitions=1)]).values():
        future.result(timeout=30)
    producer = Producer(
        {**settings.kafka_common(), "enable.idempotence": True, "acks": "all", "linger.ms": 1}
    )
    consumer = Consumer(reader_config(settings, **{"enable.partition.eof": False, "fetch.wait.max.ms": 50}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[float] = []
    try:
        for _ in range(n):
            producer.produce(topic, repr(time.time()).encode())
            producer.poll(0)
            message = consumer.poll(5)
            while message is not None and message.error() is not None:
                message = consumer.poll(5)
            assert message is not None
            seen.append((time.time() - float(message.value() or b"0")) * 1000)
            time.sleep(0.005)
    finally:
        producer.flush(10)
        consumer.close()
    return {"n": len(seen), "p50_ms": round(_pct(seen, 0.5), 2), "p99_ms": round(_pct(seen, 0.99), 2)}


def cost(settings: Settings, log_dir: Path, runs: int, on: bool) -> float:
    """The worker's CPU seconds per step (ms), streaming ``on`` or off."""
    worker = start_worker(
        settings,
        f"bench-cost-{on}",
        log_dir / f"stream-cost-{on}.log",
        app=APP,
        AGENTLOG_STREAM_RUNS="true" if on else "false",
    )
    try:
        with Client(settings) as client:
            _ready(client, "steps", {"steps": STEPS, "chunks": CHUNKS})
            before = _cpu_s(worker.pid)
            handles = [client.submit("steps", {"steps": STEPS, "chunks": CHUNKS}) for _ in range(runs)]
            client.results([h.run_id for h in handles], timeout=600)
            return (_cpu_s(worker.pid) - before) / (runs * STEPS) * 1000
    finally:
        worker.terminate()
        worker.wait(30)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    log_dir = Path(os.environ.get("BENCH_LOGS", "/tmp"))
    settings = fresh_deployment(partitions=1, prefix="bench-stream")
    print(json.dumps({"bench": "stream", "metric": "chunk_to_iterator", **latency(settings, log_dir)}))
    print(json.dumps({"bench": "stream", "metric": "floor_produce_consume", **floor(settings)}))
    for on in (True, False, True, False):
        cost_settings = fresh_deployment(partitions=1, prefix="bench-stream")
        per_step = cost(cost_settings, log_dir, runs, on)
        print(
            json.dumps(
                {
                    "bench": "stream",
                    "metric": "worker_cpu_ms_per_step",
                    "streaming": on,
                    "deltas_per_step": CHUNKS,
                    "value": round(per_step, 3),
                }
            )
        )


if __name__ == "__main__":
    main()
