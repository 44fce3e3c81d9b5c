"""A deterministic simulator of one Raft group (issue 21): real ``RaftMachine`` nodes in one
process, ticked by hand, on a seeded network, a virtual clock and a disk that loses what was
not synced. See ``simulation.py`` and ARCHITECTURE.md, "Deterministic simulation"."""
