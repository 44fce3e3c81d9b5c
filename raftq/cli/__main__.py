"""``python -m raftq.cli``: the ``raftq`` command."""

import sys

from raftq.cli import main

sys.exit(main())
