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
    ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec=color, lw=1.5, label=f"volume {volume.shape}"))
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
        e = np.array([np.cos(t), np.sin(t)])  # detector column axis
        s = geometry.column_positions(n)
        det_lo, det_hi = s[0] - geometry.det_spacing / 2, s[-1] + geometry.det_spacing / 2
        c = colors[k % len(colors)]
        p0, p1 = det_lo * e + radius * d, det_hi * e + radius * d
        ax.plot([p0[0], p1[0]], [p0[1], p1[1]], color=c, lw=3, label=f"detector at {np.degrees(t):.1f} deg")
        ax.annotate(
            "", xy=p1, xytext=p1 - 0.15 * radius * e, arrowprops=dict(arrowstyle="->", color=c)
        )  # column index grows along e
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


def _axes3d(ax):
    if ax is None:
        from matplotlib.figure import Figure  # no pyplot: works headless, leaks no windows

        ax = Figure(figsize=(7, 7)).add_subplot(projection="3d")
    return ax


def _box_edges(volume):
    """The 12 edges of the volume's outer faces, as (12, 2, 3) world points."""
    (x0, x1), (y0, y1) = volume.extent("x"), volume.extent("y")
    z0, z1 = volume.extent("z") if not volume.is_2d else (0.0, 0.0)
    corners = np.array([[x, y, z] for z in (z0, z1) for y in (y0, y1) for x in (x0, x1)])
    pairs = [
        (0, 1),
        (2, 3),
        (4, 5),
        (6, 7),
        (0, 2),
        (1, 3),
        (4, 6),
        (5, 7),
        (0, 4),
        (1, 5),
        (2, 6),
        (3, 7),
    ]  # along x, along y, along z
    return corners[np.array(pairs)]


def plot_cone(geometry, volume=None, ax=None, n_views=6):
    """3D view of a cone-beam scan: source trajectory, detectors, corner rays, volume box.

    The detector of a few views is drawn as a quadrilateral at the
    source-detector distance (when the geometry knows its pixel size; else at
    twice the depth of the world origin), with the rays from the source to
    its four corners and the principal ray; a dot marks the corner of pixel
    (row 0, col 0) of the first view drawn.
    """
    from mpl_toolkits.mplot3d.art3d import Line3DCollection, Poly3DCollection

    ax = _axes3d(ax)
    sources = geometry.source_positions()
    if geometry.pixel_size is not None:
        frame = geometry.detector_frame()
    else:
        depth0 = geometry.depth(np.zeros(3))
        fallback = np.where(depth0 > 0, 2 * depth0, 2 * np.linalg.norm(sources, axis=1))
        frame = geometry.detector_frame(distance=np.maximum(fallback, 1e-12))
    half_u = geometry.n_cols / 2 * frame.u
    half_v = geometry.n_rows / 2 * frame.v
    # Corner order (col, row): (0, 0), (n_cols, 0), (n_cols, n_rows), (0, n_rows) edges.
    corners = np.stack(
        [
            frame.center - half_u - half_v,
            frame.center + half_u - half_v,
            frame.center + half_u + half_v,
            frame.center - half_u + half_v,
        ],
        axis=1,
    )

    ax.plot(*sources.T, color="k", lw=0.8, label="source trajectory")
    views = np.unique(np.linspace(0, geometry.n_views - 1, min(n_views, geometry.n_views)).astype(int))
    colors = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7"]
    points = [sources, corners.reshape(-1, 3)]
    for k, n in enumerate(views):
        c = colors[k % len(colors)]
        label = f"view {n}" + ("" if geometry.angles is None else f" ({np.degrees(geometry.angles[n]):.1f} deg)")
        ax.add_collection3d(Poly3DCollection([corners[n]], facecolor=c, edgecolor=c, alpha=0.25))
        rays = [np.stack([sources[n], q]) for q in corners[n]]
        ax.add_collection3d(Line3DCollection(rays, colors=c, linewidths=0.6, alpha=0.7))
        ax.plot(*np.stack([sources[n], frame.center[n]]).T, color=c, ls="--", lw=0.8)
        ax.scatter(*sources[n], color=c, s=20, label=label)
    ax.scatter(*corners[views[0], 0], color="k", s=12, label="pixel (0, 0) corner")
    if volume is not None:
        edges = _box_edges(volume)
        ax.add_collection3d(Line3DCollection(edges, colors="0.3", linewidths=1.2, label=f"volume {volume.shape}"))
        points.append(edges.reshape(-1, 3))
    ax.scatter([0], [0], [0], color="k", marker="+", s=40, label="origin")
    _finish_3d(ax, points, f"cone beam: {geometry.n_views} views, {geometry.n_rows} x {geometry.n_cols} detector")
    return ax


