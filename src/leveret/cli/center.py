"""``leveret center``: the rotation axis, estimated or swept."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .scan import _check_output, _say, estimate_center, load_scan


def center(args) -> int:
    from ..io import atomic_output
    from ..preprocess import center_sweep

    for flag, path in (("--json", args.json), ("--montage", args.montage)):
        if path is not None:
            _check_output(Path(path), overwrite=True, flag=flag, args=args, asked_by=None)
    if args.sweep is not None:
        _check_sweep(args.sweep, args.step)
    elif args.montage:
        raise ValueError("--montage: needs --sweep")
    scan = load_scan(args)
    est, data = estimate_center(args, scan, method=args.method, cross_check=True)
    print(f"center {est.center:.2f}  confidence {est.confidence:.2f}  method {est.method}")
    result = {
        "center": est.center,
        "confidence": est.confidence,
        "method": est.method,
        "spread": est.details.get("spread"),
        "at_edge": bool(est.details.get("at_edge")),
        "check": est.details.get("check"),
    }
    n_cols = scan.shape[-1]
    if args.sweep is not None:
        centers = np.arange(est.center - args.sweep, est.center + args.sweep + args.step / 2, args.step)
        centers = centers[(centers >= 0) & (centers <= n_cols - 1)]
        sino = data[:, data.shape[1] // 2, :] if data.ndim == 3 else data
        scores = center_sweep(sino, scan.angles, centers)
        best = float(centers[int(np.argmin(scores))])
        print(f"{'centre':>8} {'negativity':>12}")
        for c, s in zip(centers, scores):
            print(f"{c:8.2f} {s:12.5f}{'  <- best' if c == best else ''}")
        print(f"sweep best {best:.2f} (estimate {est.center:.2f}, difference {best - est.center:+.2f} px)")
        result.update(sweep_best=best, sweep_centers=centers.tolist(), sweep_scores=scores.tolist())
        if args.montage:
            fig = _montage(sino, scan.angles, centers, scores, best)
            with atomic_output(args.montage, overwrite=True) as tmp:
                fig.savefig(tmp, dpi=90, format="png")
            _say(args, f"wrote {args.montage}")
    if args.json:
        with atomic_output(args.json, overwrite=True) as tmp:
            tmp.write_text(json.dumps(result, indent=1))
    return 0


#: Bytes per trial centre of a sweep: its position and score as float64 arrays, their in-range
#: copies and masks, and the Python floats of the printed table and the JSON lists.
SWEEP_BYTES_PER_CENTRE = 96


def _check_sweep(sweep: float, step: float) -> None:
    """Refuse a --sweep/--step that is not positive, or whose trial centres do not fit in
    memory, before any work (and before NumPy tries to allocate them)."""
    from ..resources import format_bytes, host_available_bytes

    if not (math.isfinite(sweep) and math.isfinite(step) and sweep > 0 and step > 0):
        raise ValueError(f"--sweep/--step: expected positive pixel counts, got {sweep} and {step}")
    count = math.ceil(2 * sweep / step + 0.5)  # as np.arange(-sweep, sweep + step / 2, step) counts
    needed, available = count * SWEEP_BYTES_PER_CENTRE, host_available_bytes()
    if needed > available:
        raise ValueError(
            f"--step: a sweep of +-{sweep:g} px in steps of {step:g} px is {count:.3g} trial "
            f"centres, which needs about {format_bytes(needed)} of memory but "
            f"{format_bytes(available)} are available; give a larger --step or a smaller --sweep"
        )


def _montage(sino, angles, centers, scores, best):
    import leveret
    from matplotlib.figure import Figure

    picks = np.unique(
        np.r_[np.linspace(0, len(centers) - 1, min(8, len(centers))).round().astype(int), int(np.argmin(scores))]
    )
    cols = min(3, len(picks))
    rows = -(-len(picks) // cols)
    fig = Figure(figsize=(3.2 * cols, 3.2 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    images = [
        leveret.fbp(sino, leveret.ParallelGeometry(angles, sino.shape[1], center=float(centers[i])), backend="auto")
        for i in picks
    ]
    lo, hi = np.percentile(np.concatenate([im.ravel() for im in images]), [1, 99.5])
    for ax, i, im in zip(axes, picks, images):
        ax.imshow(im, cmap="gray", vmin=lo, vmax=hi, origin="lower")  # y upwards, as preview draws it
        ax.set_title(
            f"centre {centers[i]:.2f}: {scores[i]:.4f}" + ("  (best)" if centers[i] == best else ""),
            fontsize=9,
            color="tab:red" if centers[i] == best else "black",
        )
        ax.axis("off")
    for ax in axes[len(picks) :]:
        ax.axis("off")
    fig.suptitle("centre sweep (negativity score, lower is better)")
    return fig
