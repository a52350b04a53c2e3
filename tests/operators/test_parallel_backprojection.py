"""Parallel back-projection operator: CPU modes against an independent float64
reference, and the CUDA texture kernel against the CPU modes."""

from __future__ import annotations

import numpy as np
import pytest

from leveret.geometry import ParallelGeometry, VolumeGeometry
from leveret.operators import ParallelBackprojection

# Measured bound of the texture unit's 8-bit weights against exact linear
# interpolation, relative 2-norm over the image (docs/accuracy.md).
TEXTURE_VS_EXACT_RANDOM = 2.5e-3
# On white noise the 8-bit weights' error is (w - w8)(q[i+1] - q[i]) per sample:
# rms 1/(512 sqrt 3) x sqrt 2 / 0.816 = 1.96e-3 of the sample rms. With many
# angles the image-wide ratio sits at that mean; a single angle samples only
# ~31 independent detector differences, so the ratio scatters: over 3000 seeds
# of the (1 angle, 31 columns, 17 x 19 pixels) case (CPU, 2026-11-22) mean
# 1.96e-3, 99 % 2.8e-3, 99.9 % 3.2e-3, max 3.4e-3; 6.7 % of the seeds exceed
# 2.5e-3 (why that case failed on some fresh seeds on the GPU).
TEXTURE_VS_EXACT_ONE_ANGLE = 5e-3


@pytest.fixture(autouse=True)
def _texture_kernel(monkeypatch, tmp_path):
    """These tests check the texture kernel against the CPU's linear8; "auto"
    runs the exact ALU kernel where it fits, so here the rule answers the
    texture kernel, and no tuning cache is read (the defaults are tested in
    test_parallel_kernels_gpu.py)."""
    from leveret.operators import ParallelBackprojection

    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ParallelBackprojection, "default_config", lambda self, n_slices: {"kernel": "texture"})


def texture_vs_exact_bound(n_angles: int) -> float:
    """Bound of rel(8-bit weights, exact) on white noise for this many angles."""
    return TEXTURE_VS_EXACT_ONE_ANGLE if n_angles < 10 else TEXTURE_VS_EXACT_RANDOM


TEXTURE_VS_EXACT_SMOOTH = 2e-4


def reference_backprojection(sinos, geometry, volume, nearest=False):
    """Straight float64 transcription of docs/conventions.md with np.interp."""
    x = volume.coordinates("x")[None, :]
    y = volume.coordinates("y")[:, None]
    n_slices = sinos.shape[0]
    out = np.zeros((n_slices, volume.ny, volume.nx))
    cols = np.arange(-1, geometry.n_cols + 1)
    for n, t in enumerate(geometry.angles):
        c = (x * np.cos(t) + y * np.sin(t)) / geometry.det_spacing + geometry.centers()[n]
        for k in range(n_slices):
            q = np.concatenate([[0.0], sinos[k, n].astype(np.float64), [0.0]])
            if nearest:
                idx = np.floor(c + 0.5).astype(int)
                ok = (idx >= 0) & (idx < geometry.n_cols)
                out[k] += np.where(ok, q[np.clip(idx, 0, geometry.n_cols - 1) + 1], 0.0)
            else:
                out[k] += np.interp(c, cols, q, left=0.0, right=0.0)
    return out


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def random_case(rng, n_angles=37, n_cols=41, n_slices=3, shape=(29, 33), **geom):
    angles = rng.uniform(0, 2 * np.pi, n_angles)
    geometry = ParallelGeometry(angles, n_cols, n_rows=n_slices, **geom)
    volume = VolumeGeometry((n_slices,) + shape, voxel_size=(1.0, 0.9, 1.1), center=(0.0, 1.5, -2.0))
    sinos = rng.standard_normal((n_slices, n_angles, n_cols)).astype(np.float32)
    return geometry, volume, sinos


