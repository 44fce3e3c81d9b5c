"""RaftQ manager: the Raft-replicated registries of topics, brokers and clients, and the
router of ``/logs`` to brokers. See README.md beside this file."""
