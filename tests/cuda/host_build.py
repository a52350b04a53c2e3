"""Build a kernel file for the host (g++) with its test harness: the shared
fixture body of test_raytrace_host.py and test_radon3d_host.py."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from leveret.cuda._module import KERNEL_DIR

HERE = Path(__file__).resolve().parent


def build_host_harness(tmp_path_factory, kernel: str, defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Compile ``<kernel>_host_harness.cpp`` (which includes ``<kernel>.cu``
    through the macro ``<KERNEL>_CU``) into a shared library and load it;
    skips when there is no C++ compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip(f"no C++ compiler (g++) to build {kernel}.cu for the host")
    so = tmp_path_factory.mktemp(f"{kernel}_host") / f"lib{kernel}_host.so"
    cmd = [cxx, "-O1", "-ffp-contract=off", "-std=c++17", "-shared", "-fPIC", f"-I{HERE}",
           *(f"-D{d}" for d in defines), f'-D{kernel.upper()}_CU="{KERNEL_DIR / (kernel + ".cu")}"',
           "-o", str(so), str(HERE / f"{kernel}_host_harness.cpp")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return ctypes.CDLL(str(so))
