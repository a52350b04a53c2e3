"""Loading the ``.cu`` files beside this module, with one set of compiler options.

The same options serve CuPy at run time and the CI test that compiles every
kernel for sm_90 through NVRTC on a machine without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = KERNEL_DIR.parent
# -I: the .cu files include the .cuh headers beside them. CuPy's compile cache
# keys on a file's own text and the options, not on what it includes, so the
# headers' digest goes in as a macro: a changed header means a new build.
_HEADERS_DIGEST = hashlib.sha1(b"".join(p.read_bytes() for p in sorted(KERNEL_DIR.glob("*.cuh")))).hexdigest()[:16]
NVRTC_OPTIONS: tuple[str, ...] = ("--std=c++17", f"-I{KERNEL_DIR}", f"-DLEVERET_HEADERS_DIGEST=0x{_HEADERS_DIGEST}")


def _launcher(path):
    """The launcher module of the .cu file ``path``: ``<name>.py`` beside it
    (``raytrace.py`` for the ``raytrace_*.cu`` files)."""
    path = Path(path).resolve()
    launcher = "raytrace" if path.stem.startswith("raytrace_") else path.stem
    package = ".".join(("leveret",) + path.parent.relative_to(PACKAGE_DIR).parts)
    return importlib.import_module(f"{package}.{launcher}")


def file_defines(path) -> tuple[str, ...]:
    """The ``NAME=value`` constants the .cu file ``path`` is built with: the
    ``DEFINES`` of its launcher module (:func:`_launcher`), the one Python
    source of each constant (the .cu files #error without them)."""
    return tuple(getattr(_launcher(path), "DEFINES", ()))


def file_builds(path) -> list[tuple[str, ...]]:
    """Every set of constants the .cu file ``path`` is built with at run time:
    :func:`file_defines`, then the launcher's ``EXTRA_BUILDS`` for the file
    (a second build of raytrace_voxel.cu with 2 x 2 voxel columns per warp)."""
    extra = getattr(_launcher(path), "EXTRA_BUILDS", {})
    return [file_defines(path)] + [tuple(d) for d in extra.get(Path(path).stem, ())]


def kernel_source(name: str) -> str:
    """Text of ``<name>.cu`` beside this module."""
    path = KERNEL_DIR / f"{name}.cu"
    return path.read_text()


def kernel_files() -> list[Path]:
    """Every .cu file of the package (the kernels here, and those beside launchers elsewhere)."""
    return sorted(PACKAGE_DIR.glob("*/*.cu"))


@functools.lru_cache(maxsize=None)
def load_module(name: str, defines: tuple[str, ...] | None = None):
    """A compiled ``cupy.RawModule`` for ``<name>.cu`` (cached per process).

    ``defines`` (``"NAME=value"``) is the file's complete set of constants;
    None takes its launcher's (:func:`file_defines`).
    """
    import cupy

    defines = file_defines(KERNEL_DIR / f"{name}.cu") if defines is None else tuple(defines)
    return cupy.RawModule(code=kernel_source(name), options=NVRTC_OPTIONS + tuple(f"-D{d}" for d in defines))


def compile_report(path: Path, arch: str = "sm_90", defines: tuple[str, ...] | None = None) -> tuple[bool, str]:
    """Compile one .cu file with NVRTC (no GPU needed); returns (ok, ptxas log).

    ``defines`` as in :func:`load_module` (None: the launcher's, as at run
    time). The log has ptxas's per-kernel register, stack and spill figures.
    """
    defines = file_defines(path) if defines is None else tuple(defines)
    from cuda.bindings import nvrtc

    src = Path(path).read_bytes()
    err, prog = nvrtc.nvrtcCreateProgram(src, Path(path).name.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return False, f"nvrtcCreateProgram: {err}"
    opts = (
        [o.encode() for o in NVRTC_OPTIONS]
        + [f"-D{d}".encode() for d in defines]
        + [f"--gpu-architecture={arch}".encode(), b"--ptxas-options=-v"]
    )
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    nvrtc.nvrtcDestroyProgram(prog)
    return err == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace").rstrip("\x00 \n")


def print_reports(arch: str = "sm_90") -> int:
    """Print ptxas's register/spill report for every kernel of every build
    (:func:`file_builds`); exit status 1 on a failure."""
    status = 0
    for path in kernel_files():
        for i, defines in enumerate(file_builds(path)):
            ok, log = compile_report(path, arch, defines)
            build = "" if i == 0 else f", build {i + 1}: {' '.join(defines)}"
            print(f"--- {path.name} ({arch}{build}): {'ok' if ok else 'FAILED'}\n{log}")
            status |= not ok
    return status


if __name__ == "__main__":
    import sys

    sys.exit(print_reports(*sys.argv[1:2]))
