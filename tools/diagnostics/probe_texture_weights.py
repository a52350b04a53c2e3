"""How does the texture unit round its interpolation weights?

1D: fetches a layered float texture holding [0, 1, 0, 1, ...] at many
coordinates (y at texel centres) and compares with two models of the x
weight (rounded to nearest, or truncated, at 1/256).
2D: fetches a random layered texture at random (x, y) and compares with
models of both weights. The winners are what the CPU's "linear8" modes must
emulate. Run on a GPU: ``PYTHONPATH=src python3 tools/diagnostics/probe_texture_weights.py``.
"""
import json
import sys

import numpy as np

SOURCE = r'''
extern "C" __global__ void fetch(cudaTextureObject_t t, const float* x, const float* y, float* out, int n) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) out[k] = tex2DLayered<float>(t, x[k], y[k], 0);
}'''


def quantise(f, how):
    if how == "round":
        return np.floor(f * 256 + 0.5) / 256
    if how == "truncate":
        return np.floor(f * 256) / 256
    return f


def bilinear(tex, x, y, wx, wy):
    """Reference fetch at texture coordinates (x, y), zero outside, in float64."""
    h, w = tex.shape
    xb, yb = x.astype(np.float64) - 0.5, y.astype(np.float64) - 0.5
    ix, iy = np.floor(xb).astype(int), np.floor(yb).astype(int)
    a, b = quantise(xb - ix, wx), quantise(yb - iy, wy)

    def at(r, c):
        ok = (r >= 0) & (r < h) & (c >= 0) & (c < w)
        return np.where(ok, tex[np.clip(r, 0, h - 1), np.clip(c, 0, w - 1)], 0.0)
    return ((1 - a) * (1 - b) * at(iy, ix) + a * (1 - b) * at(iy, ix + 1)
            + (1 - a) * b * at(iy + 1, ix) + a * b * at(iy + 1, ix + 1))


def bilinear_product8(tex, x, y):
    """A, B = 8-bit fractions; W11 = round(A B / 256); W01 = A - W11,
    W10 = B - W11, W00 = 256 - A - B + W11 (all in 1/256)."""
    h, w = tex.shape
    xb, yb = x.astype(np.float64) - 0.5, y.astype(np.float64) - 0.5
    ix, iy = np.floor(xb).astype(int), np.floor(yb).astype(int)
    a = np.floor((xb - ix) * 256 + 0.5).astype(int)
    b = np.floor((yb - iy) * 256 + 0.5).astype(int)
    w11 = (a * b + 128) // 256

    def at(r, c):
        ok = (r >= 0) & (r < h) & (c >= 0) & (c < w)
        return np.where(ok, tex[np.clip(r, 0, h - 1), np.clip(c, 0, w - 1)], 0.0)
    return ((256 - a - b + w11) * at(iy, ix) + (a - w11) * at(iy, ix + 1)
            + (b - w11) * at(iy + 1, ix) + w11 * at(iy + 1, ix + 1)) / 256


