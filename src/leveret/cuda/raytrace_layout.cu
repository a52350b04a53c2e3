// The structured kernels' z-fastest copy of the volume: volT[(j nx + i) nz + k]
// = vol[(k ny + j) nx + i], or with borders of PXY voxels in x and y and PZ
// in z below (structured Joseph's volP, joseph_padded_nz slices per column;
// the borders are not touched: the caller zeroes them). For one j both directions are 2D transposes between the
// (nz, nx) slab of vol (row stride ny nx) and the contiguous (nx, nz) slab of
// volT, done in 32 x 32 tiles through shared memory so that reads and writes
// are both coalesced (a strided elementwise copy reads one 32-byte sector per
// 4-byte element). Grid (ceil(nx/32), ceil(nz/32), ny); any block shape works
// (the loops stride by blockDim), (32, 8) is the one launched.
#ifndef LEVERET_JOSEPH_PAD_Z
#error "LEVERET_JOSEPH_PAD_Z undefined: build with the -D constants of leveret/cuda/raytrace.py (KERNEL_CONSTANTS)"
#endif
#define JZ_PAD LEVERET_JOSEPH_PAD_Z   // structured Joseph's z border (raytrace_joseph.cu)
#include "raytrace_common.cuh"        // joseph_padded_nz

template <typename T, bool TO_ZFAST, int PXY, int PZ>
__device__ __forceinline__ void zfast_transpose(const T* __restrict__ src, T* __restrict__ dst, int nx, int ny,
                                                int nz, T (*tile)[33])
{
    const int j = blockIdx.z;
    const int i0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
    const long long pnx = nx + 2 * PXY, pnz = PZ ? joseph_padded_nz(nz, PZ) : nz;
    for (int d = threadIdx.y; d < 32; d += blockDim.y)
        for (int e = threadIdx.x; e < 32; e += blockDim.x) {
            // tile[d][e]: vol[k0 + d, j, i0 + e] (TO_ZFAST) or volT[j, i0 + d, k0 + e]
            if (TO_ZFAST) {
                if (k0 + d < nz && i0 + e < nx) tile[d][e] = src[((long long)(k0 + d) * ny + j) * nx + i0 + e];
            } else {
                if (i0 + d < nx && k0 + e < nz)
                    tile[d][e] = src[((j + PXY) * pnx + i0 + d + PXY) * pnz + k0 + e + PZ];
            }
        }
    __syncthreads();
    for (int d = threadIdx.y; d < 32; d += blockDim.y)
        for (int e = threadIdx.x; e < 32; e += blockDim.x) {
            if (TO_ZFAST) {   // volT[j, i0 + d, k0 + e] = vol[k0 + e, j, i0 + d] = tile[e][d]
                if (i0 + d < nx && k0 + e < nz) dst[((j + PXY) * pnx + i0 + d + PXY) * pnz + k0 + e + PZ] = tile[e][d];
            } else {          // vol[k0 + d, j, i0 + e] = volT[j, i0 + e, k0 + d] = tile[e][d]
                if (k0 + d < nz && i0 + e < nx) dst[((long long)(k0 + d) * ny + j) * nx + i0 + e] = tile[e][d];
            }
        }
}

#define ZFAST_KERNEL(NAME, T, TO, PXY, PZ)                                                               \
    extern "C" __global__ void NAME(const T* __restrict__ src, T* __restrict__ dst, int nx, int ny, int nz) \
    {                                                                                                    \
        __shared__ T tile[32][33];                                                                       \
        zfast_transpose<T, TO, PXY, PZ>(src, dst, nx, ny, nz, tile);                                     \
    }

ZFAST_KERNEL(to_zfast_f32, float, true, 0, 0)
ZFAST_KERNEL(from_zfast_f32, float, false, 0, 0)
ZFAST_KERNEL(to_zfast_f64, double, true, 0, 0)
ZFAST_KERNEL(from_zfast_f64, double, false, 0, 0)
ZFAST_KERNEL(to_zpad_f32, float, true, 1, JZ_PAD)
ZFAST_KERNEL(from_zpad_f32, float, false, 1, JZ_PAD)
