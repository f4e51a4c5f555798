"""The local stack (infra/): up is idempotent, topics are made as configured.

These tests run their own stack -- a separate state folder and separate ports -- so they never
disturb the services on the default ports that the other integration tests use. Restarts and
down are in tests/chaos/test_infra_restarts.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource  # the public name is not in __all__

from infra import postgres, stack
from infra.errors import ServiceError
from runtime.config import Settings
from support.stack import PARTITIONS, private_stack, stack_settings

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A private stack for this module: brought up once, taken down (and its files removed) at the end."""
    with private_stack(tmp_path_factory.mktemp("infra-stack")) as cfg:
        yield cfg


def _pids(services: list[stack.ServiceInfo]) -> dict[str, int | None]:
    return {s.name: s.pid for s in services}


@pytest.mark.timeout(600)
def test_up_twice_is_idempotent(settings: Settings) -> None:
    first = stack.up(settings)
    assert [s.name for s in first] == ["postgresql", "schema-registry", "kafka"]
    assert all(s.running and s.pid is not None for s in first), first
    messages: list[str] = []
    second = stack.up(settings, messages.append)
    assert _pids(second) == _pids(first)
    assert not [m for m in messages if m.startswith("starting")], messages
    assert _pids(stack.status(settings)) == _pids(first)
    for service in first:
        assert service.log_path.is_file(), service


@pytest.mark.timeout(600)
def test_postgres_data_is_reachable_by_the_postgres_user(settings: Settings) -> None:
    stack.up(settings)
    home = postgres.home_dir(settings)
    check = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(home)], check=False)
    assert check.returncode == 0, f"the postgres user cannot reach {home}"
    reach_state = subprocess.run(
        ["runuser", "-u", "postgres", "--", "test", "-x", str(settings.state_dir)], check=False
    )
    if reach_state.returncode != 0:  # pytest's tmp folders are 0700: the cluster lives under /var/tmp
        assert (settings.state_dir / "postgres").is_symlink()
        assert home == postgres.fallback_dir(settings)


@pytest.mark.timeout(600)
def test_topics_have_the_configured_partitions_and_a_mismatch_is_refused(settings: Settings) -> None:
    stack.up(settings)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    meta = admin.list_topics(timeout=30)
    for name in (settings.commands_topic, settings.events_topic, settings.checkpoints_topic):
        assert len(meta.topics[name].partitions) == PARTITIONS, name
    resources = [
        ConfigResource("topic", settings.events_topic),
        ConfigResource("topic", settings.checkpoints_topic),
    ]
    events, checkpoints = (future.result() for future in admin.describe_configs(resources).values())
    assert events["retention.ms"].value == "-1"
    assert checkpoints["cleanup.policy"].value == "compact"

    with pytest.raises(ServiceError, match=r"partitions") as caught:
        stack.up(stack_settings(settings.state_dir, partitions=PARTITIONS + 1))
    assert settings.events_topic in str(caught.value)
