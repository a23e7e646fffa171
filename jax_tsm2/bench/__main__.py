"""``python -m jax_tsm2.bench``: see ``--help`` and README.md next to this file."""

from jax_tsm2.bench.cli import main

raise SystemExit(main())
