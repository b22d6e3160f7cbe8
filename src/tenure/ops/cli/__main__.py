import sys

from tenure.ops.cli import main

sys.exit(main())
