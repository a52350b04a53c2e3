"""``leveret info`` and ``leveret tune``: the backends found, and this GPU's kernel choices."""

from __future__ import annotations


def info(args) -> int:
    from ..backends import describe
    import leveret

    print(f"leveret {leveret.__version__}")
    for dev in describe():
        if dev["backend"] == "cpu":
            print(f"  cpu   : {dev['threads']} threads (numba {dev['numba']}, numpy {dev['numpy']})")
        elif not dev.get("available"):
            print(f"  cuda  : not available: {dev['reason']}")
        else:
            print(
                f"  cuda:{dev['device']}: {dev['name']} (sm_{dev['compute_capability'].replace('.', '')}, "
                f"{dev['multiprocessors']} SMs), {dev['memory_free_gib']:.1f} of "
                f"{dev['memory_total_gib']:.1f} GiB free; CuPy {dev['cupy']}, CUDA runtime "
                f"{dev['cuda_runtime']}, driver {dev['cuda_driver']}"
            )
    from ..resources import format_bytes, host_available_bytes

    print(f"  host  : {format_bytes(host_available_bytes())} available")
    from ..cuda import tuning

    tuned = tuning.describe()
    print(f"  tuned choices ({tuning.cache_path()}, 'leveret tune'):" + ("" if tuned else " none yet"))
    for line in tuned:
        print(f"    {line}")
    print(
        "  kernel='auto' runs: an explicit kernel if given, else this GPU's tuned choice for the problem's\n"
        "    class, else the rule (docs/performance.md); an operator's kernel_choice says which ran and why"
    )
    return 0


def tune(args) -> int:
    from ..backends import resolve

    resolve("cuda")  # a RuntimeError naming what is missing without a GPU
    import cupy

    from ..cuda import gpu_name, tuning
    from ..operators import autotune

    n_devices = cupy.cuda.runtime.getDeviceCount()
    if args.device >= n_devices:
        raise ValueError(f"--device: no CUDA device {args.device} ({n_devices} found)")
    with cupy.cuda.Device(args.device):
        print(f"tuning {gpu_name()} into {tuning.cache_path()}", flush=True)
        t = autotune.tune_transpose()
        ms = [f"{m * 1e3:.1f}" for pair in t["measured"] for m in pair]
        print(
            f"  cone transpose: the band transpose takes {t['atomic_scale']:.2f} x the model's time (probes: "
            f"gather {ms[0]} / {ms[2]} ms, band {ms[1]} / {ms[3]} ms)",
            flush=True,
        )

        done = iter(range(1, len(autotune.PARALLEL_CLASSES) + 1))

        def said(row):
            problem = (
                f"[{next(done)}/{len(autotune.PARALLEL_CLASSES)}, {row['elapsed']:.0f} of "
                f"{args.budget} s] {row['slices']} x {row['side']}^2 from {row['angles']} angles, "
                f"{row['precision']}"
            )
            if "skipped" in row:
                print(f"  parallel {problem}: skipped, {row['skipped']}", flush=True)
                return
            config = ", ".join(f"{k}={val}" for k, val in row["kernel"].items())
            print(f"  parallel {problem}: {config} ({row['seconds'] * 1e3:.2f} ms, best of {row['tried']})", flush=True)

        autotune.tune_parallel(budget_s=args.budget, progress=said)
    return 0
