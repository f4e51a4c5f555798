"""Faults on a 3-node cluster, one table: ``make chaos`` (or ``python bench/chaos.py [ROW ...]``).

Starts its own 3-node KRaft cluster (``infra up --brokers 3``'s, on ports 27092-27094 and
controllers 27192-27194; ``CHAOS_KAFKA_PORT`` / ``CHAOS_CONTROLLER_PORT`` move them) in a
temporary state folder, in front of the configured schema registry, and runs the refund agent
(examples/refund_agent.py: its world is a SQLite file that counts every effect attempt) under:

- ``crash``: the worker SIGKILLed at each of the 40 steps of refund-40 twice over: before the
  step's call starts (its model call scheduled, nothing done yet: ``REFUND_CRASH_BEFORE_STEP``) and
  after the step's tool ran -- the lookup, or the effect applied -- but before its result is
  acknowledged (``REFUND_CRASH_AFTER_STEP``): 80 points, one run each; the worker runs under
  ``--respawn``, so a fresh fork takes over;
- ``broker``: the leader of events partition 0 SIGKILLed while 200 runs of 20 steps execute,
  restarted 10 s later;
- ``registry``: a registry of its own (and its PostgreSQL, on 27081 and 27432) SIGKILLed for
  30 s while 100 runs execute; fresh clients keep submitting during the outage (their schema ids
  come from the state folder's cache) and any refusal is counted with its message;
- ``workers``: three workers under load (200 runs), one SIGKILLed and a fourth added.

Every row counts: runs completed of runs submitted, effects and effect attempts (a duplicate
effect is an effect key attempted twice), lost results (a run without its effect, or an effect
whose completion is not in the run's history), runs with a call in doubt, and a history check
(each run's recorded effect completions equal the effects the world saw). Prints the table, then
one JSON line per row.

- ``coordinator``: the broker row, the node killed being the workers' group coordinator; the
  worker must keep its partitions meanwhile (``worker_partitions_lost``);
- ``sink``: the broker row (100 runs) with ``agentlog sink`` copying the events topic into
  ClickHouse (chDB), the sink SIGKILLed 2 s into the broker's outage and started again at once:
  the store must hold every Kafka record once (rows, duplicate rows, gaps);
- ``network``: a second 3-node cluster (nodes 27400-27402, controllers 27420-27422) whose nodes
  advertise a TCP proxy each (27410-27412, bench/tcp_proxy.py), so every client and the other nodes
  reach a node through its proxy; the proxy of the leader of events partition 0 is cut (a black
  hole) for 20 s while 200 runs execute, with the sink running: the same checks as above.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _deploy import ROOT, env_for, start_worker
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from tcp_proxy import CuttableProxy

from examples.refund_agent import init_world
from infra import kafka
from infra.deployment import scratch_deployment
from runtime.client import Client
from runtime.config import Settings, load_settings
from runtime.log.kafka.config import reader_config
from runtime.log.records.events import (
    EpochClaimed,
    Event,
    ModelCallCompleted,
    ModelCallFailed,
    RunCompleted,
    RunFailed,
    RunParked,
    RunRejected,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallScheduled,
)
from runtime.log.records.fencing import FenceFilter
from runtime.log.schemas.serde import Serde
from support import cluster as cluster_support
from support import sink as sink_support

EFFECTS = ("send_email", "refund", "create_ticket")


@dataclass
class Watch:
    """What the events topic says, read incrementally: per run its end, its effect calls."""

    settings: Settings
    serde: Serde
    ended: dict[str, str] = field(default_factory=dict)
    effect_positions: dict[str, dict[int, str]] = field(default_factory=lambda: defaultdict(dict))
    effect_completions: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    in_doubt: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.consumer = Consumer(reader_config(self.settings))
        self.consumer.assign([TopicPartition(self.settings.events_topic, p, 0) for p in range(self.settings.partitions)])
        self.fences = [FenceFilter() for _ in range(self.settings.partitions)]

    def poll(self, seconds: float = 0.5) -> None:
        for message in self.consumer.consume(num_messages=10_000, timeout=seconds):
            if message.error() is not None or message.value() is None:
                continue
            event = self.serde.decode(message.value(), message.key())
            partition = message.partition() or 0
            if not isinstance(event, Event) or not self.fences[partition].admit(event, message.offset() or 0):
                continue
            if isinstance(event, EpochClaimed):
                continue
            run = event.run_id
            if isinstance(event, ToolCallScheduled) and event.tool in EFFECTS:
                self.effect_positions[run][event.position] = event.tool
            elif isinstance(event, ToolCallCompleted) and event.position in self.effect_positions.get(run, {}):
                self.effect_completions[run] += 1
            if isinstance(event, (ModelCallCompleted, ModelCallFailed, ToolCallCompleted, ToolCallFailed)):
                if event.in_doubt:  # a model call in doubt counts as much as a tool call
                    self.in_doubt.add(run)
            elif isinstance(event, (RunCompleted, RunFailed, RunParked, RunRejected)):
                self.ended[run] = event.type

    def wait_ended(self, runs: list[str], timeout: float, alive: Callable[[], bool] = lambda: True) -> float:
        """Seconds until every run of ``runs`` has ended (or ``timeout``)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            self.poll()
            if all(run in self.ended for run in runs):
                return time.monotonic() - started
            if not alive():
                break
        return float("nan")

    def close(self) -> None:
        self.consumer.close()


