"""`python -m actors train ...` (what `ray job submit -- python -m actors train ...` runs)."""
import sys

from actors.cli import main

sys.exit(main())
