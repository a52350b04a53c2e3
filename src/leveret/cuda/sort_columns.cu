// Sorting every detector column of a stack of sinograms along the angle axis,
// and putting sorted values back where they came from: the two halves of the
// sorting-based ring removal of Vo, Atwood and Drakopoulos (2018).
//
// The stack is (n_angles, n_columns) with the angle stride n_columns: column
// j's values are x[j], x[j + n_columns], ... (a projection stack
// (n_angles, n_rows, n_cols) is n_rows * n_cols such columns).
//
// sort_columns: one block per column, a bitonic sort in shared memory of 64-bit
// keys (the value's bits made order-preserving as an unsigned integer, above the
// angle index). The index in the low bits makes every key distinct, so equal
// values keep their angle order: the result equals a stable sort (NumPy's
// argsort(kind="stable")), NaN last. -0.0 is sorted (and returned) as +0.0.
// The key array is padded to a power of two with all-ones keys, which sort last.

#ifndef LEVERET_SORT_BLOCK
#error "sort_columns.cu needs its constants from sort_columns.py (DEFINES)"
#endif

__device__ __forceinline__ unsigned int ordered_bits(float v) {
    if (v != v) return 0xffc00000u;                 // NaN (any sign): above +Inf, as NumPy sorts it
    if (v == 0.0f) v = 0.0f;                        // -0.0 == +0.0: the angle index breaks the tie
    unsigned int u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float value_of(unsigned int u) {
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

extern "C" __global__ void __launch_bounds__(LEVERET_SORT_BLOCK)
sort_columns(const float* __restrict__ x, float* __restrict__ sorted, int* __restrict__ order,
             int n_angles, long long n_columns, int n_pow2) {
    extern __shared__ unsigned long long keys[];
    const long long column = blockIdx.x;
    for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) {
        unsigned long long key = ~0ull;
        if (i < n_angles)
            key = ((unsigned long long)ordered_bits(x[column + (long long)i * n_columns]) << 32) | (unsigned)i;
        keys[i] = key;
    }
    __syncthreads();
    for (int k = 2; k <= n_pow2; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < (n_pow2 >> 1); t += blockDim.x) {
                const int i = 2 * j * (t / j) + (t % j);     // bit j of i is 0; its partner is i + j
                const unsigned long long a = keys[i], b = keys[i + j];
                const bool ascending = (i & k) == 0;
                if ((a > b) == ascending) {
                    keys[i] = b;
                    keys[i + j] = a;
                }
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < n_angles; i += blockDim.x) {
        const unsigned long long key = keys[i];
        const long long at = column + (long long)i * n_columns;
        sorted[at] = value_of((unsigned int)(key >> 32));
        order[at] = (int)(key & 0xffffffffu);
    }
}

// out[order[i, j], j] = values[i, j] for every sorted position i of column j.
extern "C" __global__ void __launch_bounds__(LEVERET_SORT_BLOCK)
unsort_columns(const float* __restrict__ values, const int* __restrict__ order, float* __restrict__ out,
               long long n_columns, long long n_total) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long at = (long long)blockIdx.x * blockDim.x + threadIdx.x; at < n_total; at += stride) {
        const long long column = at % n_columns;
        out[column + (long long)order[at] * n_columns] = values[at];
    }
}
