"""One Apache Kafka KRaft node (broker and controller in one JVM) on 127.0.0.1.

Jars come from Maven Central through ``infra/pom.xml`` (``mvn dependency:copy-dependencies``)
into the per-user cache; data, config and log live under ``<state_dir>/kafka/``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import shutil
import signal
import subprocess
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from infra import process
from infra.errors import ServiceError
from infra.paths import cache_root, file_lock, state_dir
from runtime.config import Settings

SERVICE = "kafka"
POM = Path(__file__).with_name("pom.xml")
HOST = "127.0.0.1"
HEAP = "-Xmx768m"
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
            done = subprocess.run(
                [
                    mvn,
                    "-q",
                    "-B",
                    "-f",
                    str(POM),
                    "dependency:copy-dependencies",
                    f"-DoutputDirectory={staging}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode != 0:
            raise ServiceError(
                SERVICE, f"mvn could not fetch the Kafka jars (exit {done.returncode})", mvn_log
            )
        if not list(staging.glob("kafka_2.13-*.jar")):
            raise ServiceError(SERVICE, f"mvn finished but left no kafka_2.13 jar in {staging}", mvn_log)
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        marker.write_text(_pom_digest() + "\n")
    return libs


def home_dir(settings: Settings) -> Path:
    return state_dir(settings) / "kafka"


def log_path(settings: Settings) -> Path:
    return home_dir(settings) / "kafka.log"


def pid_path(settings: Settings) -> Path:
    return home_dir(settings) / "kafka.pid"


def data_dir(settings: Settings) -> Path:
    return home_dir(settings) / "data"


def bootstrap(settings: Settings) -> str:
    """``host:port`` of the local broker."""
    return f"{HOST}:{settings.kafka_port}"


def server_properties(settings: Settings) -> str:
    """The broker's configuration: one node, replication factor 1 everywhere, no auto-created topics."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{settings.kafka_controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{settings.kafka_port},CONTROLLER://{HOST}:{settings.kafka_controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{settings.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir(settings)),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }
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


def _write_configs(settings: Settings) -> tuple[Path, Path]:
    home = home_dir(settings)
    home.mkdir(parents=True, exist_ok=True)
    props = home / "server.properties"
    props.write_text(server_properties(settings))
    log4j = home / "log4j2.xml"
    log4j.write_text(_LOG4J2)
    return props, log4j


def _java(libs: Path, log4j: Path, settings: Settings, *, heap: str) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise ServiceError(SERVICE, "java is not installed (Kafka needs Java 17 or newer)")
    return [
        java,
        heap,
        # kafka-run-class.sh's own GC settings: short pauses matter more than throughput here,
        # since every agent step waits for an ack.
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-XX:+ExplicitGCInvokesConcurrent",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dkafka.logs.dir={home_dir(settings)}",
        "-cp",
        f"{libs}/*",
    ]


def new_cluster_id() -> str:
    """A random Kafka cluster id (URL-safe base64 of a UUID, as ``kafka-storage random-uuid``)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _format_once(
    settings: Settings, libs: Path, props: Path, log4j: Path, progress: Callable[[str], None]
) -> None:
    if (data_dir(settings) / "meta.properties").is_file():
        return
    progress(f"formatting Kafka storage in {data_dir(settings)}")
    argv = [*_java(libs, log4j, settings, heap="-Xmx256m"), "kafka.tools.StorageTool", "format"]
    argv += ["-t", new_cluster_id(), "-c", str(props)]
    log = log_path(settings)
    with log.open("ab") as out:
        out.write(f"==== agentlog formats the storage: {' '.join(argv)}\n".encode())
        out.flush()
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        raise ServiceError(SERVICE, f"formatting the storage failed (exit {done.returncode})", log)


def running_pid(settings: Settings) -> int | None:
    return process.read_pid(pid_path(settings))


def metadata_ready(settings: Settings, timeout: float = 2.0) -> bool:
    """Whether the broker answers a metadata request and lists itself."""
    admin = AdminClient({"bootstrap.servers": bootstrap(settings)}, logger=_QUIET)
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(meta.brokers)


def wait_ready(settings: Settings, pid: int | None, timeout: float = START_TIMEOUT) -> None:
    """Wait until the port is open and the broker answers metadata requests."""
    process.wait_for_port(SERVICE, HOST, settings.kafka_port, timeout, log_path=log_path(settings), pid=pid)
    process.wait_until(
        SERVICE,
        lambda: metadata_ready(settings),
        what=f"the broker on {bootstrap(settings)} to answer metadata requests",
        timeout=timeout,
        log_path=log_path(settings),
        pid=pid,
    )


def start(settings: Settings, progress: Callable[[str], None]) -> int:
    """Start the node unless it is running; wait until it serves metadata; return its pid."""
    pid = running_pid(settings)
    if pid is not None:
        wait_ready(settings, pid)
        return pid
    libs = ensure_jars(progress)
    log = log_path(settings)
    process.ensure_port_free(SERVICE, HOST, settings.kafka_port, log)
    process.ensure_port_free(SERVICE, HOST, settings.kafka_controller_port, log)
    props, log4j = _write_configs(settings)
    _format_once(settings, libs, props, log4j, progress)
    progress(f"starting Kafka on {bootstrap(settings)}")
    argv = [*_java(libs, log4j, settings, heap=HEAP), "kafka.Kafka", str(props)]
    pid = process.start_detached(argv, log_path=log, pid_path=pid_path(settings), cwd=home_dir(settings))
    try:
        wait_ready(settings, pid)
    except ServiceError:
        process.stop_pid(pid, timeout=10.0)
        pid_path(settings).unlink(missing_ok=True)
        raise
    return pid


def stop(settings: Settings) -> int | None:
    """Stop the node (SIGTERM: controlled shutdown; SIGKILL after a minute); return its pid if it ran."""
    try:
        return process.stop_pid_file(pid_path(settings), sig=signal.SIGTERM, timeout=STOP_TIMEOUT)
    except OSError as exc:
        raise ServiceError(SERVICE, f"could not stop: {exc}", log_path(settings)) from exc