def world_counts(db: Path) -> tuple[int, int, int]:
    """Effects, effect attempts, and effect keys attempted more than once (the world's table of
    effects has the key as primary key: a second attempt is recorded but not applied)."""
    with sqlite3.connect(db, timeout=30) as conn:
        effects = conn.execute("SELECT count(*) FROM effects").fetchone()[0]
        attempts = conn.execute("SELECT count(*) FROM effect_attempts").fetchone()[0]
        twice = conn.execute(
            "SELECT count(*) FROM (SELECT idempotency_key FROM effect_attempts GROUP BY 1 HAVING count(*) > 1)"
        ).fetchone()[0]
    return int(effects), int(attempts), int(twice)


def new_world(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        init_world(conn)
    return path


def row(name: str, runs: list[str], watch: Watch, world: Path, expected_effects: int, **extra: Any) -> dict[str, Any]:
    watch.poll(0.5)
    effects, attempts, twice = world_counts(world)
    completed = sum(1 for r in runs if watch.ended.get(r) == "RunCompleted")
    recorded = sum(watch.effect_completions.get(r, 0) for r in runs)
    return {
        "row": name,
        "runs": len(runs),
        "completed": completed,
        "effects": effects,
        "effect_attempts": attempts,
        # An effect applied beyond the expected ones; a key attempted again (an in-doubt call
        # retried with its recorded key, which the service deduplicates) is counted apart.
        "duplicate_effects": max(0, effects - expected_effects),
        "keys_attempted_twice": twice,
        "lost_results": max(0, expected_effects - effects) + max(0, effects - recorded),
        "in_doubt_runs": sum(1 for r in runs if r in watch.in_doubt),
        "history_equals_effects": recorded == effects,
        **extra,
    }


def submit(client: Client, n: int, steps: int, tag: str) -> list[str]:
    runs = [client.submit("refund", {"order": f"{tag}-{i}", "steps": steps}).run_id for i in range(n)]
    client.flush()
    return runs


def effects_for(steps: int) -> int:
    return sum(1 for s in (14, 22, 30) if s <= steps)


def crash_points(base: Settings, work: Path, steps: int = 40) -> dict[str, Any]:
    """The worker SIGKILLed before each step's call starts and after each step's tool ran (before
    its result is acknowledged): one run per point."""
    points = [(kind, str(s)) for kind in ("BEFORE_STEP", "AFTER_STEP") for s in range(1, steps + 1)]
    totals: dict[str, Any] = defaultdict(int)
    exactly_one_in_doubt = 0
    deployment = scratch_deployment(base, partitions=1, prefix="chaos")  # one for all points: a
    # point's worker is stopped before the next one's starts (static membership takes over at once)
    for kind, where in points:
        world = new_world(work / f"crash-{kind}-{where}.db")
        log = work / f"crash-{kind}-{where}.log"
        worker = start_worker(
            deployment, "w1", log, "--respawn", REFUND_WORLD_DB=str(world), **{f"REFUND_CRASH_{kind}": where}
        )
        client = Client(deployment)
        watch = Watch(deployment, client.serde)
        try:
            runs = submit(client, 1, steps, f"crash-{where}")
            watch.wait_ended(runs, 120, alive=lambda w=worker: w.poll() is None)  # type: ignore[misc]
            point = row("crash", runs, watch, world, effects_for(steps))
            crashed = Path(f"{world}.crash-{kind}-{where}").exists()
            totals["points"] += 1
            totals["crashed"] += int(crashed)
            totals[f"crashed_{kind.lower()}"] += int(crashed)
            for key in (
                "runs",
                "completed",
                "effects",
                "effect_attempts",
                "duplicate_effects",
                "keys_attempted_twice",
                "lost_results",
                "in_doubt_runs",
            ):
                totals[key] += point[key]
            exactly_one_in_doubt += int(len(client.run(runs[0]).status().in_doubt) == 1)
            totals["history_mismatches"] += int(not point["history_equals_effects"])
        finally:
            watch.close()
            client.close()
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    return {
        "row": f"crash points ({steps} steps before the call starts, {steps} after the tool ran)",
        **totals,
        "runs_exactly_one_in_doubt": exactly_one_in_doubt,
    }


def broker_kill(base: Settings, work: Path, n: int = 200, steps: int = 20, down_s: float = 10.0) -> dict[str, Any]:
    return _broker_kill(base, work, n, steps, down_s, with_sink=False)


def coordinator_kill(base: Settings, work: Path, n: int = 200, steps: int = 20) -> dict[str, Any]:
    """The broker row, the node SIGKILLed being the workers' group coordinator: the worker must
    keep its partitions (``worker_partitions_lost`` 0) while the coordinator moves."""
    return _broker_kill(base, work, n, steps, 10.0, with_sink=False, victim="coordinator")


def sink_during_broker_kill(base: Settings, work: Path, n: int = 100, steps: int = 20) -> dict[str, Any]:
    """The broker row with the sink copying the events topic into ClickHouse: the sink SIGKILLed
    2 s into the broker's outage and started again at once (on the two nodes left)."""
    return _broker_kill(base, work, n, steps, 10.0, with_sink=True)


def _broker_kill(
    base: Settings, work: Path, n: int, steps: int, down_s: float, *, with_sink: bool, victim: str = "leader"
) -> dict[str, Any]:
    tag = "sink" if with_sink else victim
    deployment = scratch_deployment(base, partitions=3, prefix="chaos")
    world = new_world(work / f"{tag}.db")
    worker = start_worker(deployment, "w1", work / f"{tag}-w1.log", REFUND_WORLD_DB=str(world))
    dsn = f"chdb://{work / 'sink-store'}"
    sink = start_sink(deployment, dsn, work / "sink-1.log") if with_sink else None
    client = Client(deployment)
    watch = Watch(deployment, client.serde)
    try:
        runs = submit(client, n, steps, tag)
        while world_counts(world)[1] < n // 4:  # a quarter of the effects ran: mid-flight
            watch.poll(0.2)
        if victim == "coordinator":
            leader = group_coordinator(deployment)
        else:
            leader = cluster_support.leader_of(deployment, deployment.events_topic, 0)
        killed = time.monotonic()
        cluster_support.kill_node(deployment, leader)
        if sink is not None:
            time.sleep(2.0)
            sink.kill()
            sink.wait()
            sink = start_sink(deployment, dsn, work / "sink-2.log")
        time.sleep(max(0.0, down_s - (time.monotonic() - killed)))
        cluster_support.restart_node(deployment, leader)
        watch.wait_ended(runs, 600, alive=lambda: worker.poll() is None)
        done_s = round(time.monotonic() - killed, 1)
        extra: dict[str, Any] = {
            "all_done_s_after_kill": done_s,
            "worker_survived": worker.poll() is None,
            "worker_partitions_lost": partitions_lost(work / f"{tag}-w1.log"),
        }
        if sink is not None:
            extra.update(store_matches_kafka(deployment, dsn, sink))
        what = "the sink SIGKILLed during a broker kill" if with_sink else "broker SIGKILLed"
        whose = "the workers' group coordinator" if victim == "coordinator" else "leader of events[0]"
        return row(
            f"{what} ({whose}, node {leader}), restarted after {down_s:.0f}s",
            runs,
            watch,
            world,
            n * effects_for(steps),
            **extra,
        )
    finally:
        watch.close()
        client.close()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        if sink is not None and sink.poll() is None:
            sink.send_signal(signal.SIGTERM)
            sink.wait(timeout=60)


NET_KAFKA_PORT = int(os.environ.get("CHAOS_NET_KAFKA_PORT", "27400"))  # nodes 27400-27402
NET_PROXY_PORT = int(os.environ.get("CHAOS_NET_PROXY_PORT", "27410"))  # their proxies 27410-27412
NET_CONTROLLER_PORT = int(os.environ.get("CHAOS_NET_CONTROLLER_PORT", "27420"))  # controllers 27420-27422


@contextmanager
def proxied_cluster(base: Settings, state: Path) -> Iterator[tuple[Settings, dict[int, CuttableProxy]]]:
    """A 3-node cluster of its own whose nodes advertise a cuttable proxy each (bench/tcp_proxy.py):
    clients and the other nodes reach a node only through its proxy; the controllers talk directly."""
    settings = base.model_copy(
        update={"state_dir": state, "kafka_port": NET_KAFKA_PORT, "kafka_controller_port": NET_CONTROLLER_PORT}
    )
    kafka.configure(settings, 3)
    nodes = kafka.nodes(settings)
    proxies = {n.node_id: CuttableProxy(NET_PROXY_PORT + i, n.port) for i, n in enumerate(nodes)}
    kafka.advertise_through(settings, {node_id: proxy.listen_port for node_id, proxy in proxies.items()})
    settings = settings.model_copy(
        update={"bootstrap_servers": ",".join(f"127.0.0.1:{p.listen_port}" for p in proxies.values())}
    )
    try:
        kafka.start(settings, lambda _m: None)
        yield settings, proxies
    finally:
        kafka.stop(settings)
        for proxy in proxies.values():
            proxy.close()


def network_cut(base: Settings, work: Path, n: int = 200, steps: int = 20, cut_s: float = 20.0) -> dict[str, Any]:
    """The network to one node (the leader of events[0]) cut for ``cut_s`` while ``n`` runs execute,
    on a cluster of its own behind proxies; the sink copies the events topic throughout."""
    with proxied_cluster(base, work / "net-state") as (cluster, proxies):
        deployment = scratch_deployment(cluster, partitions=3, prefix="chaos")
        world = new_world(work / "net.db")
        worker = start_worker(deployment, "w1", work / "net-w1.log", REFUND_WORLD_DB=str(world))
        dsn = f"chdb://{work / 'net-store'}"
        sink = start_sink(deployment, dsn, work / "net-sink.log")
        client = Client(deployment)
        watch = Watch(deployment, client.serde)
        try:
            runs = submit(client, n, steps, "net")
            while world_counts(world)[1] < n // 4:
                watch.poll(0.2)
            leader = cluster_support.leader_of(deployment, deployment.events_topic, 0)
            cut = time.monotonic()
            proxies[leader].cut()
            while time.monotonic() - cut < cut_s:
                watch.poll(0.5)
            proxies[leader].restore()
            watch.wait_ended(runs, 600, alive=lambda: worker.poll() is None)
            done_s = round(time.monotonic() - cut, 1)
            return row(
                f"network to one node (leader of events[0], node {leader}) cut for {cut_s:.0f}s",
                runs,
                watch,
                world,
                n * effects_for(steps),
                all_done_s_after_cut=done_s,
                worker_survived=worker.poll() is None,
                worker_partitions_lost=partitions_lost(work / "net-w1.log"),
                **store_matches_kafka(deployment, dsn, sink),
            )
        finally:
            watch.close()
            client.close()
            for proc in (worker, sink):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=60)


