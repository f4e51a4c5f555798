"""Apache Kafka in KRaft mode on 127.0.0.1: one node, or a cluster of several (each node a broker
and a controller in one JVM).

Jars come from Maven Central through ``infra/pom.xml`` (``mvn dependency:copy-dependencies``)
into the per-user cache; data, config and log live under ``<state_dir>/kafka/`` (one node) or
``<state_dir>/kafka/node-<id>/`` (a cluster).

A cluster of N nodes (``agentlog infra up --brokers N``): node i (from 1) listens on
``kafka_port + i - 1``; its controller on ``kafka_controller_port + i - 1``, or on
``kafka_port + 100 + i - 1`` where that range would overlap the brokers' ports (the defaults,
9092 and 9093, do). All N are voters of the controller quorum. With 3 or more nodes every topic
gets replication factor 3, ``min.insync.replicas=2`` and no unclean leader election, the
internal topics too, so an acknowledged (``acks=all``) record is on two nodes at least and a
leader's death loses nothing. The node count is fixed when the storage is formatted and kept in
``<state_dir>/kafka/cluster.json``: a later ``infra up`` brings up the same cluster.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from infra import kafka_auth, kafka_tls, process
from infra.errors import ServiceError
from infra.paths import cache_root, file_lock, state_dir
from infra.progress import files_under, run_step
from runtime.config import Settings

SERVICE = "kafka"
POM = Path(__file__).with_name("pom.xml")
EXPECTED_JARS = 90  # what infra/pom.xml resolves to, for the progress line only
HOST = "127.0.0.1"
HEAP = "-Xmx768m"
OPEN_FILES = 100_000  # descriptors of a node (Kafka's docs: "at least 100000")
CLUSTER_HEAP = "-Xmx512m"  # per node of a cluster: three JVMs share a small machine
CONTROLLER_OFFSET = 100  # a cluster's controllers sit this far above its brokers when their ranges clash
START_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0

# librdkafka complains loudly while the broker is still starting; the readiness probe is quiet.
_QUIET = logging.getLogger("agentlog.infra.kafka.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def kafka_version() -> str:
    """The Kafka version pinned in ``infra/pom.xml``."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not node.text:
        raise ServiceError(SERVICE, f"{POM} does not pin <kafka.version>")
    return node.text.strip()


def _pom_digest() -> str:
    """A digest of what the pom asks for (elements and values; comments and layout do not count)."""
    canonical = "\n".join(f"{el.tag}={(el.text or '').strip()}" for el in ET.parse(POM).getroot().iter())
    return hashlib.sha256(canonical.encode()).hexdigest()


def jars_dir() -> Path:
    """Where the jars of the pinned pom are cached: keyed by Kafka version and the pom's digest.

    A changed pom gets a new folder, so the jars of a broker that is still running are never replaced.
    """
    return cache_root() / f"kafka-{kafka_version()}" / f"libs-{_pom_digest()[:12]}"


def ensure_jars(progress: Callable[[str], None]) -> Path:
    """Fetch Kafka's jars with mvn into the cache unless already there; return the jar folder."""
    libs = jars_dir()
    home = libs.parent
    marker = home / f"{libs.name}.complete"  # written last: the folder is whole
    with file_lock(home.parent / f"{home.name}.lock"):
        if marker.is_file() and libs.is_dir():
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise ServiceError(
                SERVICE, "Maven (mvn) is not installed; it fetches Kafka's jars (apt-get install maven)"
            )
        progress(
            f"downloading Apache Kafka {kafka_version()} jars with mvn into {libs} (about a minute when cold)"
        )
        home.mkdir(parents=True, exist_ok=True)
        marker.unlink(missing_ok=True)
        staging = home / f"{libs.name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        mvn_log = home / "mvn.log"
        with mvn_log.open("wb") as log:
            code = run_step(
                [
                    mvn,
                    "-q",
                    "-B",
                    "-f",
                    str(POM),
                    "dependency:copy-dependencies",
                    f"-DoutputDirectory={staging}",
                ],
                what="mvn fetching the Kafka jars",
                progress=progress,
                log=log,
                measure=lambda: _jars_so_far(staging),
            )
        if code != 0:
            raise ServiceError(SERVICE, f"mvn could not fetch the Kafka jars (exit {code})", mvn_log)
        if not list(staging.glob("kafka_2.13-*.jar")):
            raise ServiceError(SERVICE, f"mvn finished but left no kafka_2.13 jar in {staging}", mvn_log)
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        marker.write_text(_pom_digest() + "\n")
    return libs


