"""Build a kernel file for the host (g++) with its test harness: the shared
fixture body of test_raytrace_host.py and test_radon3d_host.py."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from leveret.cuda._module import KERNEL_DIR

HERE = Path(__file__).resolve().parent


def build_host_harness(tmp_path_factory, kernel: str, defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Compile ``<kernel>_host_harness.cpp`` into a shared library and load it.

    The harness includes its kernel files from the kernel folder (on the
    include path; where ``<kernel>.cu`` exists its path is also given as the
    macro ``<KERNEL>_CU``) and is built with the macros ``defines``
    (``"NAME=value"``). Without a C++ compiler the test fails under CI
    (environment variable CI set) and is skipped elsewhere.
    """
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        message = f"no C++ compiler (g++) to build {kernel}'s kernels for the host"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run the host-harness tests")
        pytest.skip(message)
    so = tmp_path_factory.mktemp(f"{kernel}_host") / f"lib{kernel}_host.so"
    single = KERNEL_DIR / f"{kernel}.cu"
    cmd = [
        cxx,
        "-O1",
        "-ffp-contract=off",
        "-std=c++17",
        "-shared",
        "-fPIC",
        f"-I{HERE}",
        f"-I{KERNEL_DIR}",
        *(f"-D{d}" for d in defines),
        *([f'-D{kernel.upper()}_CU="{single}"'] if single.exists() else []),
        "-o",
        str(so),
        str(HERE / f"{kernel}_host_harness.cpp"),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(so))
