"""``python -m spark_jobs.package OUT.zip``: the zip to ship to Spark executors whose Python
lacks RaftQ (``spark-submit --py-files OUT.zip``, ``spark.submit.pyFiles``).

It holds the three packages the data source runs on executors: ``spark_jobs``, ``raftq`` (the
client library) and ``protocol``, with their package data, and nothing compiled. The
executors' Python must have the third-party packages those import (``requests``, ``orjson``,
``urllib3``, ``tqdm``: requirements-client.txt; ``pyarrow``, ``pandas``, ``numpy``: what
PySpark's Python data sources need; requirements-spark-executor.txt); PySpark itself comes
from the Spark installation.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

PACKAGES = ("spark_jobs", "raftq", "protocol")
_ROOT = Path(__file__).resolve().parent.parent
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def build(out: Path, root: Path = _ROOT) -> list[str]:
    """Write the zip (atomically: a reader never sees half of it); return its entries."""
    names = []
    partial = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in PACKAGES:
            for path in sorted((root / package).rglob("*")):
                if path.is_dir() or "__pycache__" in path.parts:
                    continue
                if path.suffix in _SKIPPED_SUFFIXES:
                    continue
                name = path.relative_to(root).as_posix()
                archive.write(path, name)
                names.append(name)
    partial.replace(out)
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.package", description=__doc__)
    parser.add_argument("out", type=Path, help="the zip to write, e.g. dist/raftq-spark.zip")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    names = build(args.out)
    print(f"{args.out}: {len(names)} files of {', '.join(PACKAGES)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