def group_coordinator(settings: Settings) -> int:
    """The node id coordinating the workers' consumer group now."""
    admin = AdminClient(settings.kafka_common())
    group = settings.worker_group
    return int(admin.describe_consumer_groups([group], request_timeout=10)[group].result().coordinator.id)


def partitions_lost(worker_log: Path) -> int:
    """How many times the worker gave partitions up (revoked, or lost with its group session) and
    so had to rebuild them, its calls in flight in doubt: its ``partition_lost`` log lines."""
    return worker_log.read_text(errors="replace").count('"event": "partition_lost"')


def start_sink(settings: Settings, dsn: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "runtime.cli", "sink", "--dsn", dsn],
        cwd=ROOT,
        env=env_for(settings),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def store_matches_kafka(settings: Settings, dsn: str, sink: subprocess.Popen[bytes], timeout: float = 180.0) -> dict[str, Any]:
    """Wait until the store holds as many rows as the events topic has records (or ``timeout``),
    then compare them record by record: rows, duplicate (partition, offset) rows, offsets the
    store lacks (gaps) or has that Kafka does not."""
    in_kafka = sink_support.kafka_offsets(settings)
    expected = sum(len(offsets) for offsets in in_kafka.values())
    topic = settings.events_topic
    deadline = time.monotonic() + timeout
    rows = -1
    while time.monotonic() < deadline and sink.poll() is None:
        try:
            rows = int(sink_support.scalar(dsn, "SELECT count() FROM agentlog.events WHERE topic = {t:String}", {"t": topic}))
        except Exception:  # the store is being opened or migrated by the sink
            rows = -1
        if rows >= expected:
            break
        time.sleep(1.0)
    in_store = sink_support.store_offsets(dsn, topic)
    kafka_set = {(p, o) for p, offsets in in_kafka.items() for o in offsets}
    store_list = [(p, o) for p, offsets in in_store.items() for o in offsets]
    return {
        "kafka_records": expected,
        "clickhouse_rows": len(store_list),
        "duplicate_rows": len(store_list) - len(set(store_list)),
        "gaps": len(kafka_set - set(store_list)),
        "rows_not_in_kafka": len(set(store_list) - kafka_set),
        "sink_alive": sink.poll() is None,
    }


