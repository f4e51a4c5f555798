"""TLS for a secure local cluster (``agentlog infra up --secure --tls``): a CA and a node
certificate, made with ``cryptography`` when the cluster is first configured.

Files under ``<state_dir>/kafka/tls/``: ``ca.pem`` (the CA certificate: what clients trust, their
``ssl.ca.location``), ``node.pem`` (the nodes' key and certificate chain, Kafka's PEM keystore,
mode 0600). One certificate serves every node of the local cluster: they all listen on 127.0.0.1,
its subject alternative names. The CA's key is not kept: no other certificate is ever signed.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 825  # what browsers and most TLS stacks accept for a leaf certificate


def tls_dir(cluster_home: Path) -> Path:
    return cluster_home / "tls"


def ca_path(cluster_home: Path) -> Path:
    return tls_dir(cluster_home) / "ca.pem"


def keystore_path(cluster_home: Path) -> Path:
    return tls_dir(cluster_home) / "node.pem"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ensure_certificates(cluster_home: Path, host: str) -> None:
    """Make the CA and the node certificate for ``host`` unless they exist."""
    if ca_path(cluster_home).is_file() and keystore_path(cluster_home).is_file():
        return
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("agentlog local CA"))
        .issuer_name(_name("agentlog local CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    node_key = ec.generate_private_key(ec.SECP256R1())
    node = (
        x509.CertificateBuilder()
        .subject_name(_name(f"agentlog kafka {host}"))
        .issuer_name(ca.subject)
        .public_key(node_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    tls_dir(cluster_home).mkdir(parents=True, exist_ok=True)
    key_pem = node_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    chain = node.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
    keystore = keystore_path(cluster_home)
    keystore.unlink(missing_ok=True)
    fd = os.open(keystore, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key_pem + chain)
    ca_path(cluster_home).write_bytes(ca.public_bytes(serialization.Encoding.PEM))


def listener_properties(cluster_home: Path, listener: str) -> dict[str, str]:
    """server.properties entries of a SASL_SSL ``listener`` (its own and the inter-node side)."""
    prefix = f"listener.name.{listener.lower()}."
    return {
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(keystore_path(cluster_home)),
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.truststore.location": str(ca_path(cluster_home)),
        f"{prefix}ssl.endpoint.identification.algorithm": "https",
    }
