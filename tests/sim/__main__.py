"""``python -m tests.sim``: see :mod:`tests.sim.campaign`."""

import sys

from tests.sim.campaign import main

sys.exit(main())
