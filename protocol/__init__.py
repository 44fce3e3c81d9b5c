"""RaftQ's shared vocabulary: types, limits, errors, request parsing and key routing.

Pure: nothing here does I/O, reads a clock or keeps global state.
"""
