"""The installed distribution's metadata: version, typing marker, license."""

from __future__ import annotations

import pathlib
from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import jax_tsm2


def test_version_is_pep440_and_the_installed_one():
    version = Version(jax_tsm2.__version__)  # InvalidVersion if not PEP 440
    try:
        installed = metadata.version("jax_tsm2")
    except metadata.PackageNotFoundError:
        pytest.skip("jax_tsm2 is imported from a source tree without an install")
    assert version == Version(installed)


def test_the_package_is_typed():
    assert (pathlib.Path(jax_tsm2.__file__).parent / "py.typed").is_file()


def test_metadata_names_the_license_and_the_lock_and_cache_dependencies():
    try:
        meta = metadata.metadata("jax_tsm2")
    except metadata.PackageNotFoundError:
        pytest.skip("jax_tsm2 is imported from a source tree without an install")
    license_fields = (meta.get("License-Expression"), meta.get("License"))
    assert "Apache-2.0" in license_fields
    requires = {Requirement(r).name for r in meta.get_all("Requires-Dist")}
    assert {"jax", "numpy", "platformdirs", "filelock"} <= requires
