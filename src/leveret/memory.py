"""Memory planning: how many slices fit in one chunk, from the memory actually free."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from .filters import padded_length


def host_available_bytes() -> int:
    """Memory this process may use now: the host's available memory (Linux:
    MemAvailable), or less where a container's limit (cgroup) or the
    process's address-space limit (``ulimit -v``, RLIMIT_AS) leaves less; a
    cautious 2 GiB where none can be read."""
    found = [a for a in (_meminfo_available(), cgroup_available_bytes(), address_space_available_bytes())
             if a is not None]
    return min(found) if found else 2 << 30


def address_space_available_bytes(status: str = "/proc/self/status") -> int | None:
    """Bytes of address space this process may still map under its RLIMIT_AS
    (the soft limit less the VmSize that ``status`` reports), or None where
    there is no limit. An allocation beyond it fails however much memory the
    host has free."""
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = 0
    try:
        with open(status) as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return max(int(soft) - used, 0)


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cgroup_available_bytes(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int | None:
    """Bytes left under this process's cgroup memory limits (limit minus usage,
    the smallest over its cgroup and their parents), or None where there is no
    limit. Reads cgroup v2 (``memory.max``, ``memory.current``) and v1
    (``memory.limit_in_bytes``, ``memory.usage_in_bytes``) at the paths
    ``proc_cgroup`` names under ``root`` (a batch job's limit sits on a child
    cgroup), and at ``root`` itself (a container sees its own cgroup there).
    The host's free memory ignores such limits, and exceeding one gets the
    process killed."""
    def read(path):
        try:
            with open(os.path.join(root, path)) as fh:
                return fh.read().strip()
        except OSError:
            return None

    def available(folder, limit_file, usage_file, cache_key):
        limit = read(folder + limit_file)
        if limit is None or limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None     # no such file, or no limit (v1 writes a huge number)
        usage = read(folder + usage_file)
        used = int(usage) if usage is not None and usage.isdigit() else 0
        # Usage counts the page cache; its inactive part is given back on demand.
        for line in (read(folder + "memory.stat") or "").splitlines():
            key, _, value = line.partition(" ")
            if key == cache_key and value.strip().isdigit():
                used -= min(int(value), used)
        return max(int(limit) - used, 0)

    v2 = ("memory.max", "memory.current", "inactive_file")
    v1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
    places = [("", *v2), ("memory/", *v1), ("", *v1)]
    try:
        with open(proc_cgroup) as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    for line in lines:     # "0::/path" (v2) or "4:memory:/path" (v1)
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), 0, -1):     # the cgroup and its parents
            sub = "/".join(parts[:depth]) + "/"
            if controllers == "":
                places.append((sub, *v2))
            elif "memory" in controllers.split(","):
                places.append(("memory/" + sub, *v1))
    found = [a for a in (available(*place) for place in places) if a is not None]
    return min(found) if found else None


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


# -- slab plans for out-of-core runs --------------------------------------------------------------

def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``: binary units, three significant figures."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"


@dataclass(frozen=True)
class SlabPlan:
    """How an out-of-core job is cut into z-slabs, and what one slab costs.

    Attributes
    ----------
    slab_slices : int
        Slices per slab (the largest that fits both limits).
    n_slices : int
        Slices in the volume.
    host_bytes, gpu_bytes : int
        Estimated peak host and GPU memory of the run at ``slab_slices``
        (``gpu_bytes`` is 0 on the CPU backend).
    host_limit : int
        Host bytes the run may use (the cap, or a share of what is free).
    gpu_limit : int or None
        GPU bytes the run may use; None on the CPU backend.
    volume_bytes : int
        Size of the whole output volume.
    backend : str
    candidates : tuple of (slices, host_bytes, gpu_bytes)
        The estimate at a few slab sizes, for the printed plan.
    """

    slab_slices: int
    n_slices: int
    host_bytes: int
    gpu_bytes: int
    host_limit: int
    gpu_limit: int | None
    volume_bytes: int
    backend: str
    candidates: tuple = field(default=(), compare=False)

    @property
    def n_slabs(self) -> int:
        return -(-self.n_slices // self.slab_slices)

    def describe(self) -> str:
        """The plan as a few lines of text (what ``--dry-run`` prints)."""
        gpu_lim = "-" if self.gpu_limit is None else format_bytes(self.gpu_limit)
        lines = [f"memory plan ({self.backend}): volume {format_bytes(self.volume_bytes)} in "
                 f"{self.n_slabs} slab(s) of {self.slab_slices} slice(s)",
                 f"  host limit {format_bytes(self.host_limit)}, GPU limit {gpu_lim}",
                 f"  {'slices':>8} {'host':>12} {'GPU':>12}  fits"]
        for s, h, g in self.candidates:
            fits = h <= self.host_limit and (self.gpu_limit is None or g <= self.gpu_limit)
            mark = "<- chosen" if s == self.slab_slices else ("yes" if fits else "no")
            lines.append(f"  {s:>8} {format_bytes(h):>12} {format_bytes(g) if g else '-':>12}  {mark}")
        return "\n".join(lines)


def plan_slabs(n_slices: int, host_bytes: Callable[[int], int], gpu_bytes: Callable[[int], int] | None,
               *, host_limit: int, gpu_limit: int | None, volume_bytes: int, backend: str,
               max_slices: int | None = None) -> SlabPlan:
    """The largest slab (in slices) whose estimated host and GPU peaks fit the limits.

    ``host_bytes(s)`` and ``gpu_bytes(s)`` give the estimated peak at ``s``
    slices per slab; both grow with ``s``, so a bisection finds the largest
    fit. Raises MemoryError (the message gives both numbers) when even one
    slice does not fit.
    """
    gpu = gpu_bytes or (lambda s: 0)
    top = n_slices if max_slices is None else max(1, min(n_slices, int(max_slices)))

    def fits(s: int) -> bool:
        return host_bytes(s) <= host_limit and (gpu_limit is None or gpu(s) <= gpu_limit)

    if not fits(1):
        what = (f"host {format_bytes(host_bytes(1))} of {format_bytes(host_limit)}"
                + ("" if gpu_limit is None else f", GPU {format_bytes(gpu(1))} of {format_bytes(gpu_limit)}"))
        raise MemoryError(f"memory: one slice does not fit: it needs {what}; raise the memory cap "
                          "or reconstruct a smaller volume")
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    # For the printed plan: one slice, the powers of two around the choice, the choice, everything.
    shown = {1, lo, top} | {2**k for k in range(1, 40) if lo / 4 <= 2**k <= min(top, 4 * lo)}
    candidates = tuple((s, int(host_bytes(s)), int(gpu(s))) for s in sorted(shown))
    return SlabPlan(slab_slices=lo, n_slices=n_slices, host_bytes=int(host_bytes(lo)),
                    gpu_bytes=int(gpu(lo)), host_limit=int(host_limit), gpu_limit=gpu_limit,
                    volume_bytes=int(volume_bytes), backend=backend, candidates=candidates)


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux/macOS), 0 if unknown."""
    try:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return 0
    import sys
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024
