"""CPU kernels (Numba, multi-threaded): the reference every GPU kernel is checked against."""
