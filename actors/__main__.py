"""`python -m actors train ...` (what `ray job submit -- python -m actors train ...` runs)."""
import sys

from actors.cli.main import main

sys.exit(main())
