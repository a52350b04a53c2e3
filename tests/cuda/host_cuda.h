// The CUDA built-ins both host harnesses need, with plain C++ meanings: one
// "thread" at a time (blockIdx, threadIdx, blockDim are globals the harness
// sets), qualifiers and barriers empty. Built with -ffp-contract=off.
#pragma once
#include <cmath>
#include <algorithm>
#include <cstring>
using std::min; using std::max;
struct dim { unsigned x, y, z; };
static dim blockIdx, threadIdx, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__
#define __launch_bounds__(...)
#define __syncthreads()
