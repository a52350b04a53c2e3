"""CUDA kernels (``.cu`` files) and their CuPy launchers, side by side.

Nothing here imports CuPy at import time: the package works without a GPU.
"""