@pytest.mark.parametrize(
    "geom",
    [
        {},
        {"det_spacing": 1.3, "center": 17.25},
        {"det_spacing": 0.7, "axis_shift": "random"},
    ],
)
def test_cpu_linear_matches_float64_reference(rng, geom):
    if geom.get("axis_shift") == "random":
        geom = dict(geom, axis_shift=rng.uniform(-3, 3, 37))
    geometry, volume, sinos = random_case(rng, **geom)
    op = ParallelBackprojection(geometry, volume, backend="cpu")
    got = op(sinos)
    ref = reference_backprojection(sinos, geometry, volume)
    assert rel(got, ref) < 1e-6
    got64 = op(sinos.astype(np.float64))
    assert rel(got64, ref) < 1e-12


def test_cpu_nearest_and_linear8_match_reference(rng):
    geometry, volume, sinos = random_case(rng)
    op = ParallelBackprojection(geometry, volume, backend="cpu", interpolation="nearest")
    nearest_ref = reference_backprojection(sinos, geometry, volume, nearest=True)
    # In float64 the kernel's coordinates are the reference's to 1e-15: no sample can
    # round to the other neighbour. In float32 a sample within ~1e-5 px of a half
    # integer may pick the other one (a few samples per image at most), so there
    # the pixels agree except those few.
    nearest64 = op(sinos.astype(np.float64))
    assert rel(nearest64, nearest_ref) < 1e-12
    same = np.isclose(op(sinos), nearest64, rtol=1e-5, atol=1e-5)
    assert same.mean() > 0.95
    lin8 = ParallelBackprojection(geometry, volume, backend="cpu", interpolation="linear8")(sinos)
    exact = reference_backprojection(sinos, geometry, volume)
    err = rel(lin8, exact)
    assert 0 < err < TEXTURE_VS_EXACT_RANDOM  # 8-bit weights: close, never identical


def test_volume_wider_than_detector_gets_nothing_outside(rng):
    n = 16
    geometry = ParallelGeometry([0.0], n, n_rows=1)
    volume = VolumeGeometry((1, 4, 40))
    sinos = np.ones((1, 1, n), np.float32)
    for mode in ("linear", "nearest", "linear8"):
        out = ParallelBackprojection(geometry, volume, interpolation=mode, backend="cpu")(sinos)[0]
        x = volume.coordinates("x")
        inside = np.abs(x) <= (n - 1) / 2
        assert np.all(out[:, inside] == 1.0), mode
        assert np.all(out[:, np.abs(x) > (n - 1) / 2 + 1] == 0.0), mode
        if mode != "nearest":  # the half-pixel beyond the last column blends with zero
            edge = np.isclose(np.abs(x), (n - 1) / 2 + 0.5)
            assert np.allclose(out[:, edge], 0.5, atol=1 / 256)


def test_bad_input():
    geometry = ParallelGeometry([0.0, 1.0], 8, n_rows=2)
    volume = VolumeGeometry((2, 8, 8))
    op = ParallelBackprojection(geometry, volume, backend="cpu")
    with pytest.raises(ValueError, match="sinos"):
        op(np.zeros((2, 3, 8), np.float32))
    with pytest.raises(ValueError, match="interpolation"):
        ParallelBackprojection(geometry, volume, interpolation="cubic", backend="cpu")
    with pytest.raises(TypeError, match="geometry"):
        ParallelBackprojection(volume, volume)
    with pytest.raises(ValueError, match="backend"):
        ParallelBackprojection(geometry, volume, backend="tpu")


# -- CUDA ------------------------------------------------------------------------------------


def _gpu_case(rng, n_angles, n_cols, n_slices, shape, **geom):
    import cupy as cp

    geometry, volume, sinos = random_case(rng, n_angles, n_cols, n_slices, shape, **geom)
    op = ParallelBackprojection(geometry, volume, backend="cuda")
    out = cp.full((n_slices,) + shape, cp.nan, cp.float32)  # poison: unwritten pixels show
    got = op(cp.asarray(sinos), out=out)
    assert isinstance(got, cp.ndarray)
    got = cp.asnumpy(got)
    assert np.isfinite(got).all()
    return geometry, volume, sinos, got


