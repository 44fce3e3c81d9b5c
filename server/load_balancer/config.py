"""The load balancer's configuration, built once in ``__main__`` and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.limits import Limits
from runtime.tls import NO_TLS, TlsFiles


class ConfigError(ValueError):
    """The command line does not describe a usable load balancer."""


@dataclass(frozen=True, slots=True)
class LoadBalancerConfig:
    host: str
    port: int
    manager_urls: tuple[str, ...]
    """Base URLs of every manager, e.g. ``http://127.0.0.1:17111``, without a trailing slash."""
    limits: Limits
    tls: TlsFiles = NO_TLS
    metrics_token: str | None = field(default=None, repr=False)
    """Opt-in bearer for ``/metrics`` (``--metrics-token-file``); without it the load
    balancer's ``/metrics`` is open: it names no topic, client or key."""

    def validate(self) -> LoadBalancerConfig:
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"--port must be between 1 and 65535, got {self.port}")
        if not self.manager_urls:
            raise ConfigError("--managers must list at least one manager URL")
        for url in self.manager_urls:
            if not url.startswith(("http://", "https://")) or url.endswith("/"):
                raise ConfigError(f"manager URL {url!r} must be http(s)://host:port")
        if len(set(self.manager_urls)) != len(self.manager_urls):
            raise ConfigError("--managers lists a manager twice")
        return self