def worker_churn(base: Settings, work: Path, n: int = 200, steps: int = 20) -> dict[str, Any]:
    deployment = scratch_deployment(base, partitions=6, prefix="chaos")
    world = new_world(work / "workers.db")
    env = {"REFUND_WORLD_DB": str(world)}
    workers = {f"w{i}": start_worker(deployment, f"w{i}", work / f"workers-w{i}.log", **env) for i in (1, 2, 3)}
    client = Client(deployment)
    watch = Watch(deployment, client.serde)
    try:
        time.sleep(5)  # let the three share the partitions
        runs = submit(client, n, steps, "workers")
        while world_counts(world)[1] < n // 4:
            watch.poll(0.2)
        claims_before = claims(deployment)
        os.kill(workers["w2"].pid, signal.SIGKILL)
        workers["w2"].wait()
        killed = time.monotonic()
        workers["w4"] = start_worker(deployment, "w4", work / "workers-w4.log", **env)
        rebalance = wait_reclaimed(deployment, claims_before, killed)
        watch.wait_ended(runs, 600)
        return row(
            "3 workers under load: one SIGKILLed, one added",
            runs,
            watch,
            world,
            n * effects_for(steps),
            rebalance_s=rebalance,
        )
    finally:
        watch.close()
        client.close()
        for proc in workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)


