"""How the cone-beam kernels treat each view, for the CUDA launcher and its
CPU mirror alike (NumPy only; here beside the mirror, so that ``leveret.cpu``
never loads ``leveret.cuda``, whose launcher imports it).

A kernel reads each view either through the texture unit (8-bit bilinear
weights) or in software (exact float32 weights): ``software_views``. The
ray-aligned kernels run a call's views in passes of similar direction
(``plan_passes``). ``kernel_matrices`` gives the float32 matrices the kernels
and the mirror both use, ``fma_steps`` how each view steps along z.
"""

from __future__ import annotations

import numpy as np

#: Voxels along z per thread (LEVERET_CONE_K in backproject_cone.cu): slabs
#: are multiples of it, and the CPU mirror sums in blocks of it.
DEPTH = 16
#: Views whose matrices fit in constant memory at once (LEVERET_CONE_MAX_VIEWS).
MAX_VIEWS_PER_PASS = 1024
#: Ray kernels: views per pass (direction bin), see ``plan_passes``. Each pass
#: reads and writes the volume once, with uncoalesced stores, so fewer, larger
#: passes are faster as long as a pass's directions stay close.
VIEWS_PER_PASS = 124
#: "ray-hybrid": of every 3 views of a pass, 1 from quads (exact), 2 through the texture.
RAY_SPLIT = (1, 3)
#: Zero quads around each view in the quad layout (folded into the matrices).
QUAD_BORDER = 2

SOFTWARE_KERNELS = ("global", "quad")  # every view with exact weights
TEXTURE_KERNELS = ("texture", "ray")  # every view through the texture unit
KERNELS = TEXTURE_KERNELS + SOFTWARE_KERNELS + ("ray-hybrid",)


class Pass:
    """One launch of a ray kernel: ``views`` (indices into the call's views,
    in the kernel's order), lanes along x (``y_major`` False) or y, shifted by
    ``round(lane * slope)`` along the other axis; ``software``: which of
    ``views`` the "ray-hybrid" kernel reads from quads."""

    def __init__(self, views, y_major, slope, software):
        self.views, self.y_major, self.slope, self.software = views, bool(y_major), float(slope), software


def view_directions(index_matrices: np.ndarray, volume_shape: tuple[int, int, int]) -> np.ndarray:
    """Azimuth (radians) of each view's central ray, source -> volume centre,
    in voxel-index coordinates (x = i, y = j). The source is the matrix's null
    vector (a source at infinity gives its direction)."""
    m = np.asarray(index_matrices, np.float64).reshape(-1, 3, 4)
    h = np.linalg.svd(m)[2][:, -1, :]  # (n, 4): M h = 0
    nz, ny, nx = volume_shape
    centre = np.array([(nx - 1) / 2, (ny - 1) / 2, (nz - 1) / 2])
    d = centre[None, :] * h[:, 3:4] - h[:, :3]  # (centre - source) x h_w: the sign is irrelevant mod pi
    return np.arctan2(d[:, 1], d[:, 0])


def plan_passes(
    index_matrices: np.ndarray,
    volume_shape: tuple[int, int, int],
    views_per_pass: int = VIEWS_PER_PASS,
    aligned: bool = True,
    split: tuple[int, int] = (0, 1),
) -> list[Pass]:
    """Group the views into passes of at most ``views_per_pass`` views of
    similar direction: azimuths modulo 180 degrees (a line and its reverse
    are the same lanes), sorted, cut after the largest gap into equal groups;
    each group keeps the call's view order (contiguous runs stay contiguous).
    A pass's lanes follow the axial mean of its azimuths; ``aligned=False``:
    lanes along x (kernel B's mapping), for comparison. ``split=(count,
    period)``: view n of a pass is a software (quad) view when n % period <
    count."""
    n = np.asarray(index_matrices).reshape(-1, 12).shape[0]
    phi = view_directions(index_matrices, volume_shape)
    alpha = np.mod(phi, np.pi)
    order = np.argsort(alpha, kind="stable")
    if n > 1:  # start after the largest gap of the circle of axial directions
        gaps = np.diff(np.concatenate([alpha[order], alpha[order[:1]] + np.pi]))
        order = np.roll(order, -(int(np.argmax(gaps)) + 1))
    count, period = split
    passes = []
    for group in np.array_split(order, -(-n // max(1, int(views_per_pass)))):
        views = np.sort(group)
        mean = 0.5 * np.arctan2(np.sin(2 * phi[views]).sum(), np.cos(2 * phi[views]).sum())
        dx, dy = np.cos(mean), np.sin(mean)
        if not aligned:
            y_major, slope = False, 0.0
        elif abs(dx) >= abs(dy):
            y_major, slope = False, dy / dx
        else:
            y_major, slope = True, dx / dy
        passes.append(Pass(views, y_major, slope, np.arange(views.size) % period < count))
    return passes


def software_mask(passes: list[Pass], n_views: int) -> np.ndarray:
    """Which of the call's views a plan reads in software (for the CPU mirror)."""
    mask = np.zeros(n_views, bool)
    for p in passes:
        mask[p.views[p.software]] = True
    return mask


def software_views(
    kernel: str,
    index_matrices: np.ndarray,
    volume_shape: tuple[int, int, int],
    views_per_pass: int = VIEWS_PER_PASS,
    split: tuple[int, int] = RAY_SPLIT,
) -> np.ndarray:
    """Which views ``kernel`` interpolates in software (exact float32
    weights): all for "global" and "quad", none for "texture" and "ray", and
    for "ray-hybrid" those its plan (``plan_passes`` with ``views_per_pass``
    and ``split``) reads from quads."""
    n_views = np.asarray(index_matrices).reshape(-1, 12).shape[0]
    if kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    if kernel == "ray-hybrid":
        return software_mask(plan_passes(index_matrices, volume_shape, views_per_pass, split=split), n_views)
    return np.full(n_views, kernel in SOFTWARE_KERNELS)


def fma_steps(kernel: str, software: np.ndarray) -> np.ndarray:
    """Which views a kernel steps along z in one fma per voxel (exact z
    coordinates) rather than by running sums: its software views, except in
    "ray-hybrid", whose quad views take running sums like its texture views
    (fewer registers beside the texture path; see Segment in the .cu file)."""
    software = np.asarray(software, bool)
    return np.zeros_like(software) if kernel == "ray-hybrid" else software


def kernel_matrices(index_matrices: np.ndarray, software: np.ndarray, border: int = 0) -> np.ndarray:
    """The float32 (n_views, 12) matrices the kernels (and their CPU mirror)
    use: views read through the texture unit get the half-texel shift of
    texture coordinates (u + 1/2, v + 1/2) built into their u and v rows,
    software views the shift of a ``border``-pixel border (the quad layout's
    ``QUAD_BORDER``; 0 for the "global" kernel, which adds its own), computed
    in float64, so the kernel adds nothing per sample."""
    m = np.array(index_matrices, np.float64).reshape(-1, 3, 4)
    software = np.broadcast_to(np.asarray(software, bool), (m.shape[0],))
    m[~software, 0:2, :] += 0.5 * m[~software, 2:3, :]
    if border:
        m[software, 0:2, :] += border * m[software, 2:3, :]
    return np.ascontiguousarray(m.reshape(-1, 12), np.float32)
