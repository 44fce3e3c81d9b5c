"""Secrets kept out of what RaftQ shows: answers, log lines, error messages, process titles.

A database URL may carry a password (``postgresql://user:password@host/db``); wherever a
URL is shown it is shown with the password replaced (``url_without_password``), and any text
that may quote it (a driver's error) passes through ``without_secrets`` first. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

MASK = "***"
SECRET_CHARS_MIN = 3
"""A shorter "secret" is not scrubbed from text: replacing every ``a`` of a message would
make it unreadable and hide nothing."""


def url_password(url: str) -> str | None:
    """The password of ``url`` (``scheme://user:password@host/...``) as written, or None.
    The userinfo ends at the *last* ``@`` before the host, as RFC 3986 reads it."""
    netloc = urlsplit(url).netloc if "://" in url else ""
    userinfo, at, _host = netloc.rpartition("@")
    if not at:
        return None
    _user, colon, password = userinfo.partition(":")
    return password if colon and password else None


def url_without_password(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (the rest kept: the user, host
    and database name are what an operator needs to find the mistake)."""
    password = url_password(url)
    if password is None:
        return url
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def without_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every occurrence of each secret (also percent-decoded) replaced by
    ``***``."""
    for secret in secrets:
        if secret is None:
            continue
        for form in {secret, unquote(secret)}:
            if len(form) >= SECRET_CHARS_MIN:
                text = text.replace(form, MASK)
    return text
