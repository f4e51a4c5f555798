"""Sink throughput into chDB from a pre-filled topic, and ``audit run`` latency on the result.

    python bench/sink.py [--events 1000000] [--paths direct,faust,core] [--faust-events 200000]

Needs the local services (``agentlog infra up``). Prints one JSON object per line:

- ``prefill``: producing N pre-encoded events (one run encoded once, re-keyed per run id);
- ``sink``: Kafka -> chDB through ``SinkCore`` with the direct (confluent-kafka) driver and with
  the faust driver; ``core`` is the core alone fed from memory (no Kafka), which separates the
  consumer's cost from the store's;
- ``audit_run``: latency of one run's timeline on the filled store: the query alone, the CLI
  opening chDB itself (no sink running), and the CLI asking a running sink's query port.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from analytics import audit  # noqa: E402
from analytics.proxy import ProxyStore  # noqa: E402
from analytics.server import QueryServer  # noqa: E402
from analytics.store import ClientStore, open_client, parse_dsn  # noqa: E402
from consumers.core import SinkConfig, SinkCore  # noqa: E402
from consumers.direct import run_direct  # noqa: E402
from consumers.registry import WriterSchemas  # noqa: E402
from consumers.store_writer import StoreWriter  # noqa: E402
from infra.deployment import scratch_deployment  # noqa: E402
from runtime.config import Settings, load_settings  # noqa: E402
from runtime.log.records import events as ev  # noqa: E402
from runtime.log.schemas.registry import registry_client  # noqa: E402
from runtime.log.schemas.serde import Serde  # noqa: E402

RUN_WIDTH = 8
KEY_TEMPLATE = "00000000-0000-5000-8000-0000000000"  # + 2 digits: one key per tool call, fixed length


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


# -- prefill --------------------------------------------------------------------------------------
SYSTEM_PROMPT = "You are the refund agent of an online shop. " * 10


def run_template(run_id: str, steps: int = 4, with_prompts: bool = True) -> list[ev.Event]:
    """A typical run: start, ``steps`` x (model call with its prompt and usage, effecting tool call),
    completion (18 events)."""
    seq = 0
    now = int(time.time() * 1000)

    def nxt(cls: type[ev.Event], **fields: Any) -> ev.Event:
        nonlocal seq
        seq += 1
        return cls(run_id=run_id, seq=seq, occurred_at=now + seq, worker="bench-worker", epoch=0, **fields)

    out = [nxt(ev.RunStarted, workflow="refund", input='{"order": 4242, "amount": 40}', command_offset=0)]
    for step in range(steps):
        # The prompt as the runtime records it (runtime.log.records.prompts): the transcript so far as one
        # range of the run's message sequence, plus the new messages (the system prompt and the
        # first question at step 0; the last answer and the next question after).
        new = (
            [SYSTEM_PROMPT, f"question {step}: " + "q" * 160]
            if step == 0
            else ["x" * 240, f"question {step}: " + "q" * 160]
        )
        prompt = (
            {
                "message_count": 2 * step + 2,
                "message_slots": [] if step == 0 else [0, 2 * step + 2],
                "new_roles": ["system", "user"] if step == 0 else ["assistant", "user"],
                "new_messages": new,
                "params": '{"temperature":0.2}',
            }
            if with_prompts
            else {}
        )
        usage = (
            {
                "input_tokens": 400 * (step + 1),
                "output_tokens": 60,
                "cached_tokens": 300 * step,
                "response_model": "gpt-4o-mini-2024-07-18",
            }
            if with_prompts
            else {}
        )
        out.append(
            nxt(
                ev.ModelCallScheduled,
                position=2 * step + 1,
                model="gpt-4o-mini",
                args_hash="a" * 16,
                prompt_version="v3",
                **prompt,
            )
        )
        out.append(
            nxt(
                ev.ModelCallCompleted,
                position=2 * step + 1,
                result="x" * 240,
                latency_us=850_000,
                **usage,
            )
        )
        out.append(
            nxt(
                ev.ToolCallScheduled,
                position=2 * step + 2,
                tool="refund",
                args_hash="b" * 64,
                args='{"order": 4242, "amount": 40}',
                effect=True,
                idempotency_key=f"{KEY_TEMPLATE}{step:02d}",
            )
        )
        out.append(
            nxt(
                ev.ToolCallCompleted, position=2 * step + 2, result='{"refund_id": "r-1"}', latency_us=120_000
            )
        )
    out.append(nxt(ev.RunCompleted, result='{"refunded": true}'))
    return out


def prefill(settings: Settings, events: int) -> tuple[int, list[str]]:
    """Produce about ``events`` events; return the count and a sample of run ids."""
    serde = Serde(settings)
    template_id = "bench-" + "X" * RUN_WIDTH
    with_prompts = (
        os.environ.get("BENCH_SINK_PROMPTS", "1") != "0"
    )  # 0: model calls as before prompts were recorded
    templates = [serde.encode(e) for e in run_template(template_id, with_prompts=with_prompts)]
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    runs = events // len(templates)
    started = time.perf_counter()
    needle, key_needle = template_id.encode(), KEY_TEMPLATE.encode()
    for i in range(runs):
        run_id = f"bench-{i:0{RUN_WIDTH}d}".encode()
        # Same length as the template's (36-character UUID text): a byte-level replacement must
        # not change a string's length, or the Avro length prefix no longer matches the bytes.
        key_prefix = str(uuid.uuid5(uuid.NAMESPACE_URL, run_id.decode()))[: len(key_needle)].encode()
        for value in templates:
            data = value.replace(needle, run_id).replace(key_needle, key_prefix)
            assert len(data) == len(value)
            while True:
                try:
                    producer.produce(settings.events_topic, key=run_id, value=data)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    total = runs * len(templates)
    emit(metric="prefill", events=total, seconds=round(elapsed, 2), events_per_s=round(total / elapsed))
    sample = [f"bench-{random.randrange(runs):0{RUN_WIDTH}d}" for _ in range(50)]
    return total, sample


# -- sink paths -----------------------------------------------------------------------------------
def _core(settings: Settings, dsn: str, batch_rows: int) -> tuple[SinkCore, Any]:
    client = open_client(parse_dsn(dsn))
    writer = StoreWriter(client, settings.events_topic, WriterSchemas(registry_client(settings)))
    return SinkCore(
        writer, settings.events_topic, SinkConfig(batch_rows=batch_rows, flush_interval=0.5)
    ), client


def _watch(core: SinkCore, target: int, timeout: float) -> tuple[float, float]:
    """Seconds from now until ``target`` rows are written, and until the first batch was."""
    started = time.perf_counter()
    first = None
    while core.stats.rows_written < target:
        if first is None and core.stats.rows_written > 0:
            first = time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"only {core.stats.rows_written} of {target} rows after {timeout}s")
        core.raise_if_failed()
        time.sleep(0.01)
    return time.perf_counter() - started, first or 0.0


def bench_driver(settings: Settings, dsn: str, driver: str, target: int, batch_rows: int) -> None:
    core, client = _core(settings, dsn, batch_rows)
    stop = threading.Event()
    runner: Callable[..., None]
    if driver == "faust":
        from consumers.faust_app import run_faust

        runner = run_faust
    else:
        runner = functools.partial(run_direct, tune_gc=True)  # as `agentlog sink` runs it
    thread = threading.Thread(target=runner, args=(settings, core, stop), name=f"bench-{driver}")
    thread.start()
    try:
        elapsed, first = _watch(core, target, timeout=3600)
    finally:
        stop.set()
        thread.join()
        client.close()
    steady = (target - batch_rows) / (elapsed - first) if elapsed > first and target > batch_rows else 0
    emit(
        metric="sink",
        path=driver,
        events=target,
        seconds=round(elapsed, 2),
        events_per_s=round(target / elapsed),
        steady_events_per_s=round(steady),
        batches=core.stats.batches_written,
        batch_rows=batch_rows,
        store_busy_s=round(core.stats.write_seconds, 2),
        undecodable=core.stats.undecodable,
        load_avg_1m=os.getloadavg()[0],
    )


def bench_core(settings: Settings, dsn: str, events: int, batch_rows: int) -> None:
    """The core fed from memory: what the store side costs without a Kafka consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign(
        [TopicPartition(settings.events_topic, p, OFFSET_BEGINNING) for p in range(settings.partitions)]
    )
    records: list[tuple[int, int, bytes | None, bytes | None]] = []
    read_started = time.perf_counter()
    while len(records) < events:
        for m in consumer.consume(10_000, timeout=1.0):
            if m.error() is None:
                records.append((m.partition() or 0, m.offset() or 0, m.key(), m.value()))
    consumer.close()
    read_elapsed = time.perf_counter() - read_started
    emit(
        metric="kafka_read",
        events=len(records),
        seconds=round(read_elapsed, 2),
        events_per_s=round(len(records) / read_elapsed),
    )
    core, client = _core(settings, dsn, batch_rows)
    core.start()
    started = time.perf_counter()
    add = core.add
    for partition, offset, key, value in records:
        add(partition, offset, key, value)
    core.flush()
    elapsed = time.perf_counter() - started
    core.close()
    client.close()
    emit(
        metric="sink",
        path="core",
        events=len(records),
        seconds=round(elapsed, 2),
        events_per_s=round(len(records) / elapsed),
        batches=core.stats.batches_written,
        batch_rows=batch_rows,
        store_busy_s=round(core.stats.write_seconds, 2),
        undecodable=core.stats.undecodable,
        load_avg_1m=os.getloadavg()[0],
    )


