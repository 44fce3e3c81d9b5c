"""The operations toolbox of the server's distribution: the local launcher, node files and
TLS provisioning, and the ``raftq cluster|node|broker|manager`` commands."""