def fetch(image, x, y):
    import cupy as cp
    from leveret.cuda.texture import LayeredTexture

    kern = cp.RawKernel(SOURCE, "fetch")
    tex = LayeredTexture(1, *image.shape)
    tex.upload(cp.asarray(image[None].astype(np.float32)))
    out = cp.empty(x.size, cp.float32)
    kern(((x.size + 255) // 256,), (256,), (tex.linear, cp.asarray(x), cp.asarray(y), out, np.int32(x.size)))
    return cp.asnumpy(out)


def tie_rules(x):
    """(texel, 8-bit fraction) of the x weight under candidate rules for
    coordinates whose fraction falls exactly halfway between two 1/256 steps."""
    s = x.astype(np.float64) * 256 - 128             # (x - 1/2) in 1/256 texel: exact for these x
    away = lambda t: np.sign(t) * np.floor(np.abs(t) + 0.5)   # noqa: E731
    fixed = {"half_up": np.floor(s + 0.5), "half_even": np.round(s),
             "away_of_shifted": away(s),              # ties away from zero of (x - 1/2)
             "away_of_x": away(x.astype(np.float64) * 256) - 128}   # ties away from zero of x, then the shift
    return {k: (np.floor(v / 256).astype(int), np.mod(v, 256) / 256) for k, v in fixed.items()}


def probe_ties(rng):
    """Which rounding the texture unit applies to a coordinate exactly halfway
    between two 1/256 steps, on both sides of zero (the first texel's border),
    along x and along y (the other coordinate on a texel centre: weight 0)."""
    ramp = np.zeros(64)
    ramp[0::2] = 1.0                                   # texel 0 is 1: the border blend shows
    x = ((np.arange(-1024, 16384) + 0.5) / 256).astype(np.float32)   # -4 .. 64 texels, every tie
    centre = np.full_like(x, 4.5)
    out = {}
    for axis in ("x", "y"):
        image = ramp[None, :] * np.ones((8, 1)) if axis == "x" else ramp[:, None] * np.ones((1, 8))
        got = fetch(image, x, centre) if axis == "x" else fetch(image, centre, x)
        for rule, (ix, a) in tie_rules(x).items():
            def at(c):
                return np.where((c >= 0) & (c < 64), ramp[np.clip(c, 0, 63)], 0.0)
            bad = np.abs((1 - a) * at(ix) + a * at(ix + 1) - got) > 1e-6
            out[f"{axis}_{rule}"] = {"mismatches": int(bad.sum()), "negative": int((bad & (x < 0)).sum()),
                                     "in_0_half": int((bad & (x > 0) & (x < 0.5)).sum())}
    return out


def main():
    import argparse
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    rng = np.random.default_rng(1)
    result = {"ties": probe_ties(rng)}
    ramp = np.zeros((1, 64))
    ramp[0, 1::2] = 1.0
    x = rng.uniform(2, 62, 200_000).astype(np.float32)
    y = np.full_like(x, 0.5)
    got = fetch(ramp, x, y)
    for how in ("round", "truncate", "exact"):
        err = np.abs(bilinear(ramp, x, y, how, "exact") - got)
        result[f"1d_{how}"] = {"max_abs": float(err.max()), "mismatches": int((err > 1e-6).sum())}
    # Each axis alone, on sizes that are not powers of two, at random (x, y):
    # a texture alternating 0/1 along one axis and constant along the other
    # gives that axis's weight whatever the other one is.
    for axis, shape in (("x", (40, 50)), ("y", (40, 50)), ("x", (33, 1248)), ("y", (960, 30))):
        h, w = shape
        image = (np.arange(w)[None, :] % 2 if axis == "x" else np.arange(h)[:, None] % 2) * np.ones(shape)
        x = rng.uniform(1.5, w - 1.5, 200_000).astype(np.float32)
        y = rng.uniform(1.5, h - 1.5, 200_000).astype(np.float32)
        got = fetch(image, x, y)
        for how in ("round", "truncate", "exact"):
            model = bilinear(image, x, y, how if axis == "x" else "exact", how if axis == "y" else "exact")
            err = np.abs(model - got)
            result[f"{axis}_{h}x{w}_{how}"] = {"max_abs": float(err.max()), "mismatches": int((err > 1e-6).sum())}
    # Both axes: separable 8-bit weights are not the whole story; the corner
    # weight a b is itself rounded to 1/256 and the others follow from it.
    image = rng.standard_normal((40, 50))
    x = rng.uniform(-2, 52, 200_000).astype(np.float32)
    y = rng.uniform(-2, 42, 200_000).astype(np.float32)
    got = fetch(image, x, y)
    err = np.abs(bilinear(image, x, y, "round", "round") - got)
    result["2d_separable_round"] = {"max_abs": float(err.max()), "rms": float(np.sqrt(np.mean(err**2)))}
    err = np.abs(bilinear_product8(image, x, y) - got)
    result["2d_product8"] = {"max_abs": float(err.max()), "rms": float(np.sqrt(np.mean(err**2)))}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
