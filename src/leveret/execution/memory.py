"""Slab plans for out-of-core runs: how many slices a slab may hold within
the host's and the GPU's limits (:func:`plan_slabs`, :class:`SlabPlan`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..resources import format_bytes


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
        lines = [
            f"memory plan ({self.backend}): volume {format_bytes(self.volume_bytes)} in "
            f"{self.n_slabs} slab(s) of {self.slab_slices} slice(s)",
            f"  host limit {format_bytes(self.host_limit)}, GPU limit {gpu_lim}",
            f"  {'slices':>8} {'host':>12} {'GPU':>12}  fits",
        ]
        for s, h, g in self.candidates:
            fits = h <= self.host_limit and (self.gpu_limit is None or g <= self.gpu_limit)
            mark = "<- chosen" if s == self.slab_slices else ("yes" if fits else "no")
            lines.append(f"  {s:>8} {format_bytes(h):>12} {format_bytes(g) if g else '-':>12}  {mark}")
        return "\n".join(lines)


def plan_slabs(
    n_slices: int,
    host_bytes: Callable[[int], int],
    gpu_bytes: Callable[[int], int] | None,
    *,
    host_limit: int,
    gpu_limit: int | None,
    volume_bytes: int,
    backend: str,
    max_slices: int | None = None,
) -> SlabPlan:
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
        what = f"host {format_bytes(host_bytes(1))} of {format_bytes(host_limit)}" + (
            "" if gpu_limit is None else f", GPU {format_bytes(gpu(1))} of {format_bytes(gpu_limit)}"
        )
        raise MemoryError(
            f"memory: one slice does not fit: it needs {what}; raise the memory cap or reconstruct a smaller volume"
        )
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    # For the printed plan: one slice, the powers of two around the choice, the choice, everything.
    shown = {1, lo, top} | {2**k for k in range(1, 40) if lo / 4 <= 2**k <= min(top, 4 * lo)}
    candidates = tuple((s, int(host_bytes(s)), int(gpu(s))) for s in sorted(shown))
    return SlabPlan(
        slab_slices=lo,
        n_slices=n_slices,
        host_bytes=int(host_bytes(lo)),
        gpu_bytes=int(gpu(lo)),
        host_limit=int(host_limit),
        gpu_limit=gpu_limit,
        volume_bytes=int(volume_bytes),
        backend=backend,
        candidates=candidates,
    )
