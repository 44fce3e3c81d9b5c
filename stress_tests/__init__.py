"""Real-process stress and fault tests of RaftQ's guarantees (DESIGN §4): workloads that
record a history, a seeded fault scheduler, and a pure checker over the history plus a final
read of every replica. See README.md."""
