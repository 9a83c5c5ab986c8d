"""``python -m jobcore.cli``: the ``jobcore`` command (worker processes in the fault tests are started this way)."""

from __future__ import annotations

import sys

from jobcore.cli import main

sys.exit(main())
