"""One replication layer: a replicated state machine, its in-memory twin and its pysyncobj
implementation (see README.md)."""
