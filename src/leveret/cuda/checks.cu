// Counting the values of an array that are NaN, Inf or beyond a magnitude
// limit: one pass over the array, no temporary, one 64-bit counter.
// A grid-stride loop keeps the grid small whatever the array's size; each warp
// sums its lanes' counts and adds them once (most arrays count nothing, so the
// atomics are rare).

#ifndef LEVERET_CHECKS_BLOCK
#error "checks.cu needs its constants from checks.py (DEFINES)"
#endif

__device__ __forceinline__ bool outside(float v, double limit) { return !(fabsf(v) <= (float)limit); }
__device__ __forceinline__ bool outside(double v, double limit) { return !(fabs(v) <= limit); }
// float16 arrives as its 16 bits (no header needed): converted by the hardware.
__device__ __forceinline__ bool outside(unsigned short bits, double limit) {
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(bits));
    return !(fabsf(v) <= (float)limit);
}

template <typename T>
__device__ void count_outside(const T* x, long long n, double limit, unsigned long long* count) {
    unsigned long long c = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        c += outside(x[i], limit) ? 1ull : 0ull;   // NaN fails every comparison: counted
    for (int offset = 16; offset > 0; offset >>= 1)
        c += __shfl_down_sync(0xffffffffu, c, offset);
    if ((threadIdx.x & 31) == 0 && c)
        atomicAdd(count, c);
}

extern "C" __global__ void __launch_bounds__(LEVERET_CHECKS_BLOCK)
count_outside_f16(const unsigned short* x, long long n, double limit, unsigned long long* count) {
    count_outside(x, n, limit, count);
}
extern "C" __global__ void __launch_bounds__(LEVERET_CHECKS_BLOCK)
count_outside_f32(const float* x, long long n, double limit, unsigned long long* count) {
    count_outside(x, n, limit, count);
}
extern "C" __global__ void __launch_bounds__(LEVERET_CHECKS_BLOCK)
count_outside_f64(const double* x, long long n, double limit, unsigned long long* count) {
    count_outside(x, n, limit, count);
}
