"""Peer systems the benchmark compares RaftQ with: 3-node NATS JetStream and RabbitMQ
clusters started on loopback ports of their own, driven from Python (nats-py, pika)."""
