"""``python -m jax_tsm2.tune``: see ``jax_tsm2.tune.cli``."""

import sys

from jax_tsm2.tune.cli import main

sys.exit(main())
