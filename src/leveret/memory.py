"""Memory planning: how many slices fit in one chunk, from the memory actually free."""
from __future__ import annotations

import os

from .filters import padded_length


def host_available_bytes() -> int:
    """Physical memory available now (Linux: MemAvailable), else a cautious 2 GiB."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2 << 30


def gpu_free_bytes() -> int:
    """Free device memory plus what CuPy's pool holds but does not use."""
    import cupy
    free, _ = cupy.cuda.Device().mem_info
    pool = cupy.get_default_memory_pool()
    return free + pool.free_bytes()


def fbp_bytes_per_slice(n_angles: int, n_cols: int, ny: int, nx: int, itemsize: int = 4,
                        *, streamed: bool = False) -> int:
    """Peak working memory of one slice in an FBP chunk.

    Counts the raw rows, the padded real and complex FFT buffers, the filtered
    sinogram, its texture copy and the output slice; ``streamed`` doubles the
    input and output buffers (two chunks in flight).
    """
    n_pad = padded_length(n_cols)
    rows = n_angles * n_cols * itemsize
    fft = n_angles * n_pad * itemsize * 3          # padded input, spectrum (complex, half length), irfft out
    filtered = 3 * rows                            # weighted copy, packed copy, texture
    image = ny * nx * itemsize
    return (2 if streamed else 1) * (rows + image) + fft + filtered


def plan_chunk(n_slices: int, bytes_per_slice: int, available: int, *, fraction: float = 0.6,
               max_slices: int | None = None) -> int:
    """Largest chunk (in slices) whose working set fits in ``fraction`` of ``available``."""
    fit = int(available * fraction) // max(bytes_per_slice, 1)
    if fit < 1:
        raise MemoryError(f"one slice needs {bytes_per_slice / 2**20:.1f} MiB but only "
                          f"{available * fraction / 2**20:.1f} MiB may be used")
    chunk = min(n_slices, fit)
    if max_slices is not None:
        chunk = min(chunk, max_slices)
    return max(1, chunk)
