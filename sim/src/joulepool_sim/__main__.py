"""`python -m joulepool_sim ARGS...` is `pool simulate ARGS...`."""

import sys

from joulepool_sim.cli import main

sys.exit(main())
