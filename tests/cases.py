"""Shared test cases (tests/ is on pytest's pythonpath: ``from cases import ...``)."""
from __future__ import annotations

import numpy as np

# ---------------------------------------------------------------------------------------------
# Cone-beam back-projection (tests/operators/test_cone_backprojection.py,
# tests/cuda/test_backproject_cone_gpu.py)
# ---------------------------------------------------------------------------------------------

# Texture unit (8-bit fractions, corner weight rounded to 1/256) against exact
# bilinear weights on white noise, relative 2-norm: measured 4.3e-3 to 5.6e-3 on
# volumes of 255 voxels or more (a 35-voxel one spreads to 9e-3: too few samples).
TEXTURE_VS_EXACT_RANDOM = 8e-3


def rel(a, b) -> float:
    """Relative 2-norm of a - b against b, in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def scrambled_scan(rng, n_views=70, n_rows=23, n_cols=31, perturb=0.005):
    """Views in random order over a full circle, matrices perturbed entry by
    entry (skewed detectors: 'random matrices'), odd detector sizes."""
    from leveret.geometry import ConeGeometry
    angles = rng.permutation(rng.uniform(0, 2 * np.pi, n_views))
    g = ConeGeometry.circular(angles, sid=60.0, sdd=100.0, n_rows=n_rows, n_cols=n_cols, pixel_size=1.7)
    matrices = g.matrices * (1 + perturb * rng.standard_normal(g.matrices.shape))
    return g, matrices


def smooth_noise(rng, shape):
    """White noise through a 3 x 3 box: the float32 coordinates' rounding
    (~8e-6 relative on raw white noise for these skewed matrices, the global
    kernel's own CPU mirror included) stays well inside 1e-5."""
    w = rng.standard_normal((shape[0], shape[1] + 2, shape[2] + 2))
    return (sum(w[:, a:a + shape[1], b:b + shape[2]] for a in range(3) for b in range(3)) / 3).astype(np.float32)