def _jars_so_far(staging: Path) -> str:
    # mvn resolves into ~/.m2 first, then copies; both show how far it is.
    resolved, resolved_bytes = files_under(Path.home() / ".m2" / "repository", "*.jar")
    copied, _ = files_under(staging, "*.jar")
    return f"{resolved} jars in ~/.m2 ({resolved_bytes >> 20} MB), {copied} of about {EXPECTED_JARS} copied"


def cluster_home(settings: Settings) -> Path:
    return state_dir(settings) / "kafka"


def layout_path(settings: Settings) -> Path:
    return cluster_home(settings) / "cluster.json"


def _layout(settings: Settings) -> dict[str, object]:
    try:
        data = json.loads(layout_path(settings).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ServiceError(SERVICE, f"{layout_path(settings)} is unreadable: {exc}") from exc
    return data if isinstance(data, dict) else {}


def node_count(settings: Settings) -> int:
    """How many nodes this state folder's cluster has (1 unless ``configure`` said otherwise)."""
    nodes = _layout(settings).get("nodes", 1)
    return nodes if isinstance(nodes, int) and nodes >= 1 else 1


def is_secure(settings: Settings) -> bool:
    """Whether this state folder's cluster listens with SASL/SCRAM (infra.kafka_auth)."""
    return _layout(settings).get("secure") is True


def configure(settings: Settings, brokers: int | None, *, secure: bool = False, tls: bool = False) -> int:
    """Fix the cluster's node count (``None``: keep what the state folder has, else 1) and, with
    ``secure``, make it a SASL/SCRAM cluster; return the node count.

    Raises ServiceError if the state folder already holds a formatted cluster of another size (its
    controller quorum was formatted with its own voters), or a plaintext one and ``secure`` is asked
    (its nodes' SCRAM user is added when the storage is formatted)."""
    if tls and not secure and not is_secure(settings):
        raise ServiceError(SERVICE, "--tls needs --secure (TLS carries the SASL/SCRAM listener)")
    if tls:  # the certificates first: the protocol the settings must name follows from them
        kafka_tls.ensure_certificates(cluster_home(settings), HOST)
    if secure and not is_secure(settings):
        kafka_auth.client_credentials(settings, cluster_home(settings))  # refuse before formatting anything
        if any((n.data_dir / "meta.properties").is_file() for n in nodes(settings)):
            raise ServiceError(
                SERVICE,
                f"the state folder {state_dir(settings)} holds a plaintext Kafka cluster; it cannot become "
                "--secure (the nodes' SCRAM user is added when the storage is formatted): use another "
                "state folder (--state-dir or AGENTLOG_STATE_DIR)",
            )
        cluster_home(settings).mkdir(parents=True, exist_ok=True)
        layout_path(settings).write_text(json.dumps({**_layout(settings), "secure": True}) + "\n")
    current = node_count(settings)
    if brokers is None or brokers == current:
        return current
    if brokers < 1:
        raise ServiceError(SERVICE, f"--brokers must be at least 1, not {brokers}")
    formatted = [n.node_id for n in nodes(settings) if (n.data_dir / "meta.properties").is_file()]
    if formatted:
        raise ServiceError(
            SERVICE,
            f"the state folder {state_dir(settings)} holds a {current}-node Kafka cluster; it cannot become "
            f"{brokers} nodes (its controller quorum is formatted): use another state folder "
            "(--state-dir or AGENTLOG_STATE_DIR), or `agentlog infra down` and remove its kafka/ folder",
        )
    cluster_home(settings).mkdir(parents=True, exist_ok=True)
    layout_path(settings).write_text(json.dumps({**_layout(settings), "nodes": brokers}) + "\n")
    return brokers


def advertise_through(settings: Settings, ports: dict[int, int]) -> None:
    """Make node ``id`` advertise ``127.0.0.1:ports[id]`` to clients and the other nodes instead of
    its own port: a TCP proxy there (one you can cut) sits between the node and everyone who
    reaches it through metadata. Takes effect at the node's next start."""
    cluster_home(settings).mkdir(parents=True, exist_ok=True)
    advertised = {str(node_id): port for node_id, port in ports.items()}
    layout_path(settings).write_text(json.dumps({**_layout(settings), "advertised_ports": advertised}) + "\n")


def advertised_port(settings: Settings, node: Node) -> int:
    """The port ``node`` tells clients to reach it on (its own unless ``advertise_through`` says otherwise)."""
    ports = _layout(settings).get("advertised_ports")
    port = ports.get(str(node.node_id)) if isinstance(ports, dict) else None
    return port if isinstance(port, int) else node.port


@dataclass(frozen=True)
class Node:
    """One KRaft node of the local cluster (broker and controller in one JVM)."""

    node_id: int
    port: int
    controller_port: int
    home: Path

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home / "kafka.log"

    @property
    def pid_path(self) -> Path:
        return self.home / "kafka.pid"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    def running_pid(self) -> int | None:
        return process.read_pid(self.pid_path)


def nodes(settings: Settings) -> list[Node]:
    """The nodes of this state folder's cluster, by node id."""
    count = node_count(settings)
    home = cluster_home(settings)
    if count == 1:  # the layout of a single node, as it always was
        return [Node(1, settings.kafka_port, settings.kafka_controller_port, home)]
    brokers = range(settings.kafka_port, settings.kafka_port + count)
    controllers = range(settings.kafka_controller_port, settings.kafka_controller_port + count)
    clash = set(brokers) & set(controllers)
    first_controller = settings.kafka_port + CONTROLLER_OFFSET if clash else settings.kafka_controller_port
    return [
        Node(i + 1, settings.kafka_port + i, first_controller + i, home / f"node-{i + 1}")
        for i in range(count)
    ]


def home_dir(settings: Settings) -> Path:
    return nodes(settings)[0].home


def log_path(settings: Settings) -> Path:
    """The first node's log (the one a single node has)."""
    return nodes(settings)[0].log_path


def pid_path(settings: Settings) -> Path:
    return nodes(settings)[0].pid_path


def data_dir(settings: Settings) -> Path:
    return nodes(settings)[0].data_dir


def bootstrap(settings: Settings) -> str:
    """``host:port`` of every local node, comma-separated (the value for AGENTLOG_BOOTSTRAP_SERVERS)."""
    return ",".join(node.address for node in nodes(settings))


# How soon the controller quorum fences a node that stopped heartbeating, and so how soon the
# partitions it led -- and the consumer groups it coordinated -- move (Kafka's defaults: 9 s and
# 2 s). A worker that cannot heartbeat its group coordinator for its session timeout (10 s, a
# heartbeat every 2 s) drops its partitions (librdkafka reports them lost) and rebuilds them when it
# rejoins, its calls in flight in doubt; at the defaults the coordinator moves 9 s after its node
# died plus an election, later than that. Fenced in 3 s, it moves well inside the session.
FAST_FENCING = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


def server_properties(settings: Settings, node: Node | None = None) -> str:
    """A node's configuration. One node: replication factor 1 everywhere. A cluster of 3 or more:
    replication factor 3, min.insync.replicas 2, no unclean leader election (see the module
    docstring). No auto-created topics either way."""
    cluster = nodes(settings)
    node = node or cluster[0]
    replicas = min(3, len(cluster))
    min_isr = 2 if replicas >= 3 else 1
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in cluster)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{advertised_port(settings, node)}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.data_dir),
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(min_isr),
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": str(replicas),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
    if len(cluster) > 1:
        props.update(FAST_FENCING)
    if is_secure(settings):
        props.update(
            kafka_auth.listener_properties(cluster_home(settings), node.port, node.controller_port, HOST)
        )
        listener = kafka_auth.protocol(cluster_home(settings))
        props["advertised.listeners"] = f"{listener}://{HOST}:{advertised_port(settings, node)}"
    lines = ["# Written by agentlog (infra/kafka.py) at every start; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by agentlog (infra/kafka.py): everything to stdout, which goes to kafka.log. -->
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="out"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
    <Logger name="org.apache.kafka.storage.internals.log" level="WARN"/>
    <!-- the full config dumps (thousands of lines per start); server.properties is next to this file -->
    <Logger name="org.apache.kafka.common.config.AbstractConfig" level="WARN"/>
  </Loggers>
</Configuration>
"""


def _write_configs(settings: Settings, node: Node) -> tuple[Path, Path]:
    node.home.mkdir(parents=True, exist_ok=True)
    props = node.home / "server.properties"
    props.write_text(server_properties(settings, node))
    log4j = node.home / "log4j2.xml"
    log4j.write_text(_LOG4J2)
    return props, log4j


def _java(libs: Path, log4j: Path, node: Node, *, heap: str, options: Sequence[str] = ()) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise ServiceError(SERVICE, "java is not installed (Kafka needs Java 17 or newer)")
    return [
        java,
        heap,
        *options,
        # kafka-run-class.sh's own GC settings: short pauses matter more than throughput here,
        # since every agent step waits for an ack.
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-XX:+ExplicitGCInvokesConcurrent",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dkafka.logs.dir={node.home}",
        "-cp",
        f"{libs}/*",
    ]


def new_cluster_id() -> str:
    """A random Kafka cluster id (URL-safe base64 of a UUID, as ``kafka-storage random-uuid``)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _cluster_id(settings: Settings) -> str:
    """The id every node of the cluster is formatted with (kept in cluster.json)."""
    layout = _layout(settings)
    cid = layout.get("cluster_id")
    if isinstance(cid, str) and cid:
        return cid
    cid = new_cluster_id()
    cluster_home(settings).mkdir(parents=True, exist_ok=True)
    layout_path(settings).write_text(
        json.dumps({**layout, "nodes": node_count(settings), "cluster_id": cid}) + "\n"
    )
    return cid


def _format_once(
    settings: Settings, node: Node, libs: Path, props: Path, log4j: Path, progress: Callable[[str], None]
) -> None:
    if (node.data_dir / "meta.properties").is_file():
        return
    progress(f"formatting Kafka storage in {node.data_dir}")
    cid = _cluster_id(settings) if node_count(settings) > 1 else new_cluster_id()
    # The tool runs a second: the optimising compiler would only cost it CPU (about 40 % of it).
    java = _java(libs, log4j, node, heap="-Xmx256m", options=["-XX:TieredStopAtLevel=1"])
    tool = ["kafka.tools.StorageTool", "format", "-t", cid, "-c", str(props)]
    if is_secure(settings):
        tool += kafka_auth.format_arguments(cluster_home(settings))
    shown = kafka_auth.redact_arguments([*java, *tool], cluster_home(settings))
    # The main class and its arguments go in a java @argfile (mode 0600, removed at once): the
    # nodes' SCRAM password among them would otherwise show in every process listing (ps).
    argfile = node.home / "format.args"
    argfile.unlink(missing_ok=True)
    fd = os.open(argfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as args_out:
        # One argument a line, quoted (java's argfile syntax takes JSON's escapes): paths may hold spaces.
        args_out.write("\n".join(json.dumps(arg, ensure_ascii=False) for arg in tool) + "\n")
    try:
        with node.log_path.open("ab") as out:
            out.write(f"==== agentlog formats the storage: {' '.join(shown)}\n".encode())
            out.flush()
            done = subprocess.run(
                [*java, f"@{argfile}"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
    finally:
        argfile.unlink(missing_ok=True)
    if done.returncode != 0:
        raise ServiceError(SERVICE, f"formatting the storage failed (exit {done.returncode})", node.log_path)


def running_pid(settings: Settings) -> int | None:
    """The first node's pid, if it runs (a cluster's nodes: ``running_pids``)."""
    return nodes(settings)[0].running_pid()


def running_pids(settings: Settings) -> dict[int, int | None]:
    """Node id -> pid (None when stopped)."""
    return {node.node_id: node.running_pid() for node in nodes(settings)}


def probe_auth(settings: Settings) -> dict[str, Any]:
    """librdkafka settings agentlog's own probes of the local nodes add: the nodes' SCRAM user on a
    secure cluster, nothing otherwise."""
    return kafka_auth.broker_client_config(cluster_home(settings)) if is_secure(settings) else {}


def metadata_ready(settings: Settings, timeout: float = 2.0, node: Node | None = None) -> bool:
    """Whether ``node`` (default the first) answers a metadata request listing every node."""
    address = (node or nodes(settings)[0]).address
    admin = AdminClient({"bootstrap.servers": address, **probe_auth(settings)}, logger=_QUIET)
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return len(meta.brokers) >= node_count(settings)


def wait_ready(
    settings: Settings, pid: int | None, timeout: float = START_TIMEOUT, node: Node | None = None
) -> None:
    """Wait until the node's port is open and it answers metadata requests listing every node."""
    node = node or nodes(settings)[0]
    process.wait_for_port(SERVICE, HOST, node.port, timeout, log_path=node.log_path, pid=pid)
    process.wait_until(
        SERVICE,
        lambda: metadata_ready(settings, node=node),
        what=f"the broker on {node.address} to answer metadata requests (with {node_count(settings)} node(s))",
        timeout=timeout,
        log_path=node.log_path,
        pid=pid,
    )


def start_node(settings: Settings, node: Node, progress: Callable[[str], None]) -> int:
    """Start one node unless it runs; do not wait for it; return its pid."""
    pid = node.running_pid()
    if pid is not None:
        return pid
    libs = ensure_jars(progress)
    process.ensure_port_free(SERVICE, HOST, node.port, node.log_path)
    process.ensure_port_free(SERVICE, HOST, node.controller_port, node.log_path)
    props, log4j = _write_configs(settings, node)
    _format_once(settings, node, libs, props, log4j, progress)
    progress(
        f"starting Kafka node {node.node_id} on {node.address} (controller {HOST}:{node.controller_port})"
    )
    heap = HEAP if node_count(settings) == 1 else CLUSTER_HEAP
    argv = [
        *_java(libs, log4j, node, heap=heap, options=settings.kafka_jvm_options),
        "kafka.Kafka",
        str(props),
    ]
    pid = process.start_detached(argv, log_path=node.log_path, pid_path=node.pid_path, cwd=node.home)
    # A node keeps a few files open per partition: Kafka's docs ask for at least 100,000
    # descriptors; a usual default (1,024, or 20,000 here) ends in "Too many open files".
    process.raise_open_files(pid, OPEN_FILES)
    return pid


def start(settings: Settings, progress: Callable[[str], None]) -> int:
    """Start every node that is not running -- all before waiting on any, since a controller quorum
    needs a majority to elect -- and wait until each serves metadata; return the first one's pid."""
    started: dict[int, int] = {}
    cluster = nodes(settings)
    for node in cluster:
        was_running = node.running_pid() is not None
        pid = start_node(settings, node, progress)
        if not was_running:
            started[node.node_id] = pid
    try:
        for node in cluster:
            wait_ready(settings, node.running_pid(), node=node)
    except ServiceError:
        for node in cluster:
            if node.node_id in started:
                process.stop_pid(started[node.node_id], timeout=10.0)
                node.pid_path.unlink(missing_ok=True)
        raise
    if is_secure(settings):
        kafka_auth.ensure_client_user(settings, cluster_home(settings), bootstrap(settings))
    first = cluster[0].running_pid()
    if first is None:
        raise ServiceError(SERVICE, f"node 1 on {cluster[0].address} is not running", cluster[0].log_path)
    return first


def stop(settings: Settings) -> int | None:
    """Stop every node (SIGTERM: controlled shutdown; SIGKILL after a minute); return the first
    one's pid if it ran. The nodes are signalled together: stopped one by one, the last ones
    would wait out their controlled shutdown without a controller quorum."""
    cluster = nodes(settings)
    pids = {node.node_id: node.running_pid() for node in cluster}
    try:
        for pid in pids.values():
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        for node in cluster:
            process.stop_pid_file(node.pid_path, sig=signal.SIGTERM, timeout=STOP_TIMEOUT)
    except OSError as exc:
        raise ServiceError(SERVICE, f"could not stop: {exc}", log_path(settings)) from exc
    return pids[cluster[0].node_id]
