"""The parallel-beam CUDA kernels, each against the CPU path that interpolates the
same way: texture kernels (texture, texz; float, float2) vs CPU linear8 / nearest,
fp16 texels (half2, half4) vs the CPU's fp16 round trip + linear8, the ALU kernel
vs the exact CPU reference, the hybrid vs the tile-by-tile mix of both. Outputs
are poisoned with NaN before each run; inputs are fresh random data, odd sizes,
ROIs and phantoms."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.geometry import ParallelGeometry, VolumeGeometry
from leveret.operators import ParallelBackprojection

from test_parallel_backprojection import texture_vs_exact_bound
from test_parallel_kernels import (
    FAST_TEXTURE_VS_EXACT_PHANTOM,
    FAST_VS_EXACT_SCAN,
    alu_sample_bound,
    emulate_alu,
    emulate_fp16_texture,
    fp16_texture_bound,
    random_case,
    rel,
)


pytestmark = pytest.mark.gpu


def _with_packing(kwargs: dict, packing) -> dict:
    """``kwargs`` with ``packing`` (the texels) added to its kernel_options."""
    if packing is None:
        return kwargs
    return dict(kwargs, kernel_options={**kwargs.get("kernel_options", {}), "packing": packing})


def run_gpu(geometry, volume, sinos, packing=None, **kwargs):
    import cupy as cp

    op = ParallelBackprojection(geometry, volume, backend="cuda", **_with_packing(kwargs, packing))
    ny, nx = op.out_shape
    out = cp.full((sinos.shape[0], ny, nx), cp.nan, cp.float32)  # poison: unwritten pixels show
    got = op(cp.asarray(sinos), out=out)
    assert got is out
    got = cp.asnumpy(got)
    assert np.isfinite(got).all(), f"{op.last_kernel}: unwritten or non-finite pixels"
    return got, op.last_kernel


def cpu(geometry, volume, sinos, packing=None, **kwargs):
    return ParallelBackprojection(geometry, volume, backend="cpu", **_with_packing(kwargs, packing))(sinos)


CASES = [  # n_angles, n_cols, n_slices, shape
    (1, 31, 1, (17, 19)),
    (180, 64, 3, (64, 64)),
    (361, 127, 5, (101, 131)),
    (2100, 45, 2, (37, 41)),  # two constant-memory passes
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    "config",
    [
        {"kernel": "texture", "packing": "float"},
        {"kernel": "texz", "packing": "float", "kernel_options": {"nq": 4}},
        {"kernel": "texz", "packing": "float", "kernel_options": {"nq": 8}},
        {"kernel": "texz", "kernel_options": {"nq": 4}},
        {"kernel": "texz", "kernel_options": {"nq": 8}},
    ],
)
def test_texture_kernels_match_cpu_linear8(rng, case, config):
    n_angles, n_cols, n_slices, shape = case
    geometry, volume, sinos = random_case(rng, n_angles, n_cols, n_slices, shape, det_spacing=1.1, axis_shift="random")
    got, name = run_gpu(geometry, volume, sinos, **config)
    assert name.startswith(config["kernel"])
    assert rel(got, cpu(geometry, volume, sinos, interpolation="linear8")) < 1e-5
    assert rel(got, cpu(geometry, volume, sinos)) < texture_vs_exact_bound(n_angles)


@pytest.mark.parametrize("kernel,packing", [("texz", "float"), ("texz", "float2"), ("alu", None)])
def test_nearest(rng, kernel, packing):
    geometry, volume, sinos = random_case(rng, 200, 77, 3, (70, 81))
    kw = {"packing": packing} if packing else {}
    got, _ = run_gpu(geometry, volume, sinos, kernel=kernel, interpolation="nearest", **kw)
    if kernel == "alu":
        # Against the float64 reference a bin flips wherever a sample sits within
        # the float32 in-cache coordinate's rounding (~4e-6 px at 100 bins) of a
        # bin edge: ~2e-6 of the samples, each off by a whole neighbour
        # difference, rel ~sqrt(2 x 2e-6) = 2e-3 (measured 1.8e-3 on the H200).
        # So: most pixels agree with the reference, and the whole image with the
        # kernel's own arithmetic (FMA-exact emulation), where no bin may flip.
        ref = cpu(geometry, volume, sinos.astype(np.float64), interpolation="nearest")
        assert np.mean(np.isclose(got, ref, rtol=1e-4, atol=1e-4)) > 0.99
        emulated, *_ = emulate_alu(
            sinos,
            ParallelBackprojection(geometry, volume).table(np.float64),
            *volume.shape[1:],
            32,
            nearest=True,
            fused=True,
        )
        assert rel(got, emulated) < 1e-5
    else:
        assert rel(got, cpu(geometry, volume, sinos, interpolation="nearest")) < 1e-5


# fp16 cases: the single-angle case is larger than CASES[0] (90k samples), so
# that the fp16 bound's statistics hold (fp16_texture_bound)
FP16_CASES = [(1, 127, 8, (101, 111))] + CASES[1:]


def assert_fp16_close(got, want, n_samples, detail=""):
    """fp16 texture output vs the CPU emulation (fast + linear8, ties away):
    within fp16_texture_bound (the measured residual, see its docstring)."""
    err = rel(got, want)
    assert err < fp16_texture_bound(n_samples), f"{err:.2e} (bound {fp16_texture_bound(n_samples):.2e}) {detail}"


@pytest.mark.parametrize("case", FP16_CASES)
@pytest.mark.parametrize("kernel,packing", [("texture", "half2"), ("texz", "half2"), ("texz", "half4")])
def test_fp16_kernels_match_cpu_fp16_linear8(rng, case, kernel, packing):
    n_angles, n_cols, n_slices, shape = case
    geometry, volume, sinos = random_case(rng, n_angles, n_cols, n_slices, shape, axis_shift="random")
    got, name = run_gpu(geometry, volume, sinos, kernel=kernel, precision="float16", packing=packing)
    assert packing in name
    ref = cpu(geometry, volume, sinos, interpolation="linear8", precision="float16")
    # the CPU rounds each filtered sample to fp16, ties away from zero, as the
    # texture unit does for fp16 texels; the message gives the distance to
    # other models of the fetch (which one fits)
    assert_fp16_close(got, ref, n_angles * n_slices * shape[0] * shape[1], _fp16_models(got, geometry, volume, sinos))


def _fp16_models(got, geometry, volume, sinos):
    """On failure: the GPU's distance to each model of the fp16 fetch (which one fits)."""
    table = ParallelBackprojection(geometry, volume, backend="cpu").table(np.float32)
    ny, nx = volume.shape[1:]
    models = {"ties away": {}, "ties to even": {"ties": "even"}, "unrounded samples": {"round_sample": False}}
    return ", ".join(
        f"{name}: {rel(got, emulate_fp16_texture(sinos, table, ny, nx, **kw)):.2e}" for name, kw in models.items()
    )


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("tile,nv", [(32, 1), (32, 2), (64, 1), (64, 2), (32, 4)])
def test_alu_matches_exact_cpu(rng, case, tile, nv):
    n_angles, n_cols, n_slices, shape = case
    geometry, volume, sinos = random_case(rng, n_angles, n_cols, n_slices, shape, det_spacing=0.8, axis_shift="random")
    got, name = run_gpu(geometry, volume, sinos, kernel="alu", kernel_options={"tile": tile, "nv": nv})
    assert name == f"alu-t{tile}-nv{nv}"
    exact = cpu(geometry, volume, sinos)
    if n_angles > 1:
        assert rel(got, exact) < 1e-5
    else:
        # One view's rounding is not averaged over views: on white noise at the
        # widest caches it reaches 1.1e-5 relative (NumPy emulation, 1 in 100
        # seeds over 1e-5). Each pixel stays within its sample's float32 rounding.
        table64 = ParallelBackprojection(geometry, volume).table(np.float64)
        bound = alu_sample_bound(sinos, table64, *volume.shape[1:], tile)
        assert np.all(np.abs(got - exact) <= bound)


