"""A name that every full dump holds: ``thaw_pickled``, by this module's path.

A full dump pickles each frozen snapshot value as a call to the function that loads it, and
pickle records that function by module and name (``runtime.durable_journal.thaw_pickled``).
The durable journal itself moved to ``runtime.replication.raft``; this function stays here,
unchanged, so that dumps written before load, and dumps written now load on older code.
"""

from __future__ import annotations

import pickle


def thaw_pickled(blob: bytes) -> object:
    """Loads a value frozen by ``runtime.replication.raft.dump.freeze`` (its module and name
    are part of the dump format)."""
    return pickle.loads(blob)
