"""A FUSE file system for power-loss tests: data and names not synced are lost at a cut.

See the section "Power-cut file system" in ``stress_tests/README.md``."""

from stress_tests.powercut.controller import PowerCutFS, fuse_unavailable_reason

__all__ = ["PowerCutFS", "fuse_unavailable_reason"]