@pytest.mark.gpu
@pytest.mark.parametrize(
    "n_angles,n_cols,n_slices,shape",
    [
        (1, 31, 1, (17, 19)),  # one angle, odd sizes
        (180, 64, 5, (64, 64)),
        (361, 127, 3, (101, 131)),
        (10_000, 33, 2, (21, 23)),  # several constant-memory passes
        (7, 21, 2100, (9, 11)),  # more slices than texture layers
    ],
)
def test_cuda_matches_cpu_texture_mode(rng, n_angles, n_cols, n_slices, shape):
    geometry, volume, sinos, got = _gpu_case(
        rng, n_angles, n_cols, n_slices, shape, det_spacing=1.1, axis_shift=rng.uniform(-2, 2, n_angles)
    )
    cpu = {
        mode: ParallelBackprojection(geometry, volume, interpolation=mode, backend="cpu")(sinos)
        for mode in ("linear8", "linear")
    }
    assert rel(got, cpu["linear8"]) < 1e-5
    assert rel(got, cpu["linear"]) < texture_vs_exact_bound(n_angles)


@pytest.mark.gpu
def test_cuda_nearest_matches_cpu(rng):
    import cupy as cp

    geometry, volume, sinos = random_case(rng, 200, 77, 3, (70, 81))
    gpu = ParallelBackprojection(geometry, volume, interpolation="nearest", backend="cuda")
    cpu = ParallelBackprojection(geometry, volume, interpolation="nearest", backend="cpu")
    assert rel(cp.asnumpy(gpu(cp.asarray(sinos))), cpu(sinos)) < 1e-5


@pytest.mark.gpu
def test_cuda_smooth_data_close_to_exact(rng):
    """On band-limited data the 8-bit weights cost far less than on noise."""
    import cupy as cp

    n_angles, n_cols = 256, 128
    geometry = ParallelGeometry(np.linspace(0, np.pi, n_angles, endpoint=False), n_cols, n_rows=1)
    volume = geometry.default_volume()
    s = geometry.column_positions()
    sinos = np.exp(-((s / 20.0) ** 2))[None, None, :].repeat(n_angles, 1).astype(np.float32)
    got = cp.asnumpy(ParallelBackprojection(geometry, volume, backend="cuda")(cp.asarray(sinos)))
    exact = reference_backprojection(sinos, geometry, volume)
    assert rel(got, exact) < TEXTURE_VS_EXACT_SMOOTH


@pytest.mark.gpu
def test_cuda_outside_detector_is_zero():
    import cupy as cp

    n = 16
    geometry = ParallelGeometry([0.0, 0.5], n, n_rows=1)
    volume = VolumeGeometry((1, 8, 64))
    sinos = cp.ones((1, 2, n), cp.float32)
    out = cp.asnumpy(ParallelBackprojection(geometry, volume, backend="cuda")(sinos))[0]
    cpu = ParallelBackprojection(geometry, volume, interpolation="linear8", backend="cpu")(
        np.ones((1, 2, n), np.float32)
    )[0]
    np.testing.assert_allclose(out, cpu, atol=1e-6)
    assert (out[:, :4] == 0).all() and (out[:, -4:] == 0).all()


@pytest.mark.gpu
def test_cuda_takes_numpy_returns_numpy_and_rejects_float64(rng):
    """NumPy in, NumPy out on the CUDA backend (``out`` filled in place), the
    same values as CuPy in, CuPy out; float64 is refused by name."""
    import cupy as cp

    geometry, volume, sinos = random_case(rng, 40, 30, 3, (20, 24))
    op = ParallelBackprojection(geometry, volume, backend="cuda")
    on_gpu = op(cp.asarray(sinos)).get()
    got = op(sinos)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, on_gpu)
    out = np.full_like(on_gpu, np.nan)
    assert op(sinos, out) is out
    np.testing.assert_array_equal(out, on_gpu)
    with pytest.raises(ValueError, match="sinos: the CUDA backend runs in float32"):
        op(sinos.astype(np.float64))


