"""``python -m symattn.cli [COMMAND] [options]`` is the ``symattn`` command (an entry point)."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