def claims(settings: Settings) -> dict[int, tuple[int, str]]:
    """Partition -> (offset, worker) of its latest EpochClaimed."""
    serde = Serde(settings)
    found: dict[int, tuple[int, str]] = {}
    consumer = Consumer(reader_config(settings))
    try:
        for partition in range(settings.partitions):
            tp = TopicPartition(settings.events_topic, partition)
            _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            consumer.assign([TopicPartition(settings.events_topic, partition, 0)])
            position = 0
            while position < high:
                for message in consumer.consume(num_messages=5000, timeout=1):
                    if message.error() is not None:
                        continue
                    position = (message.offset() or 0) + 1
                    if message.key() is None and message.value():
                        event = serde.decode(message.value())
                        if isinstance(event, EpochClaimed):
                            found[partition] = (position - 1, event.worker)
    finally:
        consumer.close()
    return found


def wait_reclaimed(settings: Settings, before: dict[int, tuple[int, str]], since: float) -> float:
    """Seconds from ``since`` until every partition the killed worker held has a newer claim."""
    held = {p for p, (_, worker) in before.items() if worker == "w2"}
    while time.monotonic() - since < 120:
        now = claims(settings)
        if all(now.get(p, (-1, ""))[0] > before[p][0] for p in held):
            return round(time.monotonic() - since, 1)
        time.sleep(0.5)
    return float("nan")


