"""The manager's registries: pure, replicated through ``manager.raft``. They import only
``protocol`` (import-linter contract)."""
