"""Every .cu file compiles for sm_90 with the launcher's options (NVRTC, no GPU needed).

The ptxas report (registers, stack frame, spills) is printed; run with -s to see
it, or read it in CI's log (.ci/run prints it).
"""
from __future__ import annotations

import os
import re

import pytest

from leveret.cuda._module import compile_report, kernel_files

try:
    import cuda.bindings.nvrtc  # noqa: F401
    HAVE_NVRTC = True
except Exception:  # noqa: BLE001
    HAVE_NVRTC = False


# The bottleneck variants the benchmarks compile (macros in the .cu files).
VARIANTS = {"backproject_cone.cu": [("LEVERET_CONE_NO_TEXTURE",),
                                    ("LEVERET_CONE_NO_TEXTURE", "LEVERET_CONE_NO_UPDATE")],
            "backproject_parallel.cu": [("LEVERET_PAR_NO_TEXTURE",), ("LEVERET_PAR_NO_UPDATE",),
                                        ("LEVERET_PAR_NO_CACHE",),
                                        ("LEVERET_PAR_NO_CACHE", "LEVERET_PAR_NO_UPDATE")]}
CASES = [(p, ()) for p in kernel_files()] + [
    (p, d) for p in kernel_files() for d in VARIANTS.get(p.name, [])]


@pytest.mark.parametrize("path,defines", CASES, ids=lambda x: x.name if hasattr(x, "name") else "+".join(x))
def test_kernel_compiles_for_sm90_without_spills(path, defines):
    if not HAVE_NVRTC:
        if os.environ.get("CI"):
            pytest.fail("CI must compile the kernels: install leveret[test] (cuda-bindings, nvidia-cuda-nvrtc-cu12)")
        pytest.skip("NVRTC not installed (pip install cuda-bindings nvidia-cuda-nvrtc-cu12)")
    ok, log = compile_report(path, arch="sm_90", defines=defines)
    print(f"\n--- {path.name} {defines} (sm_90) ---\n{log}")
    assert ok, log
    assert "Compiling entry function" in log
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", log)]
    assert spills and max(spills) == 0, "a kernel spills registers to local memory"
    frames = [int(n) for n in re.findall(r"(\d+) bytes stack frame", log)]
    assert max(frames) == 0, "a kernel uses a stack frame (local arrays indexed at run time?)"


def test_all_kernels_found():
    names = {p.name for p in kernel_files()}
    assert {"backproject_parallel.cu", "backproject_cone.cu", "radon3d.cu"} <= names
