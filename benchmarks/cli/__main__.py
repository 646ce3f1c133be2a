"""``python -m benchmarks.cli``: the ``clusterbench`` command."""

import sys

from benchmarks.cli import main

sys.exit(main())
