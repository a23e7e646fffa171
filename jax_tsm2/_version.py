"""The installed distribution's version (``jax_tsm2.__version__``), importable by the
package's own modules while the package initialises."""

from importlib import metadata as _metadata

try:
    VERSION = _metadata.version("jax_tsm2")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    VERSION = "0+unknown"
