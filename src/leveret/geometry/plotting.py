"""Matplotlib figures of geometries: what the scan looks like from above."""
from __future__ import annotations

import numpy as np


def _axes(ax):
    if ax is None:
        from matplotlib.figure import Figure  # no pyplot: works headless, leaks no windows
        ax = Figure(figsize=(6, 6)).add_subplot()
    return ax


def plot_volume(volume, ax=None, color="0.3"):
    from matplotlib.patches import Rectangle
    ax = _axes(ax)
    (x0, x1), (y0, y1) = volume.extent("x"), volume.extent("y")
    ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec=color, lw=1.5,
                           label=f"volume {volume.shape}"))
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.autoscale_view()
    return ax


def plot_parallel(geometry, volume, ax=None, n_views=4, n_rays=7):
    """Top view: volume outline, detectors and a fan of rays at a few angles."""
    ax = _axes(ax)
    plot_volume(volume, ax=ax)
    (x0, x1), (y0, y1) = volume.extent("x"), volume.extent("y")
    det_half = geometry.n_cols * geometry.det_spacing / 2
    radius = 0.75 * max(np.hypot(x1 - x0, y1 - y0), 2 * det_half)
    views = np.unique(np.linspace(0, geometry.n_angles - 1, min(n_views, geometry.n_angles)).astype(int))
    colors = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7"]
    for k, n in enumerate(views):
        t = geometry.angles[n]
        d = np.array([-np.sin(t), np.cos(t)])  # ray direction
        e = np.array([np.cos(t), np.sin(t)])   # detector column axis
        s = geometry.column_positions(n)
        det_lo, det_hi = s[0] - geometry.det_spacing / 2, s[-1] + geometry.det_spacing / 2
        c = colors[k % len(colors)]
        p0, p1 = det_lo * e + radius * d, det_hi * e + radius * d
        ax.plot([p0[0], p1[0]], [p0[1], p1[1]], color=c, lw=3,
                label=f"detector at {np.degrees(t):.1f} deg")
        ax.annotate("", xy=p1, xytext=p1 - 0.15 * radius * e,
                    arrowprops=dict(arrowstyle="->", color=c))  # column index grows along e
        for s_ray in np.linspace(s[0], s[-1], n_rays):
            a, b = s_ray * e - radius * d, s_ray * e + radius * d
            ax.plot([a[0], b[0]], [a[1], b[1]], color=c, lw=0.6, alpha=0.6)
    ax.plot([0], [0], "k+", ms=10, label="rotation axis")
    ax.set_title(f"parallel beam: {geometry.n_angles} angles, {geometry.n_cols} columns")
    ax.legend(loc="upper right", fontsize="x-small", framealpha=0.8)
    lim = 1.05 * np.hypot(radius, det_half)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    return ax