@pytest.mark.gpu
def test_cuda_texture_cache_reuse_is_safe(rng):
    """Cached textures are reused across calls and streams without stale data."""
    import cupy as cp
    from leveret.cuda import texture

    geometry, volume, sinos = random_case(rng, 50, 40, 4, (30, 30))
    op = ParallelBackprojection(geometry, volume, backend="cuda")
    cpu = ParallelBackprojection(geometry, volume, interpolation="linear8", backend="cpu")
    texture.clear_cache()
    first = op(cp.asarray(sinos)).get()
    assert len(texture.layered_cache().keys()) == 1
    other = rng.standard_normal(sinos.shape).astype(np.float32)
    with cp.cuda.Stream(non_blocking=True):
        second = op(cp.asarray(other)).get()
    assert len(texture.layered_cache().keys()) == 1  # the same texture, reused
    assert rel(first, cpu(sinos)) < 1e-5 and rel(second, cpu(other)) < 1e-5
    texture.clear_cache()
    assert not texture.layered_cache().keys()


@pytest.mark.gpu
def test_cuda_a_texture_above_cache_bytes_is_kept_for_the_next_call(rng):
    """A slab's texture larger than CACHE_BYTES (but within the GPU's share) is
    reused by the next slab of its shape rather than freed and made again."""
    import cupy as cp
    from leveret.cuda import texture

    geometry, volume, _ = random_case(rng, 1024, 4096, 17, (8, 8))
    op = ParallelBackprojection(geometry, volume, backend="cuda", kernel="texture")
    sinos = cp.asarray(rng.standard_normal((17, 1024, 4096), dtype=np.float32))
    texture.clear_cache()
    op(sinos)
    [first] = texture.layered_cache().entries_by_key.values()
    assert first.nbytes > texture.CACHE_BYTES
    op(sinos)
    assert list(texture.layered_cache().entries_by_key.values()) == [first]  # the same texture again
    texture.clear_cache()


@pytest.mark.parametrize("old", ["single", "exact", "double", "fast"])
def test_removed_precision_spellings_are_refused(rng, old):
    """The 0.x spellings are gone, not aliased: one vocabulary, NumPy's dtype names."""
    import leveret

    geometry, volume, sinos = random_case(rng, 30, 25, 2, (16, 18))
    with pytest.raises(ValueError, match=f"^precision: expected one of .*, got '{old}'"):
        ParallelBackprojection(geometry, volume, backend="cpu", precision=old)
    with pytest.raises(ValueError, match=f"^precision: expected one of .*, got '{old}'"):
        leveret.fbp(
            sinos[0], ParallelGeometry(np.linspace(0, np.pi, 30, endpoint=False), 25), backend="cpu", precision=old
        )


def test_precision_outside_the_vocabulary_is_an_error_naming_it():
    import leveret

    geometry = ParallelGeometry(np.linspace(0, np.pi, 8, endpoint=False), 16)
    with pytest.raises(ValueError, match="precision: expected one of 'float32', 'float64', 'float16', got 'half'"):
        leveret.fbp(np.zeros(geometry.projection_shape, np.float32), geometry, backend="cpu", precision="half")
    with pytest.raises(ValueError, match="precision: expected one of 'float32', 'float16', got 'float64'"):
        ParallelBackprojection(geometry, VolumeGeometry((16, 16)), backend="cpu", precision="float64")
    op = ParallelBackprojection(geometry, VolumeGeometry((16, 16)), backend="cpu", precision=np.float16)
    assert op.precision == "float16"  # a NumPy dtype is taken by its name


def test_repr_is_the_operators_uniform_repr():
    geometry = ParallelGeometry(np.linspace(0, np.pi, 8, endpoint=False), 16)
    text = repr(ParallelBackprojection(geometry, VolumeGeometry((16, 16)), backend="cpu", precision="float16"))
    assert text.startswith("ParallelBackprojection(ParallelGeometry(")
    assert text.endswith(
        "backend='cpu', interpolation='linear', kernel='auto', precision='float16', kernel_choice=None)"
    )
