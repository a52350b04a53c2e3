"""The parallel-beam kernels, CPU side: fp16 packing, ROI geometry, the ALU kernel's
cache arithmetic (emulated in NumPy float32 against the exact reference), the
fast mode's error bound, and the tuner's cache logic with a fake timer."""

from __future__ import annotations

import json

import numpy as np
import pytest

import leveret
from leveret import phantom
from leveret.cuda import tuning
from leveret.cuda.backproject_parallel import (
    MAX_EXACT_CACHE_WIDTH,
    alu_plan,
    alu_table,
    cache_width,
    pack_slices,
    unpack_slices,
)
from leveret.geometry import ParallelGeometry, VolumeGeometry
from leveret.operators import ParallelBackprojection
from leveret.operators.parallel import parallel_table

# Bounds of the fp16 storage of filtered sinograms (precision "float16") against
# float32, relative 2-norm of the FBP image, both with exact linear weights
# (CPU, 2026-11-22): Shepp-Logan 256^2 from 400 angles measured 5.4e-5, the
# real scan (8 slices) 8.4e-5. With the texture unit's 8-bit weights as well
# (what the GPU's fast mode does): 4.4e-4 on the phantom, of which 4.3e-4 are
# the 8-bit weights alone. The GPU tests use FAST_TEXTURE_VS_EXACT_PHANTOM.
FAST_VS_EXACT_PHANTOM = 2e-4
FAST_VS_EXACT_SCAN = 2e-4
FAST_TEXTURE_VS_EXACT_PHANTOM = 1e-3


def fp16_texture_bound(n_samples):
    """Bound on rel(GPU fp16 texture kernel, CPU emulation) for a comparison
    that sums ``n_samples`` fp16 fetches (angles x pixels x slices).

    Measured on the H200 (2026-11-22), white noise: the emulation with ties
    away from zero differs from the GPU by 0 (one angle, 323 samples) and by
    1.6e-5 to 1.9e-5 (180 to 2100 angles); the same emulation with ties to
    even is 4.3e-5 to 5.4e-5 away, without the final fp16 rounding 2.0e-4.
    Simulated, 1.7e-5 is what about 0.1 % of the samples one fp16 step off
    give (ties to even moves 0.9 % of them: 4.7e-5): the texture unit's
    internal arithmetic is not reproduced bit for bit (models that truncate
    the products to 18 bits or align the smaller product to 19 bits give 1.6e-5
    to 2.0e-5; which one, if any, the hardware uses is not known). So 3e-5, about
    1.7x the measured residual and below every ties-to-even measurement; with
    few samples the count of off samples fluctuates (Poisson), hence the
    sqrt(1 + 1e4 / n) widening (1 % at 1e6 samples, 3x at 1200). At the GPU
    tests' sizes ties to even lands above the bound: 1.19x to 2.0x (30 seeds,
    one angle x 8 slices of 101 x 111), 1.45x to 1.62x (12 seeds, 180 angles x
    2 slices of 64 x 64); the measured GPU residual is 0.53x to 0.64x of it.
    test_fp16_bound_rejects_wrong_models checks that ties to even and
    unrounded samples exceed it."""
    return 3e-5 * float(np.sqrt(1.0 + 1e4 / n_samples))


