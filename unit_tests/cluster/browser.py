"""Headless Chromium for the dashboard tests (Debian's ``chromium``, installed by
scripts/setup.sh), and where their screenshots are kept."""

from __future__ import annotations

import re
import subprocess
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
