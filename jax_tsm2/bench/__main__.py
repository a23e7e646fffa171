"""``python -m jax_tsm2.bench``: see ``--help`` and README.md next to this file."""

import faulthandler

from jax_tsm2.bench.cli import main

faulthandler.enable()  # a crash in a kernel or the driver still says where
raise SystemExit(main())
