"""What every leveret operator shares: the backend it runs on, where its
arrays live, and how it prints.

Array policy: NumPy in, NumPy out; CuPy in, CuPy out. On the CUDA backend a
NumPy input is uploaded, the result computed on the GPU and copied into a
NumPy output (``out`` when given). On the CPU backend a CuPy input is an
error naming the argument (the data would have to leave the GPU: pass
``cupy.asnumpy(x)`` or use ``backend="cuda"``).

Backend resolution: ``backend`` is "auto" (CUDA when CuPy finds a GPU, else
the CPU), "cuda" (a RuntimeError saying why when there is no usable GPU) or
"cpu" (``leveret.backends.resolve``).

A subclass calls ``Operator.__init__(self, geometry, volume, backend)``,
lists the constructor arguments its repr shows in ``_repr_fields``, and in
each application::

    x = self._input("x", x)                                   # on the backend's device
    res, out = self._output("out", out, shape, x.dtype, like=x_as_given)
    ...compute into res...
    return self._finish(res, out)                             # copied to the host if needed

``Projector`` (leveret.operators.projector) inherits the backend resolution
and the repr; its ``_input``/``_output`` keep the same policy with its
stricter needs on top (its working dtype, C-contiguous arrays, the shapes of
both sides, several devices).
"""

from __future__ import annotations

import numpy as np

from ..backends import resolve


class Operator:
    """Base class of the operators over a (geometry, volume) pair (see the module docstring)."""

    #: Attribute names shown by ``repr`` after the geometry, the volume and the backend.
    _repr_fields: tuple[str, ...] = ()

    def __init__(self, geometry, volume, backend: str = "auto"):
        self.geometry = geometry
        self.volume = volume
        self.backend = resolve(backend)

    # -- the array policy -------------------------------------------------------------
    def _input(self, name: str, arr):
        """``arr`` on this operator's device: CuPy on CUDA (a NumPy array is
        uploaded), NumPy on the CPU (a CuPy array is an error naming ``name``)."""
        if self.backend == "cpu":
            if _is_cupy(arr):
                raise ValueError(
                    f"{name}: the CPU backend takes NumPy arrays, got a CuPy array "
                    "(pass cupy.asnumpy(...) or use backend='cuda')"
                )
            return arr
        if not _is_cupy(arr):
            import cupy

            return cupy.asarray(arr)
        return arr

    def _output(self, name: str, out, shape, dtype, *, like, keep: bool = False):
        """(result array on the device, array the call returns). The returned
        array is ``out`` when given, else a new one of ``like``'s kind (NumPy
        or CuPy); ``keep``: the device array starts with ``out``'s values
        (accumulation). A NumPy or non-contiguous CuPy ``out`` gets a
        contiguous device array of its own, copied into ``out`` by
        :meth:`_finish`."""
        shape = tuple(shape)
        if out is None:
            if self.backend == "cuda":
                import cupy

                res = cupy.zeros(shape, dtype)
                return res, (res if _is_cupy(like) else None)
            res = np.zeros(shape, dtype)
            return res, res
        if tuple(out.shape) != shape or out.dtype != np.dtype(dtype):
            raise ValueError(
                f"{name}: expected shape {shape} and dtype {np.dtype(dtype)}, got {tuple(out.shape)} {out.dtype}"
            )
        if self.backend == "cpu" and _is_cupy(out):
            raise ValueError(f"{name}: the CPU backend writes NumPy arrays, got a CuPy array")
        if self.backend == "cpu" or (_is_cupy(out) and out.flags.c_contiguous):
            return out, out
        import cupy

        # NumPy ``out``, or a strided CuPy view (the kernels write C-contiguous
        # arrays): computed in a contiguous array, copied into ``out`` by _finish.
        res = cupy.ascontiguousarray(cupy.asarray(out)) if keep else cupy.zeros(shape, dtype)
        return res, out

    @staticmethod
    def _finish(res, out):
        """What the call returns: ``res`` itself, or copied into ``out`` (a new
        NumPy array when ``out`` is None and ``res`` is CuPy)."""
        if out is res:
            return res
        if _is_cupy(out):
            out[...] = res
            return out
        host = res.get()
        if out is None:
            return host
        out[...] = host
        return out

    def __repr__(self) -> str:
        fields = "".join(f", {name}={getattr(self, name)!r}" for name in self._repr_fields)
        if getattr(self, "devices", None) is not None:
            fields += f", devices={self.devices!r}"
        return f"{type(self).__name__}({self.geometry!r}, {self.volume!r}, backend={self.backend!r}{fields})"


def _is_cupy(arr) -> bool:
    """Whether ``arr`` is a CuPy array (by its type's module: CuPy need not be installed)."""
    return type(arr).__module__.startswith("cupy")
