"""leveret.torch: the projector as a differentiable PyTorch function (skipped without torch)."""

from __future__ import annotations

import numpy as np
import pytest

from leveret.operators import Projector

from cases import GEOMETRIES

torch = pytest.importorskip("torch")
lt = pytest.importorskip("leveret.torch")


@pytest.mark.parametrize("name", ["parallel2d", "cone_circular"])
def test_project_and_gradient_cpu(name, rng):
    geometry, volume = GEOMETRIES[name]
    A = Projector(geometry, volume, model="siddon", precision="float64", backend="cpu")
    x = rng.standard_normal(volume.shape)
    y = rng.standard_normal(geometry.projection_shape)
    xt = torch.tensor(x, requires_grad=True)
    p = lt.project(xt, A)
    np.testing.assert_allclose(p.detach().numpy(), A(x), rtol=0, atol=1e-12)
    (p * torch.tensor(y)).sum().backward()  # d<Ax, y>/dx = A^T y
    np.testing.assert_allclose(xt.grad.numpy(), A.T(y), rtol=0, atol=1e-12)
    yt = torch.tensor(y, requires_grad=True)
    b = lt.backproject(yt, A)
    np.testing.assert_allclose(b.detach().numpy(), A.T(y), rtol=0, atol=1e-12)
    (b * torch.tensor(x)).sum().backward()  # d<A^T y, x>/dy = A x
    np.testing.assert_allclose(yt.grad.numpy(), A(x), rtol=0, atol=1e-12)


def test_gradcheck_and_batch(rng):
    geometry, volume = GEOMETRIES["parallel2d_graze"]
    A = Projector(geometry, volume, model="joseph", precision="float64", backend="cpu")
    xt = torch.tensor(rng.standard_normal((2,) + volume.shape), requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: lt.project(t, A), (xt,))
    p = lt.ProjectorModule(A)(xt)
    assert p.shape == (2,) + geometry.projection_shape
    np.testing.assert_allclose(p[1].detach().numpy(), A(xt[1].detach().numpy()), atol=1e-12)


def test_bad_input():
    geometry, volume = GEOMETRIES["parallel2d"]
    A = Projector(geometry, volume, backend="cpu")  # float32
    with pytest.raises(ValueError, match="x: expected a torch.float32"):
        lt.project(torch.zeros(volume.shape, dtype=torch.float64), A)
    with pytest.raises(ValueError, match="x: expected shape"):
        lt.project(torch.zeros((3, 3), dtype=torch.float32), A)


@pytest.mark.gpu
def test_cuda_tensors(rng):
    if not torch.cuda.is_available():
        pytest.skip("torch finds no CUDA device")
    geometry, volume = GEOMETRIES["cone_circular"]
    A = Projector(geometry, volume, model="siddon", precision="float32", backend="cuda")
    C = Projector(geometry, volume, model="siddon", precision="float32", backend="cpu")
    x = rng.standard_normal(volume.shape).astype(np.float32)
    y = rng.standard_normal(geometry.projection_shape).astype(np.float32)
    xt = torch.tensor(x, device="cuda", requires_grad=True)
    p = lt.project(xt, A)
    assert p.is_cuda
    ref = C(x)
    assert np.abs(p.detach().cpu().numpy() - ref).max() <= 1e-5 * np.abs(ref).max()
    (p * torch.tensor(y, device="cuda")).sum().backward()
    ref = C.T(y)
    assert np.abs(xt.grad.cpu().numpy() - ref).max() <= 1e-5 * np.abs(ref).max()
