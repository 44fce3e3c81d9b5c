"""The pysyncobj implementation of the replication layer: the only code that touches
pysyncobj's internals (see ../README.md)."""
