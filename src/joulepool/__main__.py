"""`python -m joulepool`: the `pool` command."""

import sys

from joulepool.cli import main

sys.exit(main())
