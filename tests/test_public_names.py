"""The public names resolve: the package's own, and every jax_tsm2 name the README and the
documentation write (dotted names, ``from ... import ...`` lines, ``python -m`` commands)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pathlib
import re
import types

import pytest

import jax_tsm2

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _lookup(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)  # AttributeError: the name does not resolve
        return obj
    raise ImportError(dotted)


def test_every_name_in___all___resolves():
    for name in jax_tsm2.__all__:
        assert hasattr(jax_tsm2, name), name


def test_the_k_means_function_and_the_clustering_subpackage_do_not_hide_each_other():
    assert callable(jax_tsm2.kmeans) and not isinstance(jax_tsm2.kmeans, types.ModuleType)
    assert isinstance(jax_tsm2.clustering, types.ModuleType)
    assert jax_tsm2.kmeans is jax_tsm2.clustering.kmeans
    assert jax_tsm2.KMeans is jax_tsm2.clustering.KMeans
    for name in ("lloyd_step", "assign", "sq_distances", "kmeans_plusplus", "KMeansState"):
        assert _lookup(f"jax_tsm2.clustering.{name}") is getattr(jax_tsm2.clustering, name)
    for name in ("core", "fused", "estimator", "__main__"):
        assert importlib.util.find_spec(f"jax_tsm2.clustering.{name}") is not None
    # The function is not a package: the old spelling of the subpackage fails loudly.
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("jax_tsm2.kmeans.core")


def test_explain_is_callable_and_names_each_decision():
    assert callable(jax_tsm2.explain)
    for op in ("matmul", "kmeans_step", "abft"):
        assert callable(getattr(jax_tsm2.explain, op)), op
    assert inspect.getdoc(jax_tsm2.explain)


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOTTED = re.compile(r"(?<![\w/.])jax_tsm2(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"\bfrom (jax_tsm2(?:\.\w+)*) import ([\w, ]+)")
RUN_MODULE = re.compile(r"python3? -m (jax_tsm2(?:\.\w+)*)")


def _references(path: pathlib.Path) -> list[tuple[str, str]]:
    text = path.read_text()
    found = [("name", m.group(0)) for m in DOTTED.finditer(text)]
    for m in FROM_IMPORT.finditer(text):
        found += [("import", f"{m.group(1)}:{name.strip()}") for name in m.group(2).split(",")]
    found += [("module", m.group(1)) for m in RUN_MODULE.finditer(text)]
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_the_documentation_writes_resolves(path):
    bad = []
    for kind, ref in _references(path):
        try:
            if kind == "import":
                module, name = ref.split(":")
                getattr(importlib.import_module(module), name)
            elif kind == "module":
                spec = importlib.util.find_spec(ref)
                if spec is None:
                    raise ImportError(ref)
                package = spec.submodule_search_locations is not None
                if package and importlib.util.find_spec(f"{ref}.__main__") is None:
                    raise ImportError(f"{ref}.__main__")  # a package runs its __main__
            else:
                _lookup(ref)
        except (ImportError, AttributeError) as err:
            bad.append(f"{kind} {ref}: {type(err).__name__}")
    assert not bad, bad
