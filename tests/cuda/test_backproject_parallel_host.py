"""backproject_parallel.cu's floor by directed rounding (floor_rd), compiled for
the CPU from the kernel's own source (g++), against NumPy's floor: the ALU
kernel's bin index and fraction come from it, so an off-by-one here moves
samples to the neighbouring bin. No GPU needed."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from leveret.cuda._module import kernel_source

HERE = Path(__file__).resolve().parent

HARNESS = r"""
#include "host_cuda.h"
#include <cfenv>
// The CUDA intrinsics floor_rd uses, with their IEEE meanings (built with -frounding-math).
static inline float __fadd_rd(float a, float b)
{
    std::fesetround(FE_DOWNWARD);
    volatile float r = a + b;
    std::fesetround(FE_TONEAREST);
    return r;
}
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, sizeof i); return i; }
%s
extern "C" void floors(const float* h, int n, int* index, float* value)
{
    for (int k = 0; k < n; ++k) index[k] = floor_rd(h[k], value[k]);
}
"""


@pytest.fixture(scope="module")
def floor_rd(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++) to build floor_rd for the host")
    match = re.search(r"__device__ __forceinline__ int floor_rd\(.*?\n}\n", kernel_source("backproject_parallel"), re.S)
    assert match, "floor_rd not found in backproject_parallel.cu"
    folder = tmp_path_factory.mktemp("floor_rd")
    (folder / "floor_rd.cpp").write_text(HARNESS % match.group(0))
    so = folder / "libfloor_rd.so"
    res = subprocess.run(
        [
            cxx,
            "-O1",
            "-frounding-math",
            "-ffp-contract=off",
            "-std=c++17",
            "-shared",
            "-fPIC",
            f"-I{HERE}",
            "-o",
            str(so),
            str(folder / "floor_rd.cpp"),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    lib = ctypes.CDLL(str(so))

    def run(h):
        h = np.ascontiguousarray(h, np.float32)
        index, value = np.empty(h.size, np.int32), np.empty(h.size, np.float32)
        lib.floors(
            h.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_int(h.size),
            index.ctypes.data_as(ctypes.c_void_p),
            value.ctypes.data_as(ctypes.c_void_p),
        )
        return index, value

    return run


def test_floor_by_directed_rounding_is_exact(floor_rd, rng):
    """On float32 values at, just below and just above integers, halves, and
    random values in the cache's range [0, 2^23): the kernel's floor equals
    floor(h) as an int and as a float. (Rounding h - 0.499999 to nearest
    instead, the form Chilingaryan et al. (2018) give, is off by one on some
    of these values, which is why the kernel rounds down.)"""
    h = np.arange(0, 300, dtype=np.float32)
    values = np.concatenate(
        [
            h,
            np.nextafter(h, np.float32(-1)),
            np.nextafter(h, np.float32(1e9)),
            h + np.float32(0.5),
            np.nextafter(h + np.float32(1), np.float32(-1)),
            rng.uniform(0, 2**23, 10_000).astype(np.float32),
            np.float32([2**23 - 1, np.nextafter(np.float32(2**23), np.float32(0))]),
        ]
    )
    values = values[values >= 0].astype(np.float32)
    index, value = floor_rd(values)
    expected = np.floor(values.astype(np.float64))
    np.testing.assert_array_equal(index, expected.astype(np.int64))
    np.testing.assert_array_equal(value, expected.astype(np.float32))
    nearest = np.float32(np.round(values.astype(np.float64) - 0.499999))
    assert (nearest != expected).any()
