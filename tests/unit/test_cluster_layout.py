"""The layout of a local cluster (infra.kafka): ports, quorum, replication settings (pure logic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra import kafka
from infra.errors import ServiceError
from runtime.config import Settings

pytestmark = pytest.mark.unit


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_one_node_keeps_its_old_layout_and_replication_factor_one(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    assert kafka.configure(settings, None) == 1
    (node,) = kafka.nodes(settings)
    assert (node.port, node.controller_port, node.home) == (9092, 9093, tmp_path / "kafka")
    config = props(kafka.server_properties(settings, node))
    assert config["default.replication.factor"] == "1" and config["min.insync.replicas"] == "1"


def test_three_nodes_get_a_quorum_of_three_rf3_and_two_in_sync(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    kafka.configure(settings, 3)
    cluster = kafka.nodes(settings)
    # The default controller port (9093) would clash with the brokers' 9092-9094: they move up 100.
    assert [(n.node_id, n.port, n.controller_port) for n in cluster] == [
        (1, 9092, 9192),
        (2, 9093, 9193),
        (3, 9094, 9194),
    ]
    assert kafka.bootstrap(settings) == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    config = props(kafka.server_properties(settings, cluster[1]))
    assert config["node.id"] == "2"
    assert config["controller.quorum.voters"] == "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"
    assert config["listeners"] == "PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9193"
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
    ):
        assert config[key] == "3", key
    assert config["min.insync.replicas"] == "2" and config["transaction.state.log.min.isr"] == "2"
    assert config["unclean.leader.election.enable"] == "false"
    # A dead node's group coordinator must move well inside a worker's 10 s session (kafka.FAST_FENCING).
    assert int(config["broker.session.timeout.ms"]) <= 10_000 // 3
    assert kafka.configure(Settings(state_dir=tmp_path), None) == 3, "a later `infra up` keeps the size"


def test_controller_ports_that_do_not_clash_are_kept(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, kafka_port=27092, kafka_controller_port=27192)
    kafka.configure(settings, 3)
    assert [n.controller_port for n in kafka.nodes(settings)] == [27192, 27193, 27194]


def test_a_formatted_cluster_cannot_change_size(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    kafka.configure(settings, 3)
    (kafka.nodes(settings)[0].data_dir).mkdir(parents=True)
    (kafka.nodes(settings)[0].data_dir / "meta.properties").write_text("cluster.id=x\n")
    with pytest.raises(ServiceError, match="holds a 3-node Kafka cluster"):
        kafka.configure(settings, 1)


SASL = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "agent",
    "sasl.password": "client-secret",
}


def test_a_secure_node_listens_with_scram_and_keeps_the_client_password_out_of_its_files(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path, kafka=SASL)
    kafka.configure(settings, 1, secure=True)
    config = props(kafka.server_properties(settings))
    assert config["listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert config["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert (
        config["sasl.enabled.mechanisms"] == config["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    )
    assert (
        'username="agentlog-broker"' in config["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"]
    )
    assert "client-secret" not in kafka.server_properties(settings)
    assert (tmp_path / "kafka" / "broker.secret").stat().st_mode & 0o077 == 0, (
        "the nodes' password is private"
    )


@pytest.mark.parametrize(
    ("missing", "named"),
    [("sasl.password", '"sasl.password"'), ("security.protocol", '"security.protocol": "SASL_PLAINTEXT"')],
)
def test_secure_without_the_client_credentials_is_refused_naming_the_key(
    tmp_path: Path, missing: str, named: str
) -> None:
    settings = Settings(state_dir=tmp_path, kafka={k: v for k, v in SASL.items() if k != missing})
    with pytest.raises(ServiceError, match=named):
        kafka.configure(settings, 1, secure=True)
    assert not kafka.is_secure(settings)


def test_a_plaintext_cluster_cannot_become_secure(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, kafka=SASL)
    kafka.configure(settings, 1)
    kafka.data_dir(settings).mkdir(parents=True)
    (kafka.data_dir(settings) / "meta.properties").write_text("cluster.id=x\n")
    with pytest.raises(ServiceError, match="plaintext Kafka cluster; it cannot become --secure"):
        kafka.configure(settings, 1, secure=True)


def test_nodes_can_advertise_a_proxy_port_instead_of_their_own(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, kafka_port=27400, kafka_controller_port=27420)
    kafka.configure(settings, 3)
    kafka.advertise_through(settings, {1: 27410, 2: 27411, 3: 27412})
    node = kafka.nodes(settings)[1]
    config = props(kafka.server_properties(settings, node))
    assert config["listeners"] == "PLAINTEXT://127.0.0.1:27401,CONTROLLER://127.0.0.1:27421"
    assert config["advertised.listeners"] == "PLAINTEXT://127.0.0.1:27411"
    assert kafka.node_count(settings) == 3, "the layout keeps its size"
