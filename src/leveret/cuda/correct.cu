// Frame correction in one pass (launcher: correct.py; the CPU twins are
// leveret.live.correct.Correction.frame and leveret.preprocess's normalize and
// minus_log): flat/dark, -log, float32, written into (k, n_rows, n_pad), zero
// past n_cols (the live view's zero-padded FFT input; n_pad = n_cols for a slab),
// with each frame's count of non-finite results.
// Grid: x over the padded row, y over detector rows, z over frames.

#ifndef LEVERET_CORRECT_BLOCK
#error "correct.cu needs its constants from leveret.cuda.correct.DEFINES"
#endif

__device__ __forceinline__ float value(const unsigned short* f, long long i) { return (float)f[i]; }
__device__ __forceinline__ float value(const float* f, long long i) { return f[i]; }

template <typename T>
__device__ void correct(const T* __restrict__ frames, const float* __restrict__ dark,
                        const float* __restrict__ denom, float* __restrict__ out, int* counts,
                        int n_rows, int n_cols, int n_pad, int normalize, int minus_log, float floor_t)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y, k = blockIdx.z;
    if (c >= n_pad) return;
    const long long o = ((long long)k * n_rows + r) * n_pad + c;
    if (c >= n_cols) { out[o] = 0.0f; return; }
    const long long p = (long long)r * n_cols + c;
    float t = value(frames, (long long)k * n_rows * n_cols + p);
    if (normalize) {
        const float d = denom[p];
        t = d > 0.0f ? __fdiv_rn(t - dark[p], d) : 1.0f;   // dead pixel: zero attenuation
    }
    if (minus_log) {
        if (t < floor_t) t = floor_t;   // NaN stays NaN (the comparison is false)
        t = -logf(t);
    }
    if (!isfinite(t)) atomicAdd(counts + k, 1);
    out[o] = t;
}

extern "C" __global__ void __launch_bounds__(LEVERET_CORRECT_BLOCK)
correct_u16(const unsigned short* frames, const float* dark, const float* denom, float* out, int* counts,
            int n_rows, int n_cols, int n_pad, int normalize, int minus_log, float floor_t)
{ correct(frames, dark, denom, out, counts, n_rows, n_cols, n_pad, normalize, minus_log, floor_t); }

extern "C" __global__ void __launch_bounds__(LEVERET_CORRECT_BLOCK)
correct_f32(const float* frames, const float* dark, const float* denom, float* out, int* counts,
            int n_rows, int n_cols, int n_pad, int normalize, int minus_log, float floor_t)
{ correct(frames, dark, denom, out, counts, n_rows, n_cols, n_pad, normalize, minus_log, floor_t); }
