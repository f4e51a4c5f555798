"""docker-compose.yml stays in step with the code: ports, names and settings match the defaults."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from runtime.cli.main import build_parser
from runtime.config import Settings, load_settings
from support.services import ROOT

pytestmark = pytest.mark.unit
COMPOSE = ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def host_ports(service: dict[str, Any]) -> set[int]:
    return {int(str(p).split(":")[0]) for p in service.get("ports", [])}


def setting_defaults() -> Settings:
    """The settings' own defaults, whatever AGENTLOG_* this process runs with."""
    return Settings.model_construct()


def test_host_ports_match_the_configuration_defaults(compose: dict[str, Any]) -> None:
    defaults = setting_defaults()
    services = compose["services"]
    assert int(defaults.bootstrap_servers.rsplit(":", 1)[1]) in host_ports(services["kafka"])
    assert int(defaults.schema_registry_url.rsplit(":", 1)[1]) in host_ports(services["schema-registry"])
    assert 8123 in host_ports(services["clickhouse"])
    advertised = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert defaults.bootstrap_servers in advertised


def test_agentlog_services_use_valid_settings_and_the_default_topic_names(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    services = compose["services"]
    for name in ("init", "worker", "sink"):
        env = services[name]["environment"]
        for key, value in env.items():
            monkeypatch.setenv(key, str(value))
        settings = load_settings()  # an unknown AGENTLOG_* key would raise here
        defaults = setting_defaults()
        assert settings.commands_topic == defaults.commands_topic
        assert settings.events_topic == defaults.events_topic
        assert settings.checkpoints_topic == defaults.checkpoints_topic
        assert settings.partitions == defaults.partitions
        assert settings.bootstrap_servers.split(":")[0] == "kafka"
        assert settings.schema_registry_url.startswith("http://schema-registry:")
        assert services[name]["build"] == "."


def test_service_commands_are_real_cli_commands(compose: dict[str, Any]) -> None:
    parser = build_parser()
    services = compose["services"]
    worker = parser.parse_args(services["worker"]["command"])
    assert worker.command == "worker" and worker.app == "examples.refund_agent:app"
    sink = parser.parse_args(services["sink"]["command"])
    assert sink.command == "sink"
    assert parser.parse_args(["infra", "topics"]).func.__name__ == "cmd_topics"
    assert parser.parse_args(["schemas", "register"]).func.__name__ == "_register"
    assert (COMPOSE.parent / "Dockerfile").exists()
