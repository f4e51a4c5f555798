"""A private 3-node KRaft cluster (infra.kafka) on ports of its own, for the tests that kill brokers."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka.admin import AdminClient

from infra import kafka, process
from runtime.config import Settings
from support.wait import wait_until

BROKER_PORT = 27092  # nodes on 27092-27094
CONTROLLER_PORT = 27192  # their controllers on 27192-27194
NODES = 3


@contextmanager
def private_cluster(base: Settings, state: Path) -> Iterator[Settings]:
    """``base`` (its registry) in front of a 3-node cluster started in ``state``; stopped at the end."""
    settings = base.model_copy(
        update={"state_dir": state, "kafka_port": BROKER_PORT, "kafka_controller_port": CONTROLLER_PORT}
    )
    kafka.configure(settings, NODES)
    ports = [p for n in kafka.nodes(settings) for p in (n.port, n.controller_port)]
    busy = [p for p in ports if process.port_open("127.0.0.1", p)]
    if busy:
        raise AssertionError(f"ports {busy} are in use: a cluster of an earlier, aborted run may still be up")
    settings = settings.model_copy(update={"bootstrap_servers": kafka.bootstrap(settings)})
    try:
        kafka.start(settings, lambda _m: None)
        yield settings
    finally:
        kafka.stop(settings)


def leader_of(settings: Settings, topic: str, partition: int) -> int:
    """The node id leading ``topic``'s ``partition`` now."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    return int(admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader)


def kill_node(settings: Settings, node_id: int) -> int:
    """SIGKILL one node; its pid."""
    node = next(n for n in kafka.nodes(settings) if n.node_id == node_id)
    pid = node.running_pid()
    assert pid is not None, f"node {node_id} is not running"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not process.pid_alive(pid), 10, f"node {node_id} (pid {pid}) to die of SIGKILL")
    return pid


def restart_node(settings: Settings, node_id: int) -> None:
    node = next(n for n in kafka.nodes(settings) if n.node_id == node_id)
    pid = kafka.start_node(settings, node, lambda _m: None)
    kafka.wait_ready(settings, pid, node=node)
