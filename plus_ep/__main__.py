"""`python -m plus_ep`: the `plus-ep` command line."""
import sys

from .cli import main

sys.exit(main())
