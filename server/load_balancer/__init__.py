"""RaftQ's load balancer: tracks the manager leader and forwards every request to it."""
