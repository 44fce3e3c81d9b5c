"""TLS for the nodes' HTTP: the listeners' certificate, and whom a node trusts as a peer.

Optional: without ``--tls-cert``/``--tls-key`` a node serves plain HTTP (its own network, or
a proxy in front terminating TLS). With them every HTTP listener speaks only TLS (1.2 or
later), and nodes reach each other over ``https://`` addresses, checking the peer's
certificate against ``--tls-ca`` (the system's trust store when it is not given). The Raft
ports are not TLS: pysyncobj encrypts their traffic with the cluster secret.

Mutual TLS between nodes (``--mutual-tls``, managers and brokers; issue 23): a node then
shows its own certificate when it calls a peer, asks every caller for one (clients with API
keys need none), and takes a node's signed request only from a caller whose certificate
``--tls-ca`` vouches for: the cluster secret alone no longer makes a node.
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Paths of PEM files: this node's certificate (chain) and key, and the CA bundle its
    peers' certificates are checked against (``None``: the system's)."""

    cert_path: Path | None
    key_path: Path | None
    ca_path: Path | None
    mutual: bool = False
    """Mutual TLS between nodes (``--mutual-tls``): show this certificate to the peers called,
    and take node requests only from callers that showed one of ``ca_path``."""

    @property
    def serves_tls(self) -> bool:
        return self.cert_path is not None

    @property
    def scheme(self) -> str:
        """The scheme of this node's own address."""
        return "https" if self.serves_tls else "http"


NO_TLS = TlsFiles(None, None, None)


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate (chain): serve HTTPS")
    parser.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    parser.add_argument(
        "--tls-ca", type=Path, help="PEM CA bundle to check peers' certificates (default: system)"
    )


def add_mutual_tls_option(parser: argparse.ArgumentParser) -> None:
    """Managers and brokers: the nodes that take node requests."""
    parser.add_argument(
        "--mutual-tls",
        action="store_true",
        help="show --tls-cert to the peers called; take node requests only from callers "
        "with a certificate of --tls-ca",
    )


def tls_from(args: argparse.Namespace) -> TlsFiles:
    """The options as ``TlsFiles``, checked by loading them now: a bad file is refused at
    start (``ValueError`` with the reason), not at the first connection."""
    mutual = bool(getattr(args, "mutual_tls", False))
    files = TlsFiles(args.tls_cert, args.tls_key, args.tls_ca, mutual)
    if (files.cert_path is None) != (files.key_path is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if mutual and (files.cert_path is None or files.ca_path is None):
        raise ValueError(
            "--mutual-tls needs --tls-cert and --tls-key (this node's certificate, shown to "
            "its peers) and --tls-ca (what the peers' certificates are checked against)"
        )
    if files.serves_tls:
        server_context(files)
    client_context(files)
    return files


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """The listeners' context; ``ValueError`` if the certificate or key cannot be used."""
    assert files.cert_path is not None and files.key_path is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.cert_path, files.key_path)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"cannot use --tls-cert {files.cert_path} with --tls-key {files.key_path}: {exc}"
        ) from exc
    if files.mutual:
        # Optional: clients with API keys show none; a node's request needs one
        # (``runtime.http_auth.NodeVerifier``). A certificate shown is checked here.
        context.verify_mode = ssl.CERT_OPTIONAL
        try:
            context.load_verify_locations(files.ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot use --tls-ca {files.ca_path}: {exc}") from exc
    return context


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """How this node checks the peers it calls over ``https://``: hostname and chain, against
    ``ca_path`` or the system's CAs; ``ValueError`` if the CA file cannot be read."""
    try:
        context = ssl.create_default_context(cafile=files.ca_path)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot use --tls-ca {files.ca_path}: {exc}") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if files.mutual:
        assert files.cert_path is not None and files.key_path is not None
        context.load_cert_chain(files.cert_path, files.key_path)  # shown to the peers called
    return context
