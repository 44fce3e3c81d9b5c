"""Passwords kept out of what is shown (issue 23, hole 5)."""

from __future__ import annotations

from protocol.redaction import url_password, url_without_password, without_secrets


def test_a_urls_password_is_found_as_written() -> None:
    assert url_password("postgresql://u:pw@h:5432/db") == "pw"
    assert url_password("postgresql://u:p%40w@h/db") == "p%40w"
    assert url_password("postgresql://u:s3cr@t@h/db") == "s3cr@t"  # up to the last '@'
    for no_password in ("postgresql://u@h/db", "postgresql://h/db", "sqlite:///x.db", "u:p@h"):
        assert url_password(no_password) is None


def test_a_url_is_shown_without_its_password() -> None:
    assert url_without_password("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert url_without_password("postgresql://u:s3cr@t@h/db") == "postgresql://u:***@h/db"
    assert url_without_password("sqlite:///x.db") == "sqlite:///x.db"


def test_secrets_are_scrubbed_from_text_also_decoded() -> None:
    text = "failed for p@ss and p%40ss, not for pa"
    assert without_secrets(text, ["p%40ss", None]) == "failed for *** and ***, not for pa"
    assert without_secrets("a b", ["a"]) == "a b"  # too short to mean anything
