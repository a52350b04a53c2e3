"""A stand-in for CuPy on the CPU, for the several-GPU paths' bookkeeping:
NumPy arrays with what the code reads of CuPy arrays, streams and events
whose work is done at once, one stand-in GPU id (``cupy.cuda.Device().id``
is 0). ``install(monkeypatch, n_gpus)`` puts it in place of ``cupy`` and
``cupyx`` and makes ``leveret.cuda.devices`` see ``n_gpus`` GPUs. Ordering
between real CUDA streams is what the GPU tests check."""

from __future__ import annotations

import contextlib
import ctypes
import sys
import time
import types

import numpy as np


class DeviceArray(np.ndarray):
    """A host array with ``data.ptr``, ``get`` and ``device`` as CuPy's have."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)

    @property
    def device(self):
        return types.SimpleNamespace(id=0)

    def get(self, stream=None, out=None):
        if out is None:
            return np.array(self)
        out[...] = self
        return out


def device_array(a, dtype=None):
    return np.array(a, dtype=dtype).view(DeviceArray)


class Event:
    """Recorded at once, with the host clock's time (``get_elapsed_time``)."""

    done = True

    def __init__(self):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        assert self.t is not None, "waited on an event that was never recorded"


class Stream:
    ptr = 0

    def __init__(self, non_blocking=False):
        pass

    def record(self):
        event = Event()
        event.record(self)
        return event

    def wait_event(self, event):
        assert event is not None and event.t is not None, "waited on an event nobody recorded"

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Device:
    """``cupy.cuda.Device``: one stand-in GPU, id 0, usable as a context."""

    id = 0

    def __init__(self, device=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def slab_alias(slab, k0, shape):
    """``leveret.operators.cone.slab_alias`` on host memory: an array of the
    whole volume's shape whose slices k0.. are ``slab``'s memory (the kernels
    and their CPU mirror touch only the slices they are given)."""
    start = slab.ctypes.data - k0 * shape[1] * shape[2] * slab.itemsize
    memory = (ctypes.c_char * (int(np.prod(shape)) * slab.itemsize)).from_address(start)
    return np.ndarray(shape, slab.dtype, buffer=memory)


@contextlib.contextmanager
def lent_streams(count=1):
    """``leveret.cuda.device_state.lend_streams`` with stand-in streams (none kept between calls)."""
    yield [Stream() for _ in range(count)]


def install(monkeypatch, n_gpus: int = 2) -> None:
    from leveret import _validate
    from leveret.cuda import devices, pipeline
    from leveret.cuda import device_state

    stream = Stream()

    def memcpy_2d(dst, dpitch, src, spitch, width, height, kind, s):
        for i in range(height):
            ctypes.memmove(dst + i * dpitch, src + i * spitch, width)

    runtime = types.SimpleNamespace(
        memcpyAsync=lambda dst, src, n, kind, s: ctypes.memmove(dst, src, n),
        memcpy2DAsync=memcpy_2d,
        memcpyHostToDevice=1,
        memcpyDeviceToHost=2,
        CUDARuntimeError=RuntimeError,
        hostRegister=lambda ptr, n, flags: None,
        hostUnregister=lambda ptr: None,
    )
    cuda = types.SimpleNamespace(
        Stream=Stream,
        Event=Event,
        runtime=runtime,
        get_current_stream=lambda: stream,
        Device=Device,
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
    )
    cupy = types.SimpleNamespace(
        cuda=cuda,
        int64=np.int64,
        float32=np.float32,
        ndarray=DeviceArray,
        zeros=lambda shape, dtype=np.float32: device_array(np.zeros(shape, dtype)),
        empty=lambda shape, dtype=np.float32: device_array(np.empty(shape, dtype)),
        asarray=lambda a, dtype=None: device_array(a, dtype),
        ascontiguousarray=lambda a, dtype=None: device_array(np.ascontiguousarray(a, dtype)),
    )
    cupyx = types.SimpleNamespace(empty_pinned=lambda shape, dtype: np.empty(shape, dtype))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupyx", cupyx)
    monkeypatch.setattr(devices, "visible_device_count", lambda: n_gpus)
    monkeypatch.setattr(devices, "_worker_context", lambda device, budget=None: contextlib.nullcontext())
    monkeypatch.setattr(device_state, "lend_streams", lent_streams)
    monkeypatch.setattr(devices, "_release_memory", lambda device: None)
    monkeypatch.setattr(_validate, "add_nonfinite_count", lambda counter, arr: None)
    monkeypatch.setattr(pipeline, "_pinned_free", {})  # blocks "pinned" here must not reach a real GPU's calls
