"""Headless Chromium for the dashboard tests (Debian's ``chromium``, installed by
scripts/setup.sh), and where their screenshots are kept. Two ways to use it: ``browser``
loads a page once (its DOM dumped or a screenshot taken after 10 s of virtual time);
``BrowserTab`` drives a page as a user would, over Chromium's DevTools pipe (no package
needed: JSON messages on two file descriptors)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any, Self

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
"""Where the dashboard's screenshot is kept (git ignores it; CI may upload it)."""
BROWSER_TIMEOUT_S = 90.0
_FLAGS = (
    "--headless",
    "--no-sandbox",  # the tests may run as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--window-size=1280,1600",
)


def browser(*args: str) -> str:
    """Headless Chromium (Debian's ``chromium``, installed by scripts/setup.sh); its stdout."""
    done = subprocess.run(
        [
            "chromium",
            *_FLAGS,
            "--virtual-time-budget=10000",  # the page's timers run; its requests are real
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=BROWSER_TIMEOUT_S,
        check=True,
    )
    return done.stdout


class PageError(Exception):
    """JavaScript evaluated in a ``BrowserTab`` threw."""


class BrowserTab:
    """One page in a headless Chromium driven over its DevTools pipe (``--remote-debugging-
    pipe``: Chromium reads commands on fd 3 and writes answers and events on fd 4, each a
    JSON text ended by a NUL byte). Real time, unlike ``browser``'s virtual time: wait for
    what the page shows with ``wait_for``. Every read is bounded by ``BROWSER_TIMEOUT_S``."""

    def __init__(self, page: str) -> None:
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()
        chromium = shlex.join(["chromium", *_FLAGS, "--remote-debugging-pipe", "about:blank"])
        # bash puts the pipes at fds 3 and 4, where Chromium looks for them (dash, Debian's
        # sh, takes only one-digit descriptors there).
        self._process = subprocess.Popen(
            ["bash", "-c", f"exec {chromium} 3<&{commands_read} 4>&{answers_write}"],
            pass_fds=(commands_read, answers_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(answers_write)
        self._received = b""
        self._last_id = 0
        self._session: str | None = None
        try:
            target = self._call("Target.createTarget", {"url": page})
            attached = self._call(
                "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
            )
            self._session = str(attached["sessionId"])
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        answer = self._call(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
        )
        if "exceptionDetails" in answer:
            raise PageError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout_s: float = 30.0) -> Any:
        """Evaluate ``expression`` until its value is truthy (an error while the page
        loads counts as not yet); fail after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                last = self.evaluate(expression)
            except PageError as error:
                last = error
            else:
                if last:
                    return last
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}: {last}")

    def close(self) -> None:
        """Ask Chromium to quit; kill it if it has not within its bound."""
        with contextlib.suppress(OSError):  # gone already
            self._send("Browser.close", {}, to_page=False)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        finally:
            os.close(self._commands)
            os.close(self._answers)

    def _send(self, method: str, params: dict[str, Any], *, to_page: bool = True) -> int:
        self._last_id += 1
        message: dict[str, Any] = {"id": self._last_id, "method": method, "params": params}
        if to_page and self._session is not None:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        return self._last_id

    def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send one command and read until its answer (events on the way are dropped)."""
        sent = self._send(method, params)
        deadline = time.monotonic() + BROWSER_TIMEOUT_S
        while True:
            while b"\0" not in self._received:
                remaining = deadline - time.monotonic()
                readable, _, _ = select.select([self._answers], [], [], max(0.0, remaining))
                if not readable:
                    raise AssertionError(f"Chromium did not answer {method} in time")
                chunk = os.read(self._answers, 1 << 16)
                if not chunk:
                    raise AssertionError(f"Chromium closed its pipe before answering {method}")
                self._received += chunk
            raw, self._received = self._received.split(b"\0", 1)
            message = json.loads(raw)
            if message.get("id") != sent:
                continue
            if "error" in message:
                raise AssertionError(f"Chromium refused {method}: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result


def dashboard_cells(page: str) -> str:
    """The text of every table cell of the dashboard at ``page``, joined by `` | ``."""
    dom = browser("--dump-dom", page)
    return " | ".join(re.findall(r"<td[^>]*>([^<]*)</td>", dom))


def dump_dom(page: str) -> str:
    """The page's DOM once its script ran (its timers for 10 s of virtual time, its requests
    answered), serialised: what it rendered, user data escaped as it would be shown."""
    return browser("--dump-dom", page)


_VOID_ELEMENTS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
"""Elements without an end tag: they open no level of nesting."""


class _ElementText(HTMLParser):
    """The text inside the element with one id: the rows of its table bodies (each cell's
    lines: a ``<div>`` in a cell starts one) and all its text."""

    def __init__(self, element_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self._id = element_id
        self._depth = 0  # levels open inside the element; 0: outside it
        self.found = False
        self.text: list[str] = []
        self.rows: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._depth == 0:
            if ("id", self._id) in attrs:
                self.found, self._depth = True, 1
            return
        if tag not in _VOID_ELEMENTS:
            self._depth += 1
        if tag == "tr":
            self.rows.append([])
        elif tag == "td" and self.rows:
            self._cell = [""]
            self.rows[-1].append(self._cell)
        elif tag == "div" and self._cell is not None and self._cell[-1]:
            self._cell.append("")

    def handle_endtag(self, tag: str) -> None:
        if self._depth == 0 or tag in _VOID_ELEMENTS:
            return
        self._depth -= 1
        if tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._depth > 0:
            self.text.append(data)
            if self._cell is not None:
                self._cell[-1] += data


def _parsed(dom: str, element_id: str) -> _ElementText:
    parser = _ElementText(element_id)
    parser.feed(dom)
    parser.close()
    assert parser.found, f"no element with id {element_id!r} in the page"
    return parser


def table_rows(dom: str, table_id: str) -> list[list[list[str]]]:
    """The rows of the table ``table_id`` that hold cells (its body's; the header row has
    ``<th>`` only): per row, per cell, its lines of text (one per ``<div>`` in the cell)."""
    rows = _parsed(dom, table_id).rows
    return [row for row in rows if row]


def element_text(dom: str, element_id: str) -> str:
    """All the text inside the element ``element_id``, as shown."""
    return "".join(_parsed(dom, element_id).text)
