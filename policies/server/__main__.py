"""`python -m policies.server --model-path DIR --port N ...` (see options.build_arg_parser)."""
import sys

from policies.server.app import main

sys.exit(main())
