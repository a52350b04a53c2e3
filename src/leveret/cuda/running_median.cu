// Medians of odd-sized windows along the last (contiguous) axis, ends reflected
// as scipy.ndimage's mode "reflect" (d c b a | a b c d | d c b a): the small-
// and large-stripe steps of the ring removal of Vo, Atwood and Drakopoulos (2018).
//
// Each thread holds its window in registers, padded to a power of two with
// -Inf below and +Inf above, and sorts it with a bitonic network of
// compare-exchanges (fminf / fmaxf), fully unrolled: the compiler keeps only
// those the middle element depends on. The median is the element size / 2 of
// the sorted window, ties included: the CPU path's np.partition exactly. The
// window size is a compile-time constant (one build per size). Inputs are
// checked finite before: fminf and fmaxf drop NaN.

#if !defined(LEVERET_MEDIAN_TILE) || !defined(LEVERET_MEDIAN_SIZE) || !defined(LEVERET_MEDIAN_POW2)
#error "running_median.cu needs its constants from running_median.py (DEFINES, window_defines)"
#endif

#define SIZE LEVERET_MEDIAN_SIZE
#define POW2 LEVERET_MEDIAN_POW2
#define HALF (SIZE / 2)
#define BELOW ((POW2 - SIZE) / 2)  // -Inf pads: the median sits at BELOW + HALF

// Index i of a line of n values, reflected at both ends (any distance: period 2n).
__device__ __forceinline__ int reflect(long long i, int n) {
    const long long period = 2LL * n;
    long long m = i % period;
    if (m < 0) m += period;
    return (int)(m < n ? m : period - 1 - m);
}

__device__ __forceinline__ void compare_exchange(float& a, float& b) {
    const float lo = fminf(a, b);
    b = fmaxf(a, b);
    a = lo;
}

// The median of v[BELOW .. BELOW + SIZE - 1] (the rest: the pads).
__device__ __forceinline__ float network_median(float (&v)[POW2]) {
#pragma unroll
    for (int k = 2; k <= POW2; k <<= 1) {
#pragma unroll
        for (int j = k >> 1; j > 0; j >>= 1) {
#pragma unroll
            for (int i = 0; i < POW2; ++i) {
                const int l = i ^ j;
                if (l > i) {
                    if ((i & k) == 0)
                        compare_exchange(v[i], v[l]);
                    else
                        compare_exchange(v[l], v[i]);
                }
            }
        }
    }
    return v[BELOW + HALF];
}

__device__ __forceinline__ void pad(float (&v)[POW2]) {
#pragma unroll
    for (int i = 0; i < BELOW; ++i) v[i] = -__int_as_float(0x7f800000);
#pragma unroll
    for (int i = BELOW + SIZE; i < POW2; ++i) v[i] = __int_as_float(0x7f800000);  // +Inf
}

// out[line, c] = median of x[line, c - HALF .. c + HALF] (reflected), for
// n_lines lines of n values. Grid (ceil(n / TILE), lines); block TILE threads;
// shared memory TILE + SIZE - 1 floats.
extern "C" __global__ void __launch_bounds__(LEVERET_MEDIAN_TILE)
running_median(const float* __restrict__ x, float* __restrict__ out, long long n_lines, int n) {
    __shared__ float tile[LEVERET_MEDIAN_TILE + SIZE - 1];
    const long long c0 = (long long)blockIdx.x * LEVERET_MEDIAN_TILE;
    for (long long line = blockIdx.y; line < n_lines; line += gridDim.y) {
        const float* row = x + line * n;
        for (int i = threadIdx.x; i < LEVERET_MEDIAN_TILE + SIZE - 1; i += LEVERET_MEDIAN_TILE)
            tile[i] = row[reflect(c0 - HALF + i, n)];
        __syncthreads();
        const long long c = c0 + threadIdx.x;
        if (c < n) {
            float v[POW2];
            pad(v);
#pragma unroll
            for (int j = 0; j < SIZE; ++j) v[BELOW + j] = tile[threadIdx.x + j];
            out[line * n + c] = network_median(v);
        }
        __syncthreads();
    }
}

// out[a, k] = median of x[a, rows[k], cols[k] - HALF .. cols[k] + HALF]
// (reflected within the row), x of shape (n_angles, n_rows, n_cols): the
// medians at the large stripes only. Grid (ceil(n_points / TILE), angles);
// block TILE threads.
extern "C" __global__ void __launch_bounds__(LEVERET_MEDIAN_TILE)
medians_at(const float* __restrict__ x, float* __restrict__ out, int n_angles, int n_rows, int n_cols,
           const int* __restrict__ rows, const int* __restrict__ cols, int n_points) {
    const int k = blockIdx.x * LEVERET_MEDIAN_TILE + threadIdx.x;
    if (k >= n_points) return;
    for (int a = blockIdx.y; a < n_angles; a += gridDim.y) {
        const float* row = x + ((long long)a * n_rows + rows[k]) * n_cols;
        float v[POW2];
        pad(v);
#pragma unroll
        for (int j = 0; j < SIZE; ++j) v[BELOW + j] = row[reflect((long long)cols[k] - HALF + j, n_cols)];
        out[(long long)a * n_points + k] = network_median(v);
    }
}
