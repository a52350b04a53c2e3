"""An argument of the wrong type is a TypeError whose message starts with the
argument's name, at every public entry point (a wrong value stays a ValueError)."""

from __future__ import annotations

import numpy as np
import pytest

import leveret
from leveret import phantom, rabbitct
from leveret.execution import reconstruct_to_file
from leveret.geometry import ConeGeometry, ParallelGeometry, ParallelVecGeometry, RadonGeometry, VolumeGeometry
from leveret.io import read_array, read_raw
from leveret.phantom.planes import project_radon

ANGLES = np.linspace(0, np.pi, 8, endpoint=False)
PAR2 = ParallelGeometry(ANGLES, 16)
PAR3 = ParallelGeometry(ANGLES, 16, n_rows=4)
VOL2 = VolumeGeometry((16, 16))
VOL3 = VolumeGeometry((4, 16, 16))
CONE = ConeGeometry.circular(np.linspace(0, 2 * np.pi, 8, endpoint=False), 100.0, 200.0, 8, 16, 2.0)
RADON = RadonGeometry.uniform(16, 8)
SINO2 = np.zeros(PAR2.projection_shape, np.float32)
CONE_DATA = np.zeros(CONE.projection_shape, np.float32)
NOT_A_GEOMETRY = {"angles": ANGLES}  # a dict with the right words is still no geometry


def _projector():
    return leveret.Projector(PAR2, VOL2, backend="cpu")


CASES = {
    "fbp geometry": ("geometry", lambda: leveret.fbp(SINO2, NOT_A_GEOMETRY, VOL2, backend="cpu")),
    "fbp volume": ("volume", lambda: leveret.fbp(SINO2, PAR2, (16, 16), backend="cpu")),
    "fdk geometry": ("geometry", lambda: leveret.fdk(CONE_DATA, PAR3, VOL3, backend="cpu")),
    "fdk volume": ("volume", lambda: leveret.fdk(CONE_DATA, CONE, (4, 16, 16), backend="cpu")),
    "laminography_fbp geometry": ("geometry", lambda: leveret.laminography_fbp(CONE_DATA, PAR3, VOL3, backend="cpu")),
    "radon3d_fbp geometry": (
        "geometry",
        lambda: leveret.radon3d_fbp(np.zeros((8, 16), np.float32), PAR3, VOL3, backend="cpu"),
    ),
    "radon3d_fbp volume": (
        "volume",
        lambda: leveret.radon3d_fbp(np.zeros(RADON.projection_shape, np.float32), RADON, "volume", backend="cpu"),
    ),
    "radon3d_forward geometry": (
        "geometry",
        lambda: leveret.radon3d_forward(np.zeros(VOL3.shape, np.float32), PAR3, VOL3, backend="cpu"),
    ),
    "sirt projector": ("projector", lambda: leveret.sirt(SINO2, PAR2, 2)),
    "sirt callback": ("callback", lambda: leveret.sirt(SINO2, _projector(), 2, callback="print")),
    "fista projector": ("projector", lambda: leveret.fista(SINO2, PAR2, 2, tv=0.1)),
    "fista stats": ("stats", lambda: leveret.fista(SINO2, _projector(), 2, tv=0.1, stats=[])),
    "Projector geometry": ("geometry", lambda: leveret.Projector(NOT_A_GEOMETRY, VOL2, backend="cpu")),
    "Projector volume": ("volume", lambda: leveret.Projector(PAR2, (16, 16), backend="cpu")),
    "ParallelBackprojection geometry": (
        "geometry",
        lambda: leveret.ParallelBackprojection(NOT_A_GEOMETRY, VOL2, backend="cpu"),
    ),
    "ParallelBackprojection volume": ("volume", lambda: leveret.ParallelBackprojection(PAR2, (16, 16), backend="cpu")),
    "ConeBackprojection geometry": ("geometry", lambda: leveret.ConeBackprojection(PAR3, VOL3, backend="cpu")),
    "ConeBackprojection volume": ("volume", lambda: leveret.ConeBackprojection(CONE, (4, 16, 16), backend="cpu")),
    "reconstruct_to_file geometry": (
        "geometry",
        lambda: reconstruct_to_file(np.zeros((8, 4, 16), np.float32), NOT_A_GEOMETRY, "never-written.npy"),
    ),
    "reconstruct_to_file volume": (
        "volume",
        lambda: reconstruct_to_file(CONE_DATA, CONE, "never-written.npy", volume=(4, 16, 16)),
    ),
    "read_array path": ("path", lambda: read_array(42)),
    "read_raw path": ("path", lambda: read_raw(b"scan.raw", dtype="<u2", shape=(4, 4))),
    "ParallelVecGeometry.from_parallel geometry": ("geometry", lambda: ParallelVecGeometry.from_parallel(CONE)),
    "rasterize 2D volume": ("volume", lambda: phantom.shepp_logan_ellipses().rasterize((16, 16))),
    "project 2D geometry": ("geometry", lambda: phantom.shepp_logan_ellipses().project(NOT_A_GEOMETRY)),
    "rasterize 3D volume": ("volume", lambda: phantom.shepp_logan_3d().rasterize((4, 16, 16))),
    "project 3D geometry": ("geometry", lambda: phantom.shepp_logan_3d().project(RADON)),
    "project_radon geometry": ("geometry", lambda: project_radon(phantom.shepp_logan_3d(), PAR3)),
    "EllipsoidPhantom ellipsoids": ("ellipsoids", lambda: phantom.EllipsoidPhantom(3)),
    "rabbitct data_geometry data": ("data", lambda: rabbitct.data_geometry(CONE)),
}


@pytest.mark.parametrize("name, call", list(CASES.values()), ids=list(CASES))
def test_wrong_type_is_a_type_error_naming_the_argument(name, call, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written, and nowhere but here if it were
    with pytest.raises(TypeError, match=rf"^{name}: expected "):
        call()
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "call",
    [
        lambda: leveret.fdk(CONE_DATA, CONE, VOL2, backend="cpu"),
        lambda: leveret.ConeBackprojection(CONE, VOL2, backend="cpu"),
        lambda: ParallelVecGeometry.from_parallel(PAR2),
        lambda: read_array(""),
    ],
    ids=["fdk", "ConeBackprojection", "from_parallel", "read_array"],
)
def test_right_type_wrong_value_stays_a_value_error(call):
    """A VolumeGeometry or ParallelGeometry that is 2D where 3D is needed is a wrong value."""
    with pytest.raises(ValueError, match=r"^(volume|geometry|path): expected a "):
        call()
