"""What the three servers (broker, manager, load balancer) share to run as processes:
the HTTP server and its routing, request parsing and error mapping, metrics, bounded HTTP
calls between components, and the replication layer both Raft groups go through."""
