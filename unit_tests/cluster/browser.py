"""Headless Chromium for the dashboard tests (Debian's ``chromium``, installed by
scripts/setup.sh), and where their screenshots are kept."""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
"""Where the dashboard's screenshot is kept (git ignores it; CI may upload it)."""
BROWSER_TIMEOUT_S = 90.0


def browser(*args: str) -> str:
    """Headless Chromium (Debian's ``chromium``, installed by scripts/setup.sh); its stdout."""
    done = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",  # the tests may run as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,1600",
            "--virtual-time-budget=10000",  # the page's timers run; its requests are real
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=BROWSER_TIMEOUT_S,
        check=True,
    )
    return done.stdout


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
