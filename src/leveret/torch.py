"""PyTorch bindings: a :class:`leveret.Projector` as a differentiable function.

``project(x, A)`` is ``A x`` and ``backproject(y, A)`` is ``A^T y``; each one's
gradient is the other (the pair is an exact transpose, so autograd's
vector-Jacobian products are exact). CPU tensors go through NumPy (no copy),
CUDA tensors through DLPack to CuPy (no copy, the data stay on the GPU; the
projector must have ``backend="cuda"``). A leading batch dimension is allowed
and looped over.

PyTorch is an optional dependency: importing this module without it raises an
ImportError that says so.

Example
-------
>>> import torch, leveret
>>> from leveret.torch import project
>>> A = leveret.Projector(geometry, volume, backend="cuda")
>>> x = torch.zeros(volume.shape, device="cuda", requires_grad=True)
>>> loss = ((project(x, A) - y) ** 2).sum(); loss.backward()   # x.grad = 2 A^T (A x - y)
"""

from __future__ import annotations

try:
    import torch
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("leveret.torch needs PyTorch (pip install torch)") from exc

import numpy as np

__all__ = ["project", "backproject", "ProjectorModule"]


def _apply(op, t: "torch.Tensor", projector, in_shape, name: str) -> "torch.Tensor":
    """Run ``op`` (A or A.T) on tensor ``t`` of shape ``in_shape`` or ``(batch,) + in_shape``."""
    in_shape = tuple(in_shape)
    if tuple(t.shape[-len(in_shape) :]) != in_shape or t.dim() not in (len(in_shape), len(in_shape) + 1):
        raise ValueError(f"{name}: expected shape {in_shape} or (batch,) + {in_shape}, got {tuple(t.shape)}")
    want = getattr(torch, projector.dtype.name)
    if t.dtype != want:
        raise ValueError(f"{name}: expected a {want} tensor (the projector's precision), got {t.dtype}")
    t = t.detach().contiguous()
    if t.is_cuda:
        if projector.backend != "cuda":
            raise ValueError(f"{name}: a CUDA tensor needs a projector with backend='cuda'")
        import cupy

        with cupy.cuda.Device(t.device.index):
            arr = cupy.from_dlpack(t)
            res = [op(a) for a in (arr if t.dim() > len(in_shape) else [arr])]
            res = cupy.stack(res) if t.dim() > len(in_shape) else res[0]
            return torch.from_dlpack(res)
    arr = t.numpy()
    res = [op(a) for a in (arr if t.dim() > len(in_shape) else [arr])]
    res = np.stack(res) if t.dim() > len(in_shape) else res[0]
    return torch.from_numpy(np.ascontiguousarray(res))


class _Project(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, projector):
        ctx.projector = projector
        return _apply(projector, x, projector, projector.volume.shape, "x")

    @staticmethod
    def backward(ctx, grad):
        A = ctx.projector
        return _apply(A.T, grad, A, A.projection_shape, "grad"), None


class _Backproject(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, projector):
        ctx.projector = projector
        return _apply(projector.T, y, projector, projector.projection_shape, "y")

    @staticmethod
    def backward(ctx, grad):
        A = ctx.projector
        return _apply(A, grad, A, A.volume.shape, "grad"), None


def project(x: "torch.Tensor", projector) -> "torch.Tensor":
    """``A x``: volume(s) ``volume.shape`` (or ``(batch,) + volume.shape``) ->
    projections ``projection_shape``; differentiable (gradient ``A^T``)."""
    return _Project.apply(x, projector)


def backproject(y: "torch.Tensor", projector) -> "torch.Tensor":
    """``A^T y``: projections -> volume(s); differentiable (gradient ``A``)."""
    return _Backproject.apply(y, projector)


class ProjectorModule(torch.nn.Module):
    """``A`` (or ``A^T`` with ``transpose=True``) as a ``torch.nn.Module`` layer."""

    def __init__(self, projector, transpose: bool = False):
        super().__init__()
        self.projector = projector
        self.transpose = bool(transpose)

    def forward(self, t):
        return backproject(t, self.projector) if self.transpose else project(t, self.projector)
