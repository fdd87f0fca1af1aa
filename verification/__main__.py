"""``python -m verification [options]`` is ``symattn verify [options]``."""

import sys

from symattn.cli import main

if __name__ == "__main__":
    sys.exit(main(["verify", *sys.argv[1:]]))
