"""``python -m symattn.verification [options]`` is ``symattn verify [options]``.

A ``__main__`` module is an entry point, a command line like :mod:`symattn.cli`: it is the one
file of this package that may import the CLI (the layer contract ignores ``__main__`` modules).
"""

import sys

from symattn.cli.verify import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
