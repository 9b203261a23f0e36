"""`python -m prefcall ...`: the same command line as the `prefcall` script."""

import sys

from prefcall.cli import main

if __name__ == "__main__":
    sys.exit(main())
