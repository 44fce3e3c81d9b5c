"""RaftQ on Spark: the PySpark data source ``raftq`` and the bulk produce/consume jobs.

Imports ``raftq`` (the client library) and ``protocol`` only; see README.md.
"""
