"""A private local stack (infra/) on its own ports and state folder, for the tests of infra itself.

It never disturbs the services on the default ports that the other tests use.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from infra import postgres, process, stack
from runtime.config import Settings, load_settings

KAFKA_PORT = 19092
KAFKA_CONTROLLER_PORT = 19093
REGISTRY_PORT = 18081
POSTGRES_PORT = 25432
PARTITIONS = 3
ALL_PORTS = (KAFKA_PORT, KAFKA_CONTROLLER_PORT, REGISTRY_PORT, POSTGRES_PORT)


def stack_settings(state: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "state_dir": state,
        "kafka_port": KAFKA_PORT,
        "kafka_controller_port": KAFKA_CONTROLLER_PORT,
        "registry_port": REGISTRY_PORT,
        "postgres_port": POSTGRES_PORT,
        "bootstrap_servers": f"127.0.0.1:{KAFKA_PORT}",
        "schema_registry_url": f"http://127.0.0.1:{REGISTRY_PORT}",
        "partitions": PARTITIONS,
    }
    values.update(overrides)
    return load_settings(**values)


@contextmanager
def private_stack(state: Path) -> Iterator[Settings]:
    """A stack brought up in ``state``, taken down (and its files removed) at the end."""
    busy = [port for port in ALL_PORTS if process.port_open("127.0.0.1", port)]
    if busy:
        raise AssertionError(
            f"ports {busy} are in use: a stack of an earlier, aborted run of the infra tests may still be up"
        )
    cfg = stack_settings(state)
    try:
        stack.up(cfg)
        yield cfg
    finally:
        stack.down(cfg)
        shutil.rmtree(postgres.fallback_dir(cfg), ignore_errors=True)