def _finish_3d(ax, points, title):
    """The rotation axis (z) through everything drawn, equal axis scales, labels."""
    allp = np.concatenate(points)
    z0, z1 = allp[:, 2].min(), allp[:, 2].max()
    pad = 0.1 * max(z1 - z0, 1e-12)
    ax.plot([0, 0], [0, 0], [z0 - pad, z1 + pad], color="k", ls=":", lw=1.0, label="rotation axis (z)")
    # Equal scales on all axes: a cube around everything drawn.
    mid = (allp.max(axis=0) + allp.min(axis=0)) / 2
    half = max(float(np.max(allp.max(axis=0) - allp.min(axis=0))) / 2, 1e-12) * 1.05
    ax.set_xlim(mid[0] - half, mid[0] + half)
    ax.set_ylim(mid[1] - half, mid[1] + half)
    ax.set_zlim(mid[2] - half, mid[2] + half)
    ax.set_box_aspect((1, 1, 1))
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_zlabel("z")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize="x-small", framealpha=0.8)


def plot_parallel_vec(geometry, volume=None, ax=None, n_views=6):
    """3D view of a parallel-beam scan with per-view rays (``ParallelVecGeometry``):
    a few detectors, each drawn beyond the scene along its rays, the rays
    through its corners and centre, the rotation axis and the volume box."""
    from mpl_toolkits.mplot3d.art3d import Line3DCollection, Poly3DCollection

    ax = _axes3d(ax)
    half_u = geometry.n_cols / 2 * geometry.u
    half_v = geometry.n_rows / 2 * geometry.v
    size = max(float(np.max(np.linalg.norm(half_u, axis=1))), float(np.max(np.linalg.norm(half_v, axis=1))))
    if volume is not None:
        size = max(size, 0.5 * float(np.linalg.norm([np.ptp(volume.extent(a)) for a in "xyz"])))
    reach = 1.5 * size  # detectors this far along the rays, rays from as far before
    rays = geometry.rays
    centre = geometry.centers - np.einsum("ni,ni->n", geometry.centers, rays)[:, None] * rays  # in the origin's plane
    corners = np.stack(
        [centre - half_u - half_v, centre + half_u - half_v, centre + half_u + half_v, centre - half_u + half_v], axis=1
    )
    views = np.unique(np.linspace(0, geometry.n_views - 1, min(n_views, geometry.n_views)).astype(int))
    colors = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7"]
    points = [np.zeros((1, 3))]
    for k, n in enumerate(views):
        c = colors[k % len(colors)]
        label = f"view {n}" + ("" if geometry.angles is None else f" ({np.degrees(geometry.angles[n]):.1f} deg)")
        det = corners[n] + reach * rays[n]
        ax.add_collection3d(Poly3DCollection([det], facecolor=c, edgecolor=c, alpha=0.25, label=label))
        lines = [
            np.stack([q - reach * rays[n], q + reach * rays[n]]) for q in np.vstack([corners[n], centre[n : n + 1]])
        ]
        ax.add_collection3d(Line3DCollection(lines, colors=c, linewidths=0.6, alpha=0.7))
        points += [det, lines[0]]
    first = corners[views[0], 0] + reach * rays[views[0]]
    ax.scatter(*first, color="k", s=12, label="pixel (0, 0) corner")
    if volume is not None:
        edges = _box_edges(volume)
        ax.add_collection3d(Line3DCollection(edges, colors="0.3", linewidths=1.2, label=f"volume {volume.shape}"))
        points.append(edges.reshape(-1, 3))
    ax.scatter([0], [0], [0], color="k", marker="+", s=40, label="origin")
    tilt = np.degrees(np.arccos(np.clip(geometry.axis_cosines(), -1.0, 1.0)))
    what = f"tilt {tilt.mean():.3g} deg" if np.ptp(tilt) < 1e-6 else f"tilt {tilt.min():.3g}..{tilt.max():.3g} deg"
    _finish_3d(
        ax, points, f"parallel beam ({what}): {geometry.n_views} views, {geometry.n_rows} x {geometry.n_cols} detector"
    )
    return ax
