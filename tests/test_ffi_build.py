"""The compiled extension: what it reports, what it registers, and how it fails."""

from __future__ import annotations

import functools
import importlib
import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import PACKAGE_ROOT, run_python

import jax_tsm2
from jax_tsm2 import _ffi


def test_build_info_keys():
    info = jax_tsm2.build_info()
    for key in ("cuda", "cuda_version", "cuda_architectures", "xla_ffi_api_version"):
        assert key in info
    # Built against the jax we run, or an older one (a wheel: the oldest supported).
    assert _ffi._release(info["jax_version"]) <= _ffi._release(jax.__version__)
    assert info["jax_version_running"] == jax.__version__
    assert isinstance(info["cuda_sass"], list) and isinstance(info["cuda_ptx"], list)
    assert "tsm2_matmul" in info["targets"]["cpu"]
    assert info["cuda_targets_registered"] == ("CUDA" in info["targets"]) == info["cuda"]
    if info["cuda"]:
        assert info["cuda_version"] and info["cuda_architectures"]


def test_kernels_digest_is_the_digest_of_the_sources():
    """build_info's kernels_digest (CMakeLists.txt), which calibrations record, is what
    ``calibrate.kernels_digest`` computes of the source tree the package was built from."""
    from jax_tsm2.tune import calibrate

    digest = jax_tsm2.build_info()["kernels_digest"]
    assert len(digest) == 12 and int(digest, 16) >= 0
    root = pathlib.Path(PACKAGE_ROOT)
    if not (root / "ffi" / "module.cc").is_file():
        pytest.skip("an installed package: no source tree beside it")
    assert digest == calibrate.kernels_digest(root), "the extension was built from other sources"


def test_version():
    assert isinstance(jax_tsm2.__version__, str) and jax_tsm2.__version__


def test_reload_does_not_register_twice():
    before = _ffi.registered_targets()
    importlib.reload(_ffi)
    assert _ffi.registered_targets() == before
    with jax_tsm2.custom_call_mode("always"):
        c = jax.jit(jax_tsm2.matmul)(jnp.ones((3, 2)), jnp.ones((2, 4)))
    np.testing.assert_array_equal(np.asarray(c), 2.0)


_NO_WORKSPACE = jax.ShapeDtypeStruct((0,), jnp.uint8)


def test_ffi_target_rejects_bad_shapes_at_run_time():
    """The handler's own validation (the second line of defence behind trace-time checks)."""
    bad_out = jax.ShapeDtypeStruct((5, 4), jnp.float32)  # should be (5, 3)
    call = jax.ffi.ffi_call("tsm2_matmul", (bad_out, _NO_WORKSPACE))
    with pytest.raises(Exception, match=r"tsm2_matmul.*f32\[5,4\]"):
        jax.block_until_ready(
            call(
                jnp.ones((5, 2), jnp.float32),
                jnp.ones((2, 3), jnp.float32),
                kernel=np.int32(0),
                layout=np.int32(0),
            )
        )


@pytest.mark.parametrize(("kernel", "layout"), [(2, 1), (3, 0), (0, 2), (0, 5)])
def test_ffi_target_rejects_a_kernel_layout_mismatch(kernel, layout):
    out = jax.ShapeDtypeStruct((5, 3), jnp.float32)
    call = jax.ffi.ffi_call("tsm2_matmul", (out, _NO_WORKSPACE))
    with pytest.raises(Exception, match="layout"):
        jax.block_until_ready(
            call(
                jnp.ones((5, 2), jnp.float32),
                jnp.ones((2, 3) if layout != 1 else (3, 2), jnp.float32),
                kernel=np.int32(kernel),
                layout=np.int32(layout),
            )
        )


@pytest.mark.parametrize("kernel", sorted(_ffi.KERNEL_IDS))
@pytest.mark.parametrize("layout", sorted(_ffi.LAYOUT_IDS))
def test_exported_kernel_layouts_are_what_the_handler_takes(kernel, layout):
    """The extension's KERNEL_LAYOUTS (routing's table) and its handler's check agree.

    Every pair the table allows computes op(A) @ op(B) on the CPU target; every other
    pair is refused for its layout.
    """
    rng = np.random.default_rng(sum(map(ord, kernel + layout)))
    m, k, n = 5, 11, 3
    a_np = rng.standard_normal((k, m) if layout == "tn" else (m, k)).astype(np.float32)
    b_np = rng.standard_normal((n, k) if layout == "nt" else (k, n)).astype(np.float32)
    call = jax.ffi.ffi_call(
        "tsm2_matmul", (jax.ShapeDtypeStruct((m, n), jnp.float32), _NO_WORKSPACE)
    )
    run = functools.partial(
        call, kernel=np.int32(_ffi.KERNEL_IDS[kernel]), layout=np.int32(_ffi.LAYOUT_IDS[layout])
    )
    if layout in _ffi.KERNEL_LAYOUTS[kernel]:
        c, _ = run(jnp.asarray(a_np), jnp.asarray(b_np))
        a64, b64 = a_np.astype(np.float64), b_np.astype(np.float64)
        want = (a64.T if layout == "tn" else a64) @ (b64.T if layout == "nt" else b64)
        np.testing.assert_allclose(np.asarray(c), want, rtol=1e-5, atol=1e-5)
    else:
        with pytest.raises(Exception, match=f"does not take layout {layout}"):
            jax.block_until_ready(run(jnp.asarray(a_np), jnp.asarray(b_np)))


def test_ffi_target_rejects_unknown_kernel_id():
    out = jax.ShapeDtypeStruct((5, 3), jnp.float32)
    call = jax.ffi.ffi_call("tsm2_matmul", (out, _NO_WORKSPACE))
    with pytest.raises(Exception, match="kernel"):
        jax.block_until_ready(
            call(
                jnp.ones((5, 2), jnp.float32),
                jnp.ones((2, 3), jnp.float32),
                kernel=np.int32(7),
                layout=np.int32(0),
            )
        )


def test_missing_extension_gives_a_helpful_import_error():
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "jax_tsm2._tsm2_ext":
            raise ImportError("simulated: no compiled extension")
sys.meta_path.insert(0, Block())
import jax_tsm2
"""
    out = run_python(["-c", code], timeout=120)
    assert out.returncode != 0
    assert "ImportError" in out.stderr
    assert "pip install --no-build-isolation" in out.stderr and "README" in out.stderr


def test_child_processes_import_the_package_this_process_imported(tmp_path, monkeypatch):
    """A child interpreter searches its working directory first: started from the repository
    beside a regular install, it imported the source tree (no compiled extension). The first
    sys.path entry holding a jax_tsm2 package must be the one this process imported, for
    children started through _helpers.run_python / package_env as every test's are."""
    decoy = tmp_path / "jax_tsm2"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy package was imported')\n")
    monkeypatch.chdir(tmp_path)
    code = "import json, os, sys; print(json.dumps([os.path.abspath(p) for p in sys.path]))"

    def first_package_dir(stdout: str) -> str:
        paths = json.loads(stdout)
        return next(p for p in paths if (pathlib.Path(p) / "jax_tsm2" / "__init__.py").exists())

    inherited = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert first_package_dir(inherited.stdout) == str(tmp_path)  # the hazard
    ours = run_python(["-c", code], timeout=120)
    assert first_package_dir(ours.stdout) == PACKAGE_ROOT, ours.stdout
    assert pathlib.Path(jax_tsm2.__file__).resolve().parent.parent == pathlib.Path(PACKAGE_ROOT)
