// Parallel-beam voxel-driven back-projection through the texture unit.
//
// One thread per output pixel and a pass of up to LEVERET_PAR_MAX_ANGLES
// projections whose (a, b, c) rows sit in constant memory: every thread of a
// warp reads the same row, so the constant cache broadcasts it. The texture
// coordinate is rounded exactly as the CPU reference computes it (no FMA
// contraction), so a CPU that quantises the interpolation weight like the
// texture unit reproduces these kernels.
//
// Two layouts of the layered texture (x = column, y = angle, layer):
//   backproject_parallel_tex   float texels, one slice per layer
//   backproject_parallel_tex2  float2 texels, slices 2L and 2L+1 in layer L:
//                              one fetch filters both, and 64-bit texels
//                              filter at ~60 % of the 32-bit rate, so this
//                              moves ~1.2x the slice-updates per second.

#define LEVERET_PAR_MAX_ANGLES 2048

__constant__ float4 c_par_table[LEVERET_PAR_MAX_ANGLES];  // (a, b, c, unused)

__device__ __forceinline__ float texture_coordinate(float fi, float fj, float4 g)
{
    return __fadd_rn(__fadd_rn(__fmul_rn(fi, g.x), __fmul_rn(fj, g.y)), g.z);
}

extern "C" __global__ void __launch_bounds__(256)
backproject_parallel_tex(cudaTextureObject_t sinos,
                         float* __restrict__ out,        // (n_slices, ny, nx)
                         int nx, int ny, int n_angles, int angle0, int accumulate)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int layer = blockIdx.z;
    if (i >= nx || j >= ny) return;

    const float fi = (float)i, fj = (float)j;
    float acc = 0.0f;
#pragma unroll 8
    for (int n = 0; n < n_angles; ++n) {
        const float u = texture_coordinate(fi, fj, c_par_table[n]);
        acc += tex2DLayered<float>(sinos, u, (float)(angle0 + n) + 0.5f, layer);
    }
    const size_t idx = ((size_t)layer * ny + j) * nx + i;
    out[idx] = accumulate ? out[idx] + acc : acc;
}

extern "C" __global__ void __launch_bounds__(256)
backproject_parallel_tex2(cudaTextureObject_t sinos,
                          float* __restrict__ out,       // (n_slices, ny, nx)
                          int nx, int ny, int n_slices, int n_angles, int angle0, int accumulate)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int layer = blockIdx.z;
    if (i >= nx || j >= ny) return;

    const float fi = (float)i, fj = (float)j;
    float acc0 = 0.0f, acc1 = 0.0f;
#pragma unroll 8
    for (int n = 0; n < n_angles; ++n) {
        const float u = texture_coordinate(fi, fj, c_par_table[n]);
        const float2 v = tex2DLayered<float2>(sinos, u, (float)(angle0 + n) + 0.5f, layer);
        acc0 += v.x;
        acc1 += v.y;
    }
    const size_t plane = (size_t)ny * nx;
    const size_t idx = (size_t)(2 * layer) * plane + (size_t)j * nx + i;
    out[idx] = accumulate ? out[idx] + acc0 : acc0;
    if (2 * layer + 1 < n_slices)
        out[idx + plane] = accumulate ? out[idx + plane] + acc1 : acc1;
}