def test_alu_positive_data_and_large_pixels(rng):
    """Sums that do not cancel (a stricter relative test), pixels 2.2x the bin width."""
    geometry, volume, sinos = random_case(rng, 500, 60, 2, (45, 47), voxel=(1.0, 2.2, 2.2), det_spacing=1.0)
    sinos = np.abs(sinos)
    got, _ = run_gpu(geometry, volume, sinos, kernel="alu", kernel_options={"tile": 32, "nv": 2})
    exact = cpu(geometry, volume, sinos)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


def _tile_mask(ny, nx, tile, num, den):
    gx = -(-nx // tile)
    j, i = np.mgrid[0:ny, 0:nx]
    block = (j // tile) * gx + (i // tile)
    return (block % den) < num


@pytest.mark.parametrize("case", CASES[1:])
@pytest.mark.parametrize("tile", [32, 64])
@pytest.mark.parametrize("ratio", [(1, 2), (1, 3), (2, 3), (1, 1)])
@pytest.mark.parametrize("packing", ["float", "float2"])
def test_hybrid_is_the_tilewise_mix(rng, case, tile, ratio, packing):
    n_angles, n_cols, n_slices, shape = case
    geometry, volume, sinos = random_case(rng, n_angles, n_cols, n_slices, shape, axis_shift="random")
    got, name = run_gpu(
        geometry, volume, sinos, kernel="hybrid", packing=packing, kernel_options={"tile": tile, "ratio": ratio}
    )
    assert name.startswith(f"hybrid-{ratio[0]}/{ratio[1]}")
    mask = _tile_mask(*shape, tile, *ratio)
    want = np.where(mask, cpu(geometry, volume, sinos, interpolation="linear8"), cpu(geometry, volume, sinos))
    assert rel(got, want) < 1e-5


@pytest.mark.parametrize(
    "config",
    [
        {"kernel": "texture"},
        {"kernel": "texz"},
        {"kernel": "alu", "kernel_options": {"tile": 64}},
        {"kernel": "alu", "kernel_options": {"tile": 32, "nv": 4}},
        {
            "kernel": "hybrid",
            "precision": "float16",
            "packing": "half4",
            "kernel_options": {"tile": 32, "ratio": (1, 2)},
        },
        {"kernel": "hybrid", "kernel_options": {"tile": 32, "ratio": (1, 2)}},
        {"kernel": "texz", "precision": "float16", "packing": "half4"},
    ],
)
@pytest.mark.parametrize("roi", [(5, 7, 40, 33), (0, 0, 1, 1), (60, 70, 10, 11)])
def test_roi_matches_cpu_roi(rng, config, roi):
    geometry, volume, sinos = random_case(rng, 300, 100, 4, (70, 81), axis_shift="random")
    got, _ = run_gpu(geometry, volume, sinos, roi=roi, **config)
    assert got.shape == (4, roi[2], roi[3])
    fast = config.get("precision") == "float16"
    lin8 = cpu(geometry, volume, sinos, roi=roi, interpolation="linear8", precision="float16" if fast else "float32")
    exact = cpu(geometry, volume, sinos, roi=roi)
    # texture pixels (all, or the hybrid's texture tiles: laid over the ROI,
    # whose corner is tile (0, 0)) against linear8, the others against exact
    if config["kernel"] == "alu":
        mask = np.zeros(roi[2:], bool)
    elif config["kernel"] == "hybrid":
        mask = _tile_mask(roi[2], roi[3], 32, 1, 2)
    else:
        mask = np.ones(roi[2:], bool)
    mask = np.broadcast_to(mask, got.shape)
    if (~mask).any():
        assert rel(got[~mask], exact[~mask]) < 1e-5
    if fast and mask.sum() >= 1000:  # fp16 texels: the measured fp16 residual (fp16_texture_bound)
        assert_fp16_close(got[mask], lin8[mask], 300 * int(mask.sum()))
    elif fast:
        # A few pixels: each sum of 300 fetches has ~0.3 fetches one fp16 step
        # off the emulation, and the sums' own size is chance (signed noise
        # cancels), so rel() against them failed by chance (1.3e-4 against
        # 9.2e-5, 4 pixels: seed 214806742802172709351367218765866640766).
        # Against the sums of |terms|, which nothing cancels, the bound holds
        # with room; a misplaced ROI is still off by O(1).
        scale = cpu(geometry, volume, np.abs(sinos), roi=roi, interpolation="linear8", precision="float16")
        assert np.linalg.norm(got[mask] - lin8[mask]) / np.linalg.norm(scale[mask]) < fp16_texture_bound(300)
    elif mask.any():
        assert rel(got[mask], lin8[mask]) < 1e-5


@pytest.mark.parametrize("case", CASES[1:])
@pytest.mark.parametrize("packing,ratio", [("half2", (1, 2)), ("half4", (1, 3)), ("half4", (1, 2)), ("half4", (2, 3))])
def test_fast_hybrid_is_the_tilewise_mix(rng, case, packing, ratio):
    """Fast hybrid: fp16 texture tiles (CPU fast + linear8) beside float32 ALU tiles (exact)."""
    n_angles, n_cols, n_slices, shape = case
    geometry, volume, sinos = random_case(rng, n_angles, n_cols, n_slices, shape, axis_shift="random")
    got, name = run_gpu(
        geometry,
        volume,
        sinos,
        kernel="hybrid",
        precision="float16",
        packing=packing,
        kernel_options={"tile": 32, "ratio": ratio},
    )
    assert name.startswith(f"hybrid-{ratio[0]}/{ratio[1]}-{packing}")
    mask = np.broadcast_to(_tile_mask(*shape, 32, *ratio), got.shape)
    fast8 = cpu(geometry, volume, sinos, interpolation="linear8", precision="float16")
    assert rel(got[~mask], cpu(geometry, volume, sinos)[~mask]) < 1e-5  # ALU tiles: exact
    assert_fp16_close(got[mask], fast8[mask], n_angles * int(mask.sum()))  # fp16 texture tiles


def test_fast_fbp_phantom_bound():
    import cupy as cp

    geometry = ParallelGeometry(np.linspace(0, np.pi, 400, endpoint=False), 256)
    sino = phantom.shepp_logan_ellipses(100.0).project(geometry).astype(np.float32)
    exact = leveret.fbp(sino, geometry, backend="cpu")
    for packing in ("half2", "half4"):
        stack = np.repeat(sino[:, None, :], 4, axis=1)
        g3 = ParallelGeometry(geometry.angles, 256, n_rows=4)
        fast = cp.asnumpy(
            leveret.fbp(
                cp.asarray(stack),
                g3,
                backend="cuda",
                precision="float16",
                kernel="texz",
                kernel_options={"packing": packing},
            )
        )
        for k in range(4):
            assert rel(fast[k], exact) < FAST_TEXTURE_VS_EXACT_PHANTOM


def test_fast_fbp_real_scan_bound(savu_scan):
    import cupy as cp
    from leveret.preprocess import minus_log, normalize

    scan = savu_scan
    p = minus_log(normalize(scan.projections, scan.flat, scan.dark)).astype(np.float32)
    g = ParallelGeometry(scan.angles, 160, n_rows=135, center=86.0)
    vol = VolumeGeometry((16, 160, 160), center=(g.row_positions()[60:76].mean(), 0.0, 0.0))
    d = cp.asarray(p)
    exact = cp.asnumpy(leveret.fbp(d, g, vol, backend="cuda", kernel="texz"))
    fast = cp.asnumpy(leveret.fbp(d, g, vol, backend="cuda", kernel="texz", precision="float16"))
    assert 0 < rel(fast, exact) < FAST_VS_EXACT_SCAN  # the same 8-bit weights: only fp16 differs


def test_streamed_equals_in_memory_alu(rng):
    import cupy as cp

    g = ParallelGeometry(np.linspace(0, np.pi, 120, endpoint=False), 64, n_rows=9)
    proj = rng.standard_normal((120, 9, 64)).astype(np.float32)
    vol = g.default_volume()
    ref = cp.asnumpy(leveret.fbp(cp.asarray(proj), g, vol, backend="cuda", kernel="alu"))
    streamed = leveret.fbp(proj, g, vol, backend="cuda", kernel="alu", slab_slices=2)
    np.testing.assert_allclose(streamed, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    cpu_ref = leveret.fbp(proj, g, vol, backend="cpu")
    assert rel(ref, cpu_ref) < 1e-5


def test_tune_caches_and_auto_uses_it(rng, tmp_path, monkeypatch):
    import cupy as cp
    from leveret.cuda import tuning

    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))
    geometry, volume, sinos = random_case(rng, 256, 96, 4, (96, 96))
    op = ParallelBackprojection(geometry, volume, backend="cuda")
    best, results = op.tune(cp.asarray(sinos), repeats=1)
    assert len(results) >= 5 and best == min(results, key=lambda r: r[1])[0]
    assert tuning.lookup(_name(), op.problem_key(4)) is not None
    got, name = run_gpu(geometry, volume, sinos)
    assert name.startswith(best["kernel"])
    again = ParallelBackprojection(geometry, volume, backend="cuda")
    again(cp.asarray(sinos))
    assert "tuned for" in again.kernel_choice and str(tmp_path) in again.kernel_choice


def _name():
    from leveret.operators.parallel import _gpu_name

    return _gpu_name()


# -- kernel="auto" without a tuning cache: the measured defaults ---------------------------------


@pytest.fixture
def no_tuning(monkeypatch, tmp_path):
    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))  # an empty cache: the rule decides