# -- audit run latency ----------------------------------------------------------------------------
def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
        "samples": len(ordered),
    }


def _cli(settings: Settings, dsn: str, run_id: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOG_")}
    env.update(
        PYTHONPATH=str(ROOT),
        AGENTLOG_EVENTS_TOPIC=settings.events_topic,
        AGENTLOG_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
        AGENTLOG_SCHEMA_REGISTRY_URL=settings.schema_registry_url,
    )
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "audit", "run", run_id, "--dsn", dsn, "--json"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0 or len(json.loads(result.stdout)) != 18:
        raise RuntimeError(f"audit run {run_id} failed: {result.stderr[-500:]}")
    return elapsed


def bench_audit(settings: Settings, dsn: str, sample: list[str]) -> None:
    rows = 0
    client = open_client(parse_dsn(dsn))
    try:
        store = ClientStore(client)
        rows = int(store.query("SELECT count() FROM agentlog.events").rows[0][0])
        audit.run_events(store, sample[0], settings.events_topic)  # warm the caches once
        query_times = []
        for run_id in sample:
            started = time.perf_counter()
            events = audit.run_events(store, run_id, settings.events_topic)
            query_times.append(time.perf_counter() - started)
            assert len(events) == 18, (run_id, len(events))
        emit(metric="audit_run", path="query (store open in-process)", rows=rows, **_ms(query_times))
    finally:
        client.close()

    emit(
        metric="audit_run",
        path="cli, no sink running (opens chDB)",
        rows=rows,
        **_ms([_cli(settings, dsn, run_id) for run_id in sample[:8]]),
    )

    # A running sink: it holds the lock and serves the query port the CLI finds in <path>.sink.json.
    from analytics.store import StoreLock

    location = parse_dsn(dsn)
    lock = StoreLock(location)
    lock.acquire(10)
    server_client = open_client(location)
    server = QueryServer(server_client)
    endpoint = server.start()
    endpoint.write(location.endpoint_path)
    try:
        proxy = ProxyStore(endpoint)
        proxy_times = []
        for run_id in sample:
            started = time.perf_counter()
            audit.run_events(proxy, run_id, settings.events_topic)
            proxy_times.append(time.perf_counter() - started)
        emit(metric="audit_run", path="query via the sink's port", rows=rows, **_ms(proxy_times))
        emit(
            metric="audit_run",
            path="cli, sink running (asks its port)",
            rows=rows,
            **_ms([_cli(settings, dsn, run_id) for run_id in sample[:8]]),
        )
    finally:
        server.stop()
        location.endpoint_path.unlink(missing_ok=True)
        server_client.close()
        lock.release()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--paths", default="direct,faust,core", help="comma-separated: direct, faust, core")
    parser.add_argument("--faust-events", type=int, default=200_000, help="events the faust path is timed on")
    parser.add_argument("--batch-rows", type=int, default=SinkConfig().batch_rows)
    parser.add_argument("--keep", action="store_true", help="keep the chDB stores")
    parser.add_argument("--no-audit", action="store_true", help="skip the audit latency measurements")
    args = parser.parse_args()

    # Fresh topics (commands too: the default ones hold older schema versions) and schemas.
    settings = scratch_deployment(load_settings(), args.partitions, prefix="bench-sink-")
    topic = settings.events_topic
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    emit(metric="setup", topic=topic, partitions=args.partitions, cpus=os.cpu_count())
    total, sample = prefill(settings, args.events)

    workdir = Path(tempfile.mkdtemp(prefix="agentlog-bench-sink-"))
    try:
        paths = [p.strip() for p in args.paths.split(",") if p.strip()]
        if "direct" in paths:
            bench_driver(settings, f"chdb://{workdir / 'direct'}", "direct", total, args.batch_rows)
            if not args.no_audit:
                bench_audit(settings, f"chdb://{workdir / 'direct'}", sample)
        if "faust" in paths:
            bench_driver(
                settings,
                f"chdb://{workdir / 'faust'}",
                "faust",
                min(total, args.faust_events),
                args.batch_rows,
            )
        if "core" in paths:
            bench_core(settings, f"chdb://{workdir / 'core'}", total, args.batch_rows)
    finally:
        if args.keep:
            emit(metric="stores", path=str(workdir))
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        admin.delete_topics([settings.events_topic, settings.commands_topic, settings.checkpoints_topic])
    return 0


if __name__ == "__main__":
    sys.exit(main())
