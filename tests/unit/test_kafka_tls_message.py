"""The one line a failed TLS handshake ends a process with (runtime.log.kafka.auth), from
librdkafka's own error text: which failures count as the certificate's, and what the line keeps."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from runtime.config import load_settings
from runtime.log.kafka.auth import _on_certificate, _tls_message

pytestmark = pytest.mark.unit

VERIFY_FAILED = KafkaError(
    KafkaError._SSL,
    "sasl_ssl://127.0.0.1:19720/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
    "certificate verify failed: broker certificate could not be verified, verify that ssl.ca.location "
    "is correctly configured or root CA certificates are installed\n(install ca-certificates package) "
    "(after 17ms in state SSL_HANDSHAKE)",
)


def test_a_certificate_failure_is_final_and_a_cut_handshake_is_not() -> None:
    assert _on_certificate(VERIFY_FAILED)
    cut = KafkaError(KafkaError._SSL, "sasl_ssl://127.0.0.1:19720/1: SSL handshake failed: Disconnected")
    assert not _on_certificate(cut)


def test_the_line_names_the_servers_the_ca_and_openssls_reason_on_one_line() -> None:
    settings = load_settings(
        bootstrap_servers="127.0.0.1:19720",
        kafka={
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": "/etc/agentlog/ca.pem",
            "sasl.password": "pw-x",
        },
    )
    line = _tls_message(settings, VERIFY_FAILED)
    assert "\n" not in line
    assert line.startswith("Kafka at 127.0.0.1:19720: TLS handshake failed")
    assert "(trusted CA: /etc/agentlog/ca.pem)" in line
    assert "error:0A000086:SSL routines::certificate verify failed" in line
    assert "after 17ms" not in line and "pw-x" not in line
