"""The certificates of a local cluster started with ``raftq cluster up --tls``.

A CA made for this cluster alone signs one certificate that every node serves (the nodes
of a local cluster share a host). Clients and nodes trust that CA (``cluster.json``'s
``tls_ca``), never the system's CAs for it. A production deployment brings certificates of
its own (``--tls-cert``/``--tls-key``/``--tls-ca`` of each node).

Uses ``cryptography`` (a server dependency: pysyncobj's encryption needs it too); only
``ops.cluster`` imports this module, when certificates are made, so the client library
does not need it.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from runtime.durable_files import make_directories, write_atomically

VALID_DAYS = 3650
_KEY_BITS = 2048


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    ca_file: Path
    cert_file: Path
    key_file: Path


def ensure_certificates(hosts: Sequence[str], material: TlsMaterial) -> bool:
    """Make the CA and the nodes' certificate for ``hosts`` (every address a node of the
    cluster binds: one, or one per node with ``--hosts``) unless the three files exist
    (a restarted cluster keeps them). The keys are mode 0600; the CA's key is not kept:
    nothing more is ever signed. True if they were made now."""
    files = (material.ca_file, material.cert_file, material.key_file)
    if all(path.exists() for path in files):
        return False
    ca_pem, cert_pem, key_pem = _make(hosts)
    make_directories(material.ca_file.parent)
    write_atomically(material.key_file, key_pem, 0o600)
    write_atomically(material.cert_file, cert_pem, 0o644)
    write_atomically(material.ca_file, ca_pem, 0o644)
    return True


def _make(hosts: Sequence[str]) -> tuple[bytes, bytes, bytes]:
    """PEM of (CA certificate, node certificate, node key)."""

    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=_KEY_BITS)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "RaftQ local cluster CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    node_key = rsa.generate_private_key(public_exponent=65537, key_size=_KEY_BITS)
    node = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(node_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = node_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return ca.public_bytes(pem), node.public_bytes(pem), key_pem


def _names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for host in dict.fromkeys([*hosts, "127.0.0.1"]):  # in order, once each
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names