@pytest.mark.parametrize("n_slices,name", [(1, "alu-t64-nv1"), (2, "alu-t64-nv2"), (5, "alu-t32-nv4")])
def test_auto_default_exact_is_the_alu_kernel(rng, no_tuning, n_slices, name):
    geometry, volume, sinos = random_case(rng, 300, 90, n_slices, (70, 81), axis_shift="random")
    got, ran = run_gpu(geometry, volume, sinos)
    assert ran == name
    assert rel(got, cpu(geometry, volume, sinos)) < 1e-5  # exact weights everywhere


def test_auto_default_falls_back_to_texz(rng, no_tuning):
    """Pixels 7 bins wide: the ALU cache does not fit, texz (8-bit weights) runs."""
    geometry, volume, sinos = random_case(rng, 200, 400, 3, (40, 50), voxel=(1.0, 3.5, 3.5), det_spacing=0.5)
    got, ran = run_gpu(geometry, volume, sinos)
    assert ran == "texz-float2-q8"
    assert rel(got, cpu(geometry, volume, sinos, interpolation="linear8")) < 1e-5


@pytest.mark.parametrize("n_slices,ratio", [(2, (1, 2)), (6, (2, 3))])
def test_auto_default_fast_is_the_fast_hybrid(rng, no_tuning, n_slices, ratio):
    geometry, volume, sinos = random_case(rng, 300, 90, n_slices, (70, 81), axis_shift="random")
    got, ran = run_gpu(geometry, volume, sinos, precision="float16")
    nv = 2 if n_slices < 3 else 4
    assert ran == f"hybrid-{ratio[0]}/{ratio[1]}-half{nv}-t32-nv{nv}"
    mask = np.broadcast_to(_tile_mask(70, 81, 32, *ratio), got.shape)
    fast8 = cpu(geometry, volume, sinos, interpolation="linear8", precision="float16")
    assert rel(got[~mask], cpu(geometry, volume, sinos)[~mask]) < 1e-5  # ALU tiles: exact
    assert_fp16_close(got[mask], fast8[mask], 300 * int(mask.sum()))  # fp16 texture tiles


