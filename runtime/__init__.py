"""What the three servers (broker, manager, load balancer) share to run as processes:
the gunicorn launcher, Flask request parsing and error mapping, metrics, and bounded
HTTP calls between components."""