def registry_outage(base: Settings, work: Path, n: int = 100, steps: int = 20, down_s: float = 30.0) -> dict[str, Any]:
    """A registry of its own SIGKILLed for ``down_s`` while ``n`` runs execute; during the outage
    fresh clients (a new process's Serde: the schema cache in the state folder) submit more."""
    from infra import postgres, registry

    reg = base.model_copy(
        update={
            "state_dir": work / "registry-state",
            "registry_port": int(os.environ.get("CHAOS_REGISTRY_PORT", "27081")),
            "postgres_port": int(os.environ.get("CHAOS_POSTGRES_PORT", "27432")),
        }
    )
    reg = reg.model_copy(update={"schema_registry_url": f"http://127.0.0.1:{reg.registry_port}"})
    postgres.start(reg, lambda _m: None)
    registry.start(reg, lambda _m: None)
    deployment = scratch_deployment(reg, partitions=3, prefix="chaos")
    world = new_world(work / "registry.db")
    worker = start_worker(deployment, "w1", work / "registry-w1.log", REFUND_WORLD_DB=str(world))
    client = Client(deployment)
    watch = Watch(deployment, client.serde)
    refused: list[str] = []
    try:
        runs = submit(client, n, steps, "registry")
        while world_counts(world)[1] < n // 4:
            watch.poll(0.2)
        pid = registry.running_pid(reg)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        during = 0
        while time.monotonic() - killed < down_s:
            fresh = Client(deployment)  # a cold client: its ids come from the cache or it says why not
            try:
                runs += submit(fresh, 5, steps, f"outage{during}")
                during += 5
            except Exception as error:  # counted and shown: the point is that it says what is wrong
                refused.append(f"{type(error).__name__}: {error}")
            finally:
                fresh.close()
            watch.poll(1.0)
        registry.start(reg, lambda _m: None)
        restarted_after = round(time.monotonic() - killed, 1)
        watch.wait_ended(runs, 600, alive=lambda: worker.poll() is None)
        return row(
            f"registry SIGKILLed for {down_s:.0f}s under load",
            runs,
            watch,
            world,
            len(runs) * effects_for(steps),
            submitted_during_outage=during,
            submissions_refused=len(refused),
            refusal=refused[0] if refused else "",
            registry_back_after_s=restarted_after,
            worker_survived=worker.poll() is None,
        )
    finally:
        watch.close()
        client.close()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        registry.stop(reg)
        postgres.stop(reg)
        shutil.rmtree(postgres.fallback_dir(reg), ignore_errors=True)


ROWS: dict[str, Callable[[Settings, Path], dict[str, Any]]] = {
    "crash": crash_points,
    "broker": broker_kill,
    "coordinator": coordinator_kill,
    "sink": sink_during_broker_kill,
    "registry": registry_outage,
    "workers": worker_churn,
    "network": network_cut,
}

COLUMNS = ("runs", "completed", "effects", "effect_attempts", "duplicate_effects", "lost_results", "in_doubt_runs")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| fault | " + " | ".join(COLUMNS) + " | other |", "|" + " --- |" * (len(COLUMNS) + 2)]
    for r in rows:
        other = {k: v for k, v in r.items() if k not in (*COLUMNS, "row")}
        cells = [str(r.get(c, "")) for c in COLUMNS]
        lines.append(f"| {r['row']} | " + " | ".join(cells) + f" | {json.dumps(other)} |")
    return "\n".join(lines)


def keep_logs(work: Path) -> None:
    """Copy the rows' worker and sink logs out of the scratch folder (removed with the cluster's
    data) into ``CHAOS_LOGS`` (default ``.agentlog/chaos-logs/<time>``): a failed row is
    explained by what its worker said."""
    where = Path(os.environ.get("CHAOS_LOGS") or Path(".agentlog/chaos-logs") / time.strftime("%Y%m%dT%H%M%S"))
    where.mkdir(parents=True, exist_ok=True)
    for path in work.glob("*.log"):
        shutil.copy2(path, where / path.name)
    print(f"chaos: logs kept in {where}", file=sys.stderr, flush=True)


def main() -> int:
    wanted = sys.argv[1:] or list(ROWS)
    unknown = [w for w in wanted if w not in ROWS]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; choose from {list(ROWS)}")
    cluster_support.BROKER_PORT = int(os.environ.get("CHAOS_KAFKA_PORT", cluster_support.BROKER_PORT))
    cluster_support.CONTROLLER_PORT = int(os.environ.get("CHAOS_CONTROLLER_PORT", cluster_support.CONTROLLER_PORT))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agentlog-chaos-") as scratch:
        work = Path(scratch)
        try:
            with cluster_support.private_cluster(load_settings(), work / "state") as base:
                for name in wanted:
                    started = time.monotonic()
                    result = ROWS[name](base, work)
                    result["seconds"] = round(time.monotonic() - started, 1)
                    rows.append(result)
                    print(json.dumps(result), flush=True)
        finally:
            keep_logs(work)
    print(table(rows))
    bad = [
        r
        for r in rows
        if r.get("duplicate_effects")
        or r.get("lost_results")
        or r.get("completed") != r.get("runs")
        or any(r.get(key) for key in ("duplicate_rows", "gaps", "rows_not_in_kafka"))
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