def test_fbp_default_from_numpy_is_exact(rng, no_tuning):
    """NumPy in and out through the streamed pipeline with the default kernel
    (ALU): equal to the exact CPU FBP, not only to the texture emulation."""
    g = ParallelGeometry(np.linspace(0, np.pi, 240, endpoint=False), 96, n_rows=21, axis_shift=rng.uniform(-1, 1, 240))
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    st: dict = {}
    got = leveret.fbp(proj, g, slab_slices=4, stats=st)  # the time split the stack benchmark reports
    assert rel(got, leveret.fbp(proj, g, backend="cpu")) < 1e-5
    assert st["chunks"] == 6 and st["wall"] > 0 and st["compute"] > 0 and st["h2d"] > 0 and st["d2h"] > 0
    assert st["load"] > 0 and st["store"] > 0


@pytest.mark.parametrize("numpy_in", [False, True])
def test_fbp_roi_gpu(rng, no_tuning, numpy_in):
    """fbp(roi=...) on CUDA: the window of the full reconstruction, from CuPy or
    through the streamed pipeline from NumPy."""
    import cupy as cp

    g = ParallelGeometry(np.linspace(0, np.pi, 180, endpoint=False), 80, n_rows=9)
    vol = VolumeGeometry((9, 70, 75))
    proj = rng.standard_normal(g.projection_shape).astype(np.float32)
    roi = (3, 40, 50, 33)
    data = proj if numpy_in else cp.asarray(proj)
    got = leveret.fbp(data, g, vol, roi=roi, slab_slices=2 if numpy_in else None)
    got = got if numpy_in else cp.asnumpy(got)
    assert got.shape == (9, 50, 33)
    assert rel(got, leveret.fbp(proj, g, vol, backend="cpu")[:, 3:53, 40:73]) < 1e-5
