"""Which rounding does the texture unit apply to its 8-bit interpolation weight?

Fetches a layered float texture holding [0, 1, 0, 1, ...] ramps at many
coordinates and compares with the two candidate models (weight rounded to
nearest, or truncated, at 1/256). The winner is what ``cpu_mode="linear8"``
must emulate. Run on a GPU: ``PYTHONPATH=src python3 bench/probe_texture_weights.py``.
"""
import json
import sys

import numpy as np


def main():
    import cupy as cp
    from leveret.cuda.texture import LayeredTexture

    src = r'''
    extern "C" __global__ void fetch(cudaTextureObject_t t, const float* u, float* out, int n) {
        int k = blockIdx.x * blockDim.x + threadIdx.x;
        if (k < n) out[k] = tex2DLayered<float>(t, u[k], 0.5f, 0);
    }'''
    kern = cp.RawKernel(src, "fetch")
    width = 64
    ramp = np.zeros((1, 1, width), np.float32)
    ramp[0, 0, 1::2] = 1.0          # value at x is the weight of the odd neighbour
    tex = LayeredTexture(1, 1, width)
    tex.upload(cp.asarray(ramp))
    rng = np.random.default_rng(1)
    u = (rng.uniform(2, width - 2, 200_000)).astype(np.float32)
    d_out = cp.empty(u.size, cp.float32)
    kern(((u.size + 255) // 256,), (256,), (tex.linear, cp.asarray(u), d_out, np.int32(u.size)))
    got = cp.asnumpy(d_out)
    xb = u.astype(np.float64) - 0.5
    i0 = np.floor(xb)
    f = xb - i0
    odd = (i0.astype(int) % 2 == 1)
    def model(w):
        return np.where(odd, 1 - w, w)
    result = {}
    for name, w in [("round", np.floor(f * 256 + 0.5) / 256), ("truncate", np.floor(f * 256) / 256),
                    ("exact", f)]:
        err = np.abs(model(w) - got)
        result[name] = {"max_abs": float(err.max()), "mismatches": int((err > 1e-6).sum())}
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
