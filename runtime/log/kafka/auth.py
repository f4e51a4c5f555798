"""Wrong Kafka credentials, said at once.

librdkafka treats a failed SASL authentication like a broker that is down: it reconnects with
backoff forever, and every request waits for its own timeout. A worker with a mistyped password
would sit idle and a submission would hang. So every process that is given SASL credentials
(``security.protocol`` SASL_* in ``AGENTLOG_KAFKA``) checks them once, before it builds its own
clients: one connection, one metadata request. A broker that does not answer is left to the
usual paths (they wait for it); only a refusal of the credentials is an error.

TLS (``SASL_SSL``) fails the same way: a node certificate the client cannot verify -- a wrong or
expired ``ssl.ca.location``, an expired node certificate, a name that does not match -- is one
more reconnect with backoff to librdkafka. A failed handshake that names the certificate is as
final as a refused password, so the same probe ends with one line for it (KafkaTLSError).
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, KafkaException

from runtime.config import Settings
from runtime.errors import TerminalError

# The probe's failures are turned into one clear error; librdkafka's own lines would repeat them.
_QUIET = logging.getLogger("agentlog.kafka.auth_probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class KafkaAuthenticationError(TerminalError):
    """The Kafka cluster refused the configured SASL credentials."""


class KafkaTLSError(TerminalError):
    """The TLS handshake with the Kafka cluster failed on its certificate (not verified, expired)."""


def uses_sasl(settings: Settings) -> bool:
    return settings.kafka.get("security.protocol", "").upper().startswith("SASL")


def check_credentials(settings: Settings, timeout: float = 10.0) -> None:
    """Raise KafkaAuthenticationError if the cluster refuses ``settings``' SASL credentials.

    Returns once a metadata request is answered, at once without SASL, and after ``timeout``
    seconds if no broker answers either way. The message names the bootstrap servers, the user
    and the mechanism -- never the password. Raises KafkaTLSError if the TLS handshake fails on
    the node's certificate."""
    if not uses_sasl(settings):
        return
    refusals: list[KafkaError] = []
    probe = Consumer(
        {
            **settings.kafka_common(),
            "group.id": "agentlog-auth-probe",  # librdkafka wants one; the probe never joins
            "error_cb": refusals.append,
            "logger": _QUIET,
        }
    )
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                probe.list_topics(timeout=0.5)
                return
            except KafkaException:
                pass
            probe.poll(0)  # delivers the connection errors to error_cb
            refused = next((e for e in refusals if e.code() == KafkaError._AUTHENTICATION), None)
            if refused is not None:
                raise KafkaAuthenticationError(_message(settings, refused))
            # A handshake cut short by a node going away is transient; one that names the
            # certificate fails again on every retry.
            untrusted = next(
                (e for e in refusals if e.code() == KafkaError._SSL and _on_certificate(e)), None
            )
            if untrusted is not None:
                raise KafkaTLSError(_tls_message(settings, untrusted))
    finally:
        probe.close()


def _message(settings: Settings, refused: KafkaError) -> str:
    user = settings.kafka.get("sasl.username", "")
    mechanism = settings.kafka.get("sasl.mechanism", settings.kafka.get("sasl.mechanisms", "GSSAPI"))
    return (
        f"Kafka at {settings.bootstrap_servers}: authentication failed for user {user!r} ({mechanism}): "
        f"{refused.str()}; check sasl.username and sasl.password in AGENTLOG_KAFKA"
    )


def _on_certificate(error: KafkaError) -> bool:
    return "certificate" in error.str().lower()


def _tls_message(settings: Settings, failed: KafkaError) -> str:
    # librdkafka's text: "<broker>: SSL handshake failed: <OpenSSL reason>: <advice> (after N ms ...)";
    # keep the reason, on one line.
    text = " ".join(failed.str().split())
    reason = text.split("SSL handshake failed:", 1)[-1].split(" (after ", 1)[0].strip()
    ca = settings.kafka.get("ssl.ca.location", "the system's CA certificates")
    return (
        f"Kafka at {settings.bootstrap_servers}: TLS handshake failed, the node's certificate was not accepted "
        f"(trusted CA: {ca}): {reason}; check ssl.ca.location in AGENTLOG_KAFKA and that the certificates "
        "have not expired"
    )
