"""`python -m mp_optimizer.migrate`: the command line."""

import sys

from mp_optimizer.migrate.cli import main

if __name__ == "__main__":
  sys.exit(main())