def rel(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def random_case(rng, n_angles=37, n_cols=41, n_slices=3, shape=(29, 33), voxel=(1.0, 0.9, 1.1), **geom):
    angles = rng.uniform(0, 2 * np.pi, n_angles)
    if isinstance(geom.get("axis_shift"), str):
        geom["axis_shift"] = rng.uniform(-3, 3, n_angles)
    geometry = ParallelGeometry(angles, n_cols, n_rows=n_slices, **geom)
    volume = VolumeGeometry((n_slices,) + shape, voxel_size=voxel, center=(0.0, 1.5, -2.0))
    sinos = rng.standard_normal((n_slices, n_angles, n_cols)).astype(np.float32)
    return geometry, volume, sinos


# -- packing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("per", [1, 2, 4])
@pytest.mark.parametrize("n_slices", [1, 2, 3, 5, 8])
def test_pack_unpack_roundtrip(rng, per, n_slices):
    x = rng.standard_normal((n_slices, 7, 11)).astype(np.float32)
    for dtype in (np.float32, np.float16):
        packed = pack_slices(x, per, dtype)
        layers = -(-n_slices // per)
        assert packed.shape == (layers, 7, per * 11) and packed.dtype == dtype
        # texel (L, n, c) holds slices per*L .. per*L+per-1 in its channels
        four = packed.reshape(layers, 7, 11, per)
        for k in range(n_slices):
            np.testing.assert_array_equal(four[k // per, :, :, k % per], x[k].astype(dtype))
        for k in range(n_slices, layers * per):  # padding channels are zero
            assert not four[k // per, :, :, k % per].any()
        np.testing.assert_array_equal(unpack_slices(packed, per, n_slices), x.astype(dtype))


# -- region of interest ------------------------------------------------------------------------


def test_roi_table_is_the_shifted_table(rng):
    geometry, volume, _ = random_case(rng, det_spacing=1.3, center=17.25)
    full = parallel_table(geometry, volume, np.float64)
    j0, i0 = 5, 7
    roi = parallel_table(geometry, volume, np.float64, (j0, i0))
    np.testing.assert_allclose(roi[:, :2], full[:, :2], rtol=0, atol=0)
    np.testing.assert_allclose(roi[:, 2], full[:, 2] + i0 * full[:, 0] + j0 * full[:, 1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_roi_equals_crop_of_full_slice(rng, mode):
    geometry, volume, sinos = random_case(rng, det_spacing=0.8, axis_shift="random")
    full = ParallelBackprojection(geometry, volume, backend="cpu", interpolation=mode)(sinos)
    same = []
    for roi in [(0, 0, 29, 33), (3, 4, 10, 7), (28, 32, 1, 1), (0, 10, 29, 1)]:
        y0, x0, h, w = roi
        op = ParallelBackprojection(geometry, volume, backend="cpu", interpolation=mode, roi=roi)
        assert op.out_shape == (h, w)
        got = op(sinos)
        assert got.shape == (3, h, w)
        crop = full[:, y0 : y0 + h, x0 : x0 + w]
        if mode == "linear":
            np.testing.assert_allclose(got, crop, rtol=1e-5, atol=1e-5 * np.abs(full).max())
        same.append(np.isclose(got, crop, rtol=1e-5, atol=1e-5).ravel())
    # nearest: float32 coordinates round differently after the shift, so a
    # sample within rounding of a bin edge may take the other bin: rare flips,
    # counted over all ~3200 pixels (one flip in the 210 of a small ROI is
    # already 0.5 %).
    assert np.mean(np.concatenate(same)) > 0.99


@pytest.mark.parametrize("roi", [(0, 0, 0, 5), (-1, 0, 3, 3), (0, 0, 30, 33), (1.5, 0, 2, 2), (0, 0, 2)])
def test_bad_roi(rng, roi):
    geometry, volume, _ = random_case(rng)
    with pytest.raises(ValueError, match="roi"):
        ParallelBackprojection(geometry, volume, backend="cpu", roi=roi)


def test_bad_kernel_combinations(rng):
    geometry, volume, _ = random_case(rng)
    with pytest.raises(ValueError, match="kernel"):
        ParallelBackprojection(geometry, volume, backend="cpu", kernel="fastest")
    with pytest.raises(ValueError, match="kernel"):
        ParallelBackprojection(geometry, volume, backend="cpu", kernel="alu", precision="float16")
    with pytest.raises(ValueError, match="kernel"):
        ParallelBackprojection(geometry, volume, backend="cpu", kernel="alu", interpolation="linear8")
    with pytest.raises(ValueError, match=r"^kernel_options\['packing'\]: 'half4' texels hold fp16"):
        ParallelBackprojection(geometry, volume, backend="cpu", kernel_options={"packing": "half4"})
    with pytest.raises(ValueError, match=r"^kernel_options\['packing'\]: 'float2' texels hold float32"):
        ParallelBackprojection(
            geometry, volume, backend="cpu", kernel_options={"packing": "float2"}, precision="float16"
        )
    with pytest.raises(ValueError, match=r"^kernel_options\['packing'\]: expected one of"):
        ParallelBackprojection(geometry, volume, backend="cpu", kernel_options={"packing": "half8"})
    with pytest.raises(ValueError, match="kernel_options"):
        ParallelBackprojection(geometry, volume, backend="cpu", kernel_options={"tiles": 3})
    with pytest.raises(ValueError, match="precision"):
        ParallelBackprojection(geometry, volume, backend="cpu", precision="half")


# -- the ALU kernel's arithmetic, emulated ----------------------------------------------------


def fma32(x, y, z):
    """float32 fused multiply-add, correctly rounded (CUDA's __fmaf_rn), in NumPy.

    x*y of two float32 is exact in float64; the float64 sum s = x*y + z can be
    off the exact value, which matters only when s lands exactly on a midpoint
    between two float32 values (double rounding): there the sign of the
    two-sum error says which neighbour the exact value rounds to."""
    x, y, z = (np.asarray(v, np.float32).astype(np.float64) for v in (x, y, z))
    p = x * y
    s = p + z
    bb = s - p
    err = (p - (s - bb)) + (z - bb)
    r = s.astype(np.float32)
    r64 = r.astype(np.float64)
    other = np.nextafter(r, np.where(s > r64, np.float32(np.inf), np.float32(-np.inf))).astype(np.float64)
    tie = (s != r64) & (s == (r64 + other) / 2) & (err != 0)
    toward_other = (err > 0) == (other > r64)
    return np.where(tie & toward_other, other, r64).astype(np.float32)


def _alu_tiles(table64, tile, ny, nx):
    """The ALU kernel's per-pixel set-up (tile_body): each pixel's in-tile
    indices lx, ly, and per view (a, b, hm, off), each tile's first cached
    column hm and its corner's offset off = hb - hm from it, in float64
    (the kernel rounds off to float32)."""
    t64 = alu_table(table64, tile)
    j, i = np.mgrid[0:ny, 0:nx]
    tx, ty = i // tile, j // tile  # tile of each pixel

    def views():
        for a, b, c, cm in t64:
            hb = c + (tx * tile) * a + (ty * tile) * b  # per tile
            hm = np.floor(hb + cm) - 1.0
            yield a, b, hm, hb - hm

    return i % tile, j % tile, views()


def emulate_alu(sinos, table64, ny, nx, tile, nearest=False, fused=False):
    """NumPy transcription of tile_body's ALU path (float32 where the kernel is
    float32, float64 where it is float64). ``fused=False``: the in-tile
    coordinate without FMAs; ``fused=True``: with the kernel's __fmaf_rn
    order, h0 = fma(bx, a, fma(by, b, off)), h = fma(16 rx, a, fma(16 ry, b, h0)),
    bit for bit (the GPU's nearest samples then pick the same bins).
    Returns the image and the smallest/largest cache index any pixel read."""
    n_slices, _, n_cols = sinos.shape
    cw = cache_width(table64, tile)
    lx, ly, views = _alu_tiles(table64, tile, ny, nx)
    lx, ly = lx.astype(np.float32), ly.astype(np.float32)
    out = np.zeros((n_slices, ny, nx), np.float32)
    lo, hi = np.inf, -np.inf
    for n, (a, b, hm, off) in enumerate(views):
        off = off.astype(np.float32)
        a32, b32 = np.float32(a), np.float32(b)
        if fused:
            bx, rx = lx % 16, lx - lx % 16  # base pixel, 16 rx
            by, ry = ly % 16, ly - ly % 16
            h0 = fma32(bx, a32, fma32(by, b32, off))
            h = fma32(rx, a32, fma32(ry, b32, h0))
        else:
            h = off + lx * a32 + ly * b32  # float32
        if nearest:
            h = h + np.float32(0.5)
        k = np.floor(h)
        w = (h - k).astype(np.float32)
        k = k.astype(np.int64)
        lo, hi = min(lo, k.min()), max(hi, k.max())
        col = hm.astype(np.int64) + k
        for s in range(n_slices):
            q = np.concatenate([np.zeros(1, np.float32), sinos[s, n], np.zeros(1, np.float32)])
            v0 = q[np.clip(col, -1, n_cols) + 1]
            if nearest:
                out[s] += v0
                continue
            v1 = q[np.clip(col + 1, -1, n_cols) + 1]
            out[s] += v0 + w * (v1 - v0)
    return out, lo, hi, cw


def alu_sample_bound(sinos, table64, ny, nx, tile):
    """Per pixel, the sum over views of how far the ALU kernel's float32 sample
    can be from the exact one: its in-cache coordinate h = off + i a + j b
    rounds off, a and b to float32 and rounds four FMAs, each within 2^-24 of
    the largest magnitude H = |off| + i |a| + j |b|, so |dh| <= 6 2^-24 H moves
    the (continuous) linear sample by at most dh times the steepest of the
    bins around it; the cached difference (up to twice the bins' largest
    magnitude S) and the sample's FMA round within 3 2^-24 S, taken as
    4 2^-24 S. The float32 sum over views is not included (so the bound is
    tight for one view)."""
    n_slices, _, n_cols = sinos.shape
    lx, ly, views = _alu_tiles(table64, tile, ny, nx)
    out = np.zeros((n_slices, ny, nx))
    for n, (a, b, hm, off) in enumerate(views):
        dh = 6 * 2.0**-24 * (np.abs(off) + lx * abs(a) + ly * abs(b))
        col = hm.astype(np.int64) + np.floor(off + lx * a + ly * b).astype(np.int64)
        for s in range(n_slices):
            q = np.concatenate([np.zeros(2), sinos[s, n].astype(np.float64), np.zeros(3)])
            at = lambda d: q[np.clip(col + d, -2, n_cols + 2) + 2]  # noqa: E731
            steep = np.max([np.abs(at(d + 1) - at(d)) for d in (-1, 0, 1)], axis=0)
            size = np.max([np.abs(at(d)) for d in (-1, 0, 1, 2)], axis=0)
            out[s] += dh * steep + 4 * 2.0**-24 * size
    return out


@pytest.mark.parametrize("tile", [32, 64])
def test_alu_sample_bound_holds_for_the_kernels_arithmetic_and_not_for_a_shifted_coordinate(rng, tile):
    geometry, volume, sinos = random_case(rng, 1, 127, 2, (101, 111), det_spacing=0.8, axis_shift="random")
    table64 = ParallelBackprojection(geometry, volume).table(np.float64)
    exact = ParallelBackprojection(geometry, volume, backend="cpu")(sinos)
    bound = alu_sample_bound(sinos, table64, 101, 111, tile)
    for fused in (False, True):
        got, *_ = emulate_alu(sinos, table64, 101, 111, tile, fused=fused)
        assert np.all(np.abs(got - exact) <= bound)
    shifted = table64.copy()
    shifted[:, 2] += 1e-4  # every detector coordinate 1e-4 px off
    got, *_ = emulate_alu(sinos, shifted, 101, 111, tile, fused=True)
    assert np.any(np.abs(got - exact) > bound)


@pytest.mark.parametrize("tile", [32, 64])
@pytest.mark.parametrize(
    "geom,voxel",
    [
        ({}, (1.0, 1.0, 1.0)),
        ({"det_spacing": 0.45, "axis_shift": "random"}, (1.0, 0.9, 1.1)),
        ({"det_spacing": 2.5, "center": 3.0}, (1.0, 1.0, 1.0)),
    ],
)
def test_alu_cache_indices_stay_inside_and_match_exact(rng, tile, geom, voxel):
    geometry, volume, sinos = random_case(rng, n_angles=60, n_cols=90, n_slices=2, shape=(70, 77), voxel=voxel, **geom)
    table64 = parallel_table(geometry, volume, np.float64, (3, 2))
    got, lo, hi, cw = emulate_alu(sinos, table64, 67, 75, tile)
    assert lo >= 0 and hi <= cw - 2, (lo, hi, cw)  # the kernel never reads outside its cache
    exact = ParallelBackprojection(geometry, volume, backend="cpu", roi=(3, 2, 67, 75))(sinos)
    if cw > MAX_EXACT_CACHE_WIDTH:
        # float32 cache coordinates this large lose the 1e-5: the launcher refuses the tile
        with pytest.raises(ValueError, match="tile"):
            alu_plan(table64, tile, 2)
        print(f"cw {cw}: refused; its error would be {rel(got, exact):.2e}")
        return
    assert alu_plan(table64, tile, 2)[0] == cw
    assert rel(got, exact) < 1e-5
    near, lo, hi, _ = emulate_alu(sinos, table64, 67, 75, tile, nearest=True)
    assert lo >= 0 and hi <= cw - 2
    ref = ParallelBackprojection(geometry, volume, backend="cpu", roi=(3, 2, 67, 75), interpolation="nearest")(
        sinos.astype(np.float64)
    )
    # Detector coordinates within float32 rounding of a half-pixel pick the other neighbour in
    # float32: measured mismatch shares 0.01-0.3 % over 40 seeds, 1.3 % once; a wrong
    # neighbour rule mismatches most pixels.
    assert np.mean(np.isclose(near, ref, rtol=1e-4, atol=1e-4)) > 0.97


def test_fma32_is_correctly_rounded(rng):
    x = rng.standard_normal(50000).astype(np.float32)
    y = rng.standard_normal(50000).astype(np.float32)
    z = (rng.standard_normal(50000) * 10.0 ** rng.uniform(-8, 3, 50000)).astype(np.float32)
    from fractions import Fraction

    got = fma32(x, y, z)
    for k in range(0, 50000, 97):  # exact rational arithmetic on a sample
        exact = Fraction(float(x[k])) * Fraction(float(y[k])) + Fraction(float(z[k]))
        cands = [
            np.float32(float(exact)),
            np.nextafter(np.float32(float(exact)), np.float32(np.inf)),
            np.nextafter(np.float32(float(exact)), np.float32(-np.inf)),
        ]
        best = min(cands, key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(np.int32)) & 1))
        assert got[k] == best, k
    # just above the midpoint between 1 and the next float32: rounds up
    one_half_ulp = np.float32(1.0 + 2.0**-24 + 2.0**-40 - 1.0)
    assert fma32(np.float32(1.0), np.float32(1.0), one_half_ulp) == np.nextafter(np.float32(1), np.float32(2))


def test_alu_nearest_fused_emulation(rng):
    """The GPU's nearest ALU path is compared with the fused emulation (test_nearest):
    here the fused and unfused float32 coordinates pick the same bins but for a
    few samples, and both stay close to the float64 reference."""
    geometry, volume, sinos = random_case(rng, 200, 77, 3, (70, 81))
    table64 = parallel_table(geometry, volume, np.float64)
    fused, lo, hi, cw = emulate_alu(sinos, table64, 70, 81, 32, nearest=True, fused=True)
    assert lo >= 0 and hi <= cw - 2
    plain, *_ = emulate_alu(sinos, table64, 70, 81, 32, nearest=True)
    ref = ParallelBackprojection(geometry, volume, backend="cpu", interpolation="nearest")(sinos.astype(np.float64))
    for img in (fused, plain):
        assert np.mean(np.isclose(img, ref, rtol=1e-4, atol=1e-4)) > 0.99
    assert np.mean(np.isclose(fused, plain, rtol=1e-4, atol=1e-4)) > 0.99


# -- fast (fp16) mode: error bound ---------------------------------------------------------------


def test_fast_mode_error_bound_phantom():
    geometry = ParallelGeometry(np.linspace(0, np.pi, 400, endpoint=False), 256)
    sino = phantom.shepp_logan_ellipses(100.0).project(geometry).astype(np.float32)
    exact = leveret.fbp(sino, geometry, backend="cpu")
    fast = leveret.fbp(sino, geometry, backend="cpu", precision="float16")
    err = rel(fast, exact)
    print(f"fast vs exact, Shepp-Logan: {err:.2e}")
    assert 0 < err < FAST_VS_EXACT_PHANTOM
    fast8 = leveret.fbp(sino, geometry, backend="cpu", precision="float16", interpolation="linear8")
    assert rel(fast8, exact) < FAST_TEXTURE_VS_EXACT_PHANTOM


def test_fast_mode_error_bound_real_scan(savu_scan):
    from leveret.preprocess import minus_log, normalize

    scan = savu_scan
    p = minus_log(normalize(scan.projections, scan.flat, scan.dark))
    g = ParallelGeometry(scan.angles, 160, n_rows=135, center=86.0)
    vol = VolumeGeometry((8, 160, 160), center=(g.row_positions()[60:68].mean(), 0.0, 0.0))
    exact = leveret.fbp(p, g, vol, backend="cpu")
    fast = leveret.fbp(p, g, vol, backend="cpu", precision="float16")
    err = rel(fast, exact)
    print(f"fast vs exact, real scan: {err:.2e}")
    assert 0 < err < FAST_VS_EXACT_SCAN


def _to_fp16(x, ties):
    """float64 -> nearest float16 (as float32): ties to even, or away from zero."""
    r = x.astype(np.float16)
    if ties == "even":
        return r.astype(np.float32)
    r64 = r.astype(np.float64)
    other = np.nextafter(r, np.where(x > r64, np.float16(np.inf), np.float16(-np.inf))).astype(np.float64)
    tie = (x != r64) & (x == (r64 + other) / 2)
    return np.where(tie & (np.abs(other) > np.abs(r64)), other, r64).astype(np.float32)


def emulate_fp16_texture(sinos, table32, ny, nx, ties="away", round_sample=True):
    """NumPy transcription of a linear fetch from fp16 texels: values rounded
    to float16, the coordinate and 8-bit weight in float32 as the kernels
    compute them, the filtered sample rounded to float16 (what the texture unit
    returns for 16-bit float texels; ``ties`` "away" (measured) or "even", or not at all
    with ``round_sample=False``), samples summed in float32."""
    q16 = sinos.astype(np.float16).astype(np.float64)
    n_slices, n_angles, n_cols = sinos.shape
    j, i = np.mgrid[0:ny, 0:nx].astype(np.float32)
    out = np.zeros((n_slices, ny, nx), np.float32)
    for n in range(n_angles):
        a, b, c = table32[n]
        u = (i * a + j * b) + c
        xb = u - np.float32(0.5)
        fl = np.floor(xb)
        f = (np.floor((xb - fl) * np.float32(256) + np.float32(0.5)) / np.float32(256)).astype(np.float64)
        i0 = fl.astype(np.int64)
        for s in range(n_slices):
            padded = np.concatenate([[0.0], q16[s, n], [0.0]])
            v0 = padded[np.clip(i0, -1, n_cols) + 1]
            v1 = padded[np.clip(i0 + 1, -1, n_cols) + 1]
            exact = (1.0 - f) * v0 + f * v1
            sample = _to_fp16(exact, ties) if round_sample else exact.astype(np.float32)
            out[s] += sample
    return out


def test_cpu_fast_linear8_is_the_fp16_texture_fetch(rng):
    geometry, volume, sinos = random_case(rng, axis_shift="random")
    fast = ParallelBackprojection(geometry, volume, backend="cpu", precision="float16", interpolation="linear8")
    got = fast(sinos)
    assert fast.last_kernel == "cpu-linear8-fp16"
    want = emulate_fp16_texture(sinos, fast.table(np.float32), volume.ny, volume.nx)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
    # the tie rule matters (about 1 % of the samples are ties): 3e-5 to 5e-5 apart
    assert rel(got, emulate_fp16_texture(sinos, fast.table(np.float32), volume.ny, volume.nx, ties="even")) > 1e-5
    # the final fp16 rounding is what the GPU measured (2e-4 apart without it)
    unrounded = ParallelBackprojection(geometry, volume, backend="cpu", interpolation="linear8")(
        sinos.astype(np.float16).astype(np.float32)
    )
    assert 5e-5 < rel(got, unrounded) < 5e-4


@pytest.mark.parametrize("n_angles", [1, 180])
def test_fp16_bound_rejects_wrong_models(rng, n_angles):
    """The GPU tests' fp16 bound can fail: emulations with ties to even or
    without the final rounding are further from the CPU fast mode (ties away)
    than fp16_texture_bound allows, at the sizes the GPU tests use."""
    shape = (101, 111) if n_angles == 1 else (64, 64)
    # the GPU tests' sizes: one angle has few distinct coordinates, 8 slices
    # give it enough independent samples (ties to even 1.2x to 2x the bound)
    geometry, volume, sinos = random_case(
        rng, n_angles, 127 if n_angles == 1 else 64, 8 if n_angles == 1 else 2, shape, axis_shift="random"
    )
    got = ParallelBackprojection(geometry, volume, backend="cpu", precision="float16", interpolation="linear8")(sinos)
    table = ParallelBackprojection(geometry, volume, backend="cpu").table(np.float32)
    bound = fp16_texture_bound(n_angles * sinos.shape[0] * volume.ny * volume.nx)
    assert rel(got, emulate_fp16_texture(sinos, table, volume.ny, volume.nx, ties="even")) > bound
    assert rel(got, emulate_fp16_texture(sinos, table, volume.ny, volume.nx, round_sample=False)) > 3 * bound


def test_round_fp16_matches_numpy_ties_away(rng):
    """_round_fp16 is NumPy's float16 conversion except at ties, which go away
    from zero (NumPy: to even)."""
    from leveret.cpu.backproject_parallel import _round_fp16

    h = rng.standard_normal(20000) * np.exp(rng.uniform(-25, 12, 20000))
    special = np.array([0.0, -0.0, 65504.0, 65519.9, 65520.0, -70000.0, 2.0**-24, 2.0**-26, 2.0**-14, np.inf, -np.inf])
    x = np.concatenate([h, special])
    got = np.array([_round_fp16(v) for v in x])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(got, want)
    # midpoints between neighbouring float16 values, normal and subnormal
    lo = np.concatenate(
        [
            np.arange(-300, 300),
            np.arange(-40, 40) * 2.0**-24,
            rng.standard_normal(2000) * np.exp(rng.uniform(-9, 9, 2000)),
        ]
    ).astype(np.float16)
    hi = np.nextafter(lo, np.float16(np.inf))
    mid = (lo.astype(np.float64) + hi.astype(np.float64)) / 2
    away = np.where(np.abs(hi.astype(np.float64)) > np.abs(lo.astype(np.float64)), hi, lo).astype(np.float64)
    got = np.array([_round_fp16(v) for v in mid])
    np.testing.assert_array_equal(got, away)
    assert (got != mid.astype(np.float16).astype(np.float64)).any()  # not ties to even


# -- tuner ------------------------------------------------------------------------------------


def test_tuner_picks_fastest_and_caches(tmp_path):
    path = tmp_path / "tuning.json"
    configs = tuning.candidates("linear", "float32", 64)
    assert {c["kernel"] for c in configs} == {"texture", "texz", "alu", "hybrid"}
    fake = {i: 1.0 + 0.1 * i for i in range(len(configs))}
    winner = 5
    fake[winner] = 0.5
    calls = []

    def time_fn(config):
        calls.append(config)
        idx = configs.index(config)
        if idx == 2:
            raise ValueError("does not fit")  # skipped, not fatal
        return fake[idx]

    key = tuning.problem_class(64, 2048, 2048, 2048, "linear", "float32")
    best, results = tuning.tune("NVIDIA H200", key, configs, time_fn, path=path)
    assert best == configs[winner] and len(calls) == len(configs) and len(results) == len(configs) - 1
    assert tuning.lookup("NVIDIA H200", key, path=path) == json.loads(json.dumps(configs[winner]))
    assert tuning.lookup("NVIDIA H100", key, path=path) is None
    assert (
        tuning.lookup("NVIDIA H200", tuning.problem_class(1, 2048, 2048, 2048, "linear", "float32"), path=path) is None
    )
    # a second problem class adds to the file, keeps the first
    key2 = tuning.problem_class(1, 512, 512, 720, "nearest", "float32")
    tuning.tune("NVIDIA H200", key2, [{"kernel": "texture"}], lambda c: 1e-3, path=path)
    assert tuning.lookup("NVIDIA H200", key, path=path) is not None
    assert any("texture" in line for line in tuning.describe(path))


def test_tuner_cache_file_robustness(tmp_path):
    path = tmp_path / "sub" / "tuning.json"
    assert tuning.load(path) == {}
    path.parent.mkdir()
    path.write_text("{not json")
    assert tuning.load(path) == {}
    path.write_text(json.dumps({"version": 0, "gpus": {"x": {}}}))
    assert tuning.load(path) == {}  # other versions are ignored
    with pytest.raises(ValueError, match="no candidate"):
        tuning.tune("gpu", "k", [{"kernel": "alu"}], lambda c: float("nan"), path=path)


def test_tuner_cache_rereads_a_replaced_file(tmp_path):
    """load() keeps the file's text between calls but reads it again once
    tune() (or anyone) replaces it, even with a file of the same size."""
    path = tmp_path / "tuning.json"
    tuning.tune("gpu", "k", [{"kernel": "alu"}], lambda c: 1.0, path=path)
    assert tuning.lookup("gpu", "k", path=path) == {"kernel": "alu"}
    text = path.read_text().replace('"alu"', '"tex"')  # same length, other kernel
    other = tmp_path / "other.json"
    other.write_text(text)
    other.replace(path)
    assert tuning.lookup("gpu", "k", path=path) == {"kernel": "tex"}
    tuning.load(path)["gpu"]["k"]["config"]["kernel"] = "changed"  # a caller's change stays its own
    assert tuning.lookup("gpu", "k", path=path) == {"kernel": "tex"}


def test_problem_classes_and_paths(monkeypatch, tmp_path):
    pc = tuning.problem_class
    assert pc(64, 2048, 2048, 2048, "linear", "float32") == pc(40, 2000, 2100, 1800, "linear", "float32")
    assert pc(1, 2048, 2048, 2048, "linear", "float32") != pc(2, 2048, 2048, 2048, "linear", "float32")
    assert pc(64, 2048, 2048, 2048, "linear", "float32") != pc(64, 2048, 2048, 2048, "linear", "float16")
    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))
    assert tuning.cache_path() == tmp_path / "tuning.json"
    monkeypatch.delenv("LEVERET_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert tuning.cache_path() == tmp_path / "x" / "leveret" / "tuning.json"


def test_candidates_respect_the_mode():
    assert {c["kernel"] for c in tuning.candidates("linear8", "float32", 8)} == {"texture", "texz"}
    fast = tuning.candidates("linear", "float16", 8)
    assert {c["packing"] for c in fast} == {"half2", "half4"}
    assert all(c["packing"] == "half2" for c in tuning.candidates("linear", "float16", 2))
    near = tuning.candidates("nearest", "float32", 8)
    assert "hybrid" not in {c["kernel"] for c in near}
    assert all(c.get("nv", 2) == 1 for c in tuning.candidates("linear", "float32", 1) if c["kernel"] == "alu")


def test_kernel_resolution_says_what_decided(monkeypatch, tmp_path, rng):
    """The ``kernel`` argument, else this GPU's tuning cache entry, else the
    rule; ``kernel_choice`` (and the repr) say which."""
    import leveret.operators.parallel as par

    geometry, volume, _ = random_case(rng)
    monkeypatch.setattr(par, "_gpu_name", lambda: "Fake GPU")
    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))
    op = ParallelBackprojection(geometry, volume, backend="cpu")
    assert op.kernel_choice is None
    # nothing cached: the measured defaults (default_config)
    assert op.resolve_kernel(8) == {"kernel": "alu", "tile": 32, "nv": 4}
    assert op.kernel_choice == f"kernel=alu, tile=32, nv=4 (the rule for {op.problem_key(8)})"
    assert "kernel_choice='kernel=alu, tile=32, nv=4 (the rule" in repr(op)
    assert op.resolve_kernel(2) == {"kernel": "alu", "tile": 64, "nv": 2}
    assert op.resolve_kernel(1) == {"kernel": "alu", "tile": 64, "nv": 1}
    fast = ParallelBackprojection(geometry, volume, backend="cpu", precision="float16")
    assert fast.resolve_kernel(8) == {"kernel": "hybrid", "tile": 32, "packing": "half4", "ratio": (2, 3)}
    assert fast.resolve_kernel(2) == {"kernel": "hybrid", "tile": 32, "packing": "half2", "ratio": (1, 2)}
    hyb = ParallelBackprojection(geometry, volume, backend="cpu", precision="float16", kernel="hybrid")
    assert hyb.resolve_kernel(8) == {"kernel": "hybrid", "packing": "half4"}
    assert hyb.resolve_kernel(2) == {"kernel": "hybrid", "packing": "half2"}
    tuning.tune("Fake GPU", op.problem_key(8), [{"kernel": "alu", "tile": 64, "nv": 2}], lambda c: 1.0)
    assert op.resolve_kernel(8) == {"kernel": "alu", "tile": 64, "nv": 2}  # the cache
    assert op.kernel_choice.endswith(f"(tuned for Fake GPU ({op.problem_key(8)} in {tmp_path / 'tuning.json'}))")
    explicit = ParallelBackprojection(geometry, volume, backend="cpu", kernel="texz", kernel_options={"nq": 8})
    assert explicit.resolve_kernel(8) == {"kernel": "texz", "nq": 8, "packing": "float2"}
    assert explicit.kernel_choice == "kernel=texz, nq=8, packing=float2 (given, kernel_options={'nq': 8})"


def test_default_falls_back_to_texture_kernels(monkeypatch, tmp_path):
    """Where the ALU cache does not fit (pixels 7x the bin width), or the
    interpolation is the texture unit's, "auto" runs the texture kernels."""
    import leveret.operators.parallel as par

    monkeypatch.setattr(par, "_gpu_name", lambda: "Fake GPU")
    monkeypatch.setenv("LEVERET_CACHE_DIR", str(tmp_path))  # an empty cache: the rule decides
    g = ParallelGeometry(np.linspace(0, np.pi, 90, endpoint=False), 2048, n_rows=8, det_spacing=0.5)
    wide = VolumeGeometry((8, 97, 131), voxel_size=3.5)
    with pytest.raises(ValueError, match="tile"):
        alu_plan(parallel_table(g, wide, np.float64), 32, 1)
    op = ParallelBackprojection(g, wide, backend="cpu")
    assert op.resolve_kernel(8) == {"kernel": "texz", "packing": "float2", "nq": 8}
    assert op.resolve_kernel(1) == {"kernel": "texture", "packing": "float"}
    fast = ParallelBackprojection(g, wide, backend="cpu", precision="float16")
    assert fast.resolve_kernel(8) == {"kernel": "texz", "packing": "half4", "nq": 4}
    assert fast.resolve_kernel(1) == {"kernel": "texz", "packing": "half2", "nq": 8}
    fine = VolumeGeometry((8, 97, 131), voxel_size=0.5)
    for interpolation in ("nearest", "linear8"):
        op = ParallelBackprojection(g, fine, backend="cpu", interpolation=interpolation)
        assert op.resolve_kernel(8)["kernel"] == "texz"
    # 4-slice tiles need 4x the shared memory: a cache of ~110 bins fits 2-slice tiles only
    mid = VolumeGeometry((8, 97, 131), voxel_size=1.25)
    cw = cache_width(parallel_table(g, mid, np.float64), 32)
    assert 96 < cw <= MAX_EXACT_CACHE_WIDTH
    assert ParallelBackprojection(g, mid, backend="cpu").resolve_kernel(8) == {"kernel": "alu", "tile": 32, "nv": 2}


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"kernel": "warp"}, "kernel"),
        ({"kernel": "texz", "packing": "float4"}, "packing"),
        ({"kernel": "texz", "nq": 16}, "nq"),
        ({"kernel": "texz", "packing": "half4", "nq": 8}, "nq"),
        ({"kernel": "texture", "packing": "half4"}, "packing"),
        ({"kernel": "alu", "tile": 48}, "tile"),
        ({"kernel": "alu", "nv": 3}, "nv"),
        ({"kernel": "alu", "nv": 4, "tile": 64}, "nv"),
        ({"kernel": "hybrid", "ratio": (3, 2)}, "ratio"),
        ({"kernel": "hybrid", "ratio": (1, 0)}, "ratio"),
        ({"kernel": "alu", "tile": 64, "interpolation": "nearest", "nv": 1}, "tile"),
    ],
)
def test_gpu_launcher_rejects_bad_parameters_before_touching_the_gpu(kwargs, name):
    """The launcher validates its arguments first (no CuPy needed to get the error)."""
    from leveret.cuda.backproject_parallel import ParallelBackprojectorGPU

    g = ParallelGeometry(np.linspace(0, np.pi, 8, endpoint=False), 16, n_rows=4)
    t64 = parallel_table(g, g.default_volume(), np.float64)
    sinos = np.zeros((4, 8, 16), np.float32)  # stands in for a CuPy array
    with pytest.raises(ValueError, match=name):
        ParallelBackprojectorGPU()(sinos, t64.astype(np.float32), t64, np.zeros((4, 16, 16), np.float32), **kwargs)
