"""``called_method`` reads the replicated method id of an entry as pysyncobj writes it (its
fast path, protocol 2), and the general way for any other pickle."""

from __future__ import annotations

import pickle

import pytest
from pysyncobj import pickle as pysyncobj_pickle

from runtime.replication.raft.node import called_method

REGULAR = b"\x00"


@pytest.mark.parametrize("method_id", [0, 1, 7, 255, 256, 300, 65535, 65536, 10**6])
def test_the_id_of_an_entry_as_pysyncobj_writes_it(method_id: int) -> None:
    command = REGULAR + pysyncobj_pickle.dumps((method_id, (b"x" * 40,), {}))
    assert called_method(command) == method_id


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("method_id", [3, 300, 70000])
def test_other_protocols_are_read_the_general_way(protocol: int, method_id: int) -> None:
    command = REGULAR + pickle.dumps((method_id, ("value",)), protocol)
    assert called_method(command) == method_id


@pytest.mark.parametrize(
    "command",
    [b"", b"\x01" + pickle.dumps((3, ())), REGULAR, REGULAR + b"\x80\x02", REGULAR + b"junk"],
)
def test_not_a_method_call(command: bytes) -> None:
    assert called_method(command) is None
