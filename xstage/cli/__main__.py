"""``python -m xstage.cli``: the same as the ``xstage`` command."""
import sys

from xstage.cli import main

sys.exit(main())
