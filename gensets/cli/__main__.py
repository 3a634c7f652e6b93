"""``python -m gensets.cli ARGS`` (and ``accelerate launch -m gensets.cli ARGS``): the ``gensets`` command."""

import sys

from . import main

sys.exit(main())
