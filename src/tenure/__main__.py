"""`python -m tenure`: the same as the `tenure` command."""

import sys

from tenure.ops.cli import main

sys.exit(main())
