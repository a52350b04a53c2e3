// 3D Radon transform (plane integrals, pulse EPR imaging): back-projection of
// filtered 1D projections with exact software linear interpolation, and the
// forward transform (its transpose) with shared-memory atomics; global-memory
// variants of both for windows and projections too large to stage (see below).
//
// Back-projection, generic form (one kernel serves the single-stage 3D
// back-projection and both stages of the two-stage one):
//
//     out[b, j, i] (+)= sum_q  interp(P_b[q, :], u),   u = i a_q + j b_q + (b + b_offset) c_q + d_q
//
// with P_b = proj + b * proj_bstride and the coefficient row (a, b, c, d) of
// direction q at table[(b * table_bstride + q) * 4] (float64). Samples sit at
// integers; samples outside [0, n_samples) are zero. Single stage: b is z
// (b_offset: the first z index of the slab being computed), both strides 0. Two-stage: stage 1 has b = phi index, stage 2 b = z; there
// the projections (and in stage 1 the table) differ per b, so one b per block
// (ZPT = 1).
//
// Layout: a block is 32 x 8 threads, thread (tx, ty) owns voxel column
// (i0 + tx, j0 + ty) and ZPT consecutive b (z) values from b0, keeping ZPT sums
// in registers. Directions come in batches of DB: for each direction of the
// batch the block stages only the window of samples its tile can reach (W
// samples, starting at w0_q = floor(min over the tile of u) - 1, with W set
// by the host to ceil(max extent) + 4), as pairs (p[s], p[s+1] - p[s]), so one
// 64-bit shared load and one FMA interpolate. The tile-origin coordinate is
// computed in float64 and handed to the threads relative to w0_q (d_loc in
// [1, ~2]), so the float32 coordinate u in [1, W - 2] carries an absolute
// error of a few 1e-6 samples whatever the volume size.
//
// Per voxel update: 1 FFMA (u = u0 + z c), 1 FADD (magic-number floor,
// t = u + 2^23 - 1/2), 1 FADD (fl = t - 2^23, exact), 1 FADD (f = u - fl),
// 1 LEA (shared address = window base + 8 x the bits of t: the magic
// number's offset is folded into the base), 1 LDS.64, 1 FFMA (v0 + f dv),
// 1 FADD (accumulate); plus 2 FFMA per direction per thread for u0 (amortised
// over ZPT = 4). A warp's LDS.64 of <= 32 consecutive pairs (|a| <= 1:
// neighbouring i land on neighbouring or equal samples) has no bank
// conflicts, so the kernel is bound by shared-memory bandwidth; float64 moves
// twice the shared bytes per update. Speeds: docs/performance.md.
//
// The float32 floor uses the magic number 2^23 because FRND/F2I run at a
// quarter of the FP32 rate; it needs u >= 1/2, which the window's one-sample
// margin guarantees (u >= 1 - 1e-5). At exact integers it may round down
// rather than up (ties to even): f is then 1 instead of 0, the same value,
// since the pair at fl holds p[fl] + 1 * (p[fl + 1] - p[fl]).

// RADON_BX x RADON_BY threads per block: the launcher's BLOCK, passed as -D
// options (leveret.cuda.radon3d.DEFINES), also by the host harness.
#if !defined(RADON_BX) || !defined(RADON_BY)
#error "radon3d.cu: compile with the launcher's DEFINES (leveret.cuda.radon3d.DEFINES)"
#endif

// The shared-memory kernel uses inline PTX (shared loads by 32-bit address), so
// the host build of tests/cuda/radon3d_host_harness.cpp leaves it out; the
// NumPy mirror in tests/algorithms/test_radon3d_kernel_mirror.py checks it.
#ifndef LEVERET_RADON3D_HOST
template <typename T> struct Vec2;
template <> struct Vec2<float> { typedef float2 type; };
template <> struct Vec2<double> { typedef double2 type; };

template <typename T> struct Coef { T a, b, c, d; };

// Linear interpolation in a staged window of pairs (p[s], p[s+1] - p[s]) at
// window coordinate u >= 1/2. `base` is the window's 32-bit shared-memory
// address, adjusted below so that the float32 path adds the bits of
// t = u + 2^23 - 1/2 times 8 straight to it: one integer multiply-add per
// update instead of 64-bit address arithmetic (the address is taken modulo
// 2^32, which cancels the adjustment). "memory" keeps the loads after the
// barrier that publishes the window.
__device__ __forceinline__ unsigned window_base(const float2* win)
{
    return (unsigned)__cvta_generic_to_shared(win) - (0x4B000000u << 3);
}

__device__ __forceinline__ unsigned window_base(const double2* win)
{
    return (unsigned)__cvta_generic_to_shared(win);
}

__device__ __forceinline__ float interp(unsigned base, float u)
{
    const float t = __fadd_rn(u, 8388607.5f);             // rint(u - 1/2) + 2^23
    const float f = __fsub_rn(u, __fsub_rn(t, 8388608.0f)); // both exact: f in [0, 1]
    const unsigned addr = base + ((unsigned)__float_as_int(t) << 3);
    float v0, dv;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v0), "=f"(dv) : "r"(addr) : "memory");
    return fmaf(f, dv, v0);
}

__device__ __forceinline__ double interp(unsigned base, double u)
{
    const double fl = floor(u);
    const double f = u - fl;
    const unsigned addr = base + ((unsigned)(int)fl << 4);
    double v0, dv;
    asm volatile("ld.shared.v2.f64 {%0, %1}, [%2];" : "=d"(v0), "=d"(dv) : "r"(addr) : "memory");
    return fma(f, dv, v0);
}

template <typename T, int ZPT>
__device__ __forceinline__ void backproject_impl(
    const T* __restrict__ proj, long long proj_bstride, const double* __restrict__ table,
    int table_bstride, T* __restrict__ out, int nx, int ny, int nb, int n_dirs, int n_samples,
    int W, int DB, int b_offset, int accumulate)
{
    typedef typename Vec2<T>::type T2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Coef<T>* s_coef = reinterpret_cast<Coef<T>*>(smem_raw);           // DB
    int* s_w0 = reinterpret_cast<int*>(s_coef + DB);                  // DB (padded to 16 B)
    T2* s_pair = reinterpret_cast<T2*>(smem_raw + DB * sizeof(Coef<T>) + ((DB * 4 + 15) / 16) * 16);

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * RADON_BX + tx;
    const int nthreads = RADON_BX * RADON_BY;
    const int i0 = blockIdx.x * RADON_BX, j0 = blockIdx.y * RADON_BY, b0 = blockIdx.z * ZPT;
    const T* P = proj + (long long)b0 * proj_bstride;
    const double* tab = table + (long long)b0 * table_bstride * 4;

    T acc[ZPT];
#pragma unroll
    for (int z = 0; z < ZPT; ++z) acc[z] = T(0);

    for (int q0 = 0; q0 < n_dirs; q0 += DB) {
        const int nq = min(DB, n_dirs - q0);
        __syncthreads();   // the previous batch's windows are no longer read
        for (int q = tid; q < nq; q += nthreads) {
            const double* row = tab + (long long)(q0 + q) * 4;
            const double a = row[0], b = row[1], c = row[2], d = row[3];
            // Tile origin in float64, then the window start one sample below the tile's minimum.
            const double base = (double)i0 * a + (double)j0 * b + (double)(b0 + b_offset) * c + d;
            const double umin = base + fmin(a, 0.0) * (RADON_BX - 1) + fmin(b, 0.0) * (RADON_BY - 1)
                                + fmin(c, 0.0) * (ZPT - 1);
            const int w0 = (int)floor(umin) - 1;
            s_w0[q] = w0;
            Coef<T> cf;
            cf.a = (T)a; cf.b = (T)b; cf.c = (T)c; cf.d = (T)(base - (double)w0);
            s_coef[q] = cf;
        }
        __syncthreads();
        for (int idx = tid; idx < nq * W; idx += nthreads) {
            const int q = idx / W;
            const int s = s_w0[q] + (idx - q * W);
            const T* p = P + (long long)(q0 + q) * n_samples;
            const T v0 = (s >= 0 && s < n_samples) ? p[s] : T(0);
            const T v1 = (s + 1 >= 0 && s + 1 < n_samples) ? p[s + 1] : T(0);
            T2 pr; pr.x = v0; pr.y = v1 - v0;
            s_pair[idx] = pr;
        }
        __syncthreads();
        const T ftx = (T)tx, fty = (T)ty;
        // A partial sum per batch, added to the total afterwards: the terms are
        // large and cancel to O(1), and one running float32 sum over thousands
        // of directions would lose ~1e-5 of the result (blocked: ~3e-7).
        T part[ZPT];
#pragma unroll
        for (int z = 0; z < ZPT; ++z) part[z] = T(0);
        for (int q = 0; q < nq; ++q) {
            const Coef<T> cf = s_coef[q];
            const unsigned base = window_base(s_pair + q * W);
            const T u0 = fma(ftx, cf.a, fma(fty, cf.b, cf.d));
#pragma unroll
            for (int z = 0; z < ZPT; ++z)
                part[z] += interp(base, fma((T)z, cf.c, u0));
        }
#pragma unroll
        for (int z = 0; z < ZPT; ++z) acc[z] += part[z];
    }

    const int i = i0 + tx, j = j0 + ty;
    if (i < nx && j < ny) {
#pragma unroll
        for (int z = 0; z < ZPT; ++z) {
            const int b = b0 + z;
            if (b < nb) {
                T* o = out + ((long long)b * ny + j) * nx + i;
                *o = accumulate ? *o + acc[z] : acc[z];
            }
        }
    }
}

#define RADON_BP(NAME, T, ZPT)                                                                   \
    extern "C" __global__ void __launch_bounds__(RADON_BX * RADON_BY) NAME(                       \
        const T* __restrict__ proj, long long proj_bstride, const double* __restrict__ table,    \
        int table_bstride, T* __restrict__ out, int nx, int ny, int nb, int n_dirs,               \
        int n_samples, int W, int DB, int b_offset, int accumulate)                               \
    {                                                                                             \
        backproject_impl<T, ZPT>(proj, proj_bstride, table, table_bstride, out, nx, ny, nb,       \
                                 n_dirs, n_samples, W, DB, b_offset, accumulate);                 \
    }

RADON_BP(radon3d_bp_f32_z4, float, 4)
RADON_BP(radon3d_bp_f32_z1, float, 1)
RADON_BP(radon3d_bp_f64_z4, double, 4)
RADON_BP(radon3d_bp_f64_z1, double, 1)

#endif  // LEVERET_RADON3D_HOST

// Global-memory back-projection: the fallback when a tile's window cannot be
// staged (it does not fit the shared-memory budget, or, in float32, it is
// wider than the launcher's MAX_WINDOW_F32 samples: the float32 window
// coordinate's rounding grows with W, and the NumPy mirror measured 1.7e-6 of
// the result at W = 36, 5.4e-6 at 132, 1.0e-5 at 259).
// It happens when voxels are several times coarser than the sample pitch.
// Each thread computes its coordinates in float64 with the CPU kernel's
// roundings and order (u = ((j b + k c) + d) + i a, the _rn intrinsics keep the
// compiler from contracting them into FMAs), so u, the sample index and the
// weight are the CPU's bit for bit, and reads its two samples
// straight from global memory (neighbouring i read neighbouring or equal
// samples, so the loads of a warp coalesce and hit L1); only the
// interpolation itself runs in T. Partial sums per batch of RADON_GLOBAL_BATCH
// directions, as the shared kernel's batches. No barriers, so threads outside
// the volume return at once.
#define RADON_GLOBAL_BATCH 64

template <typename T, int ZPT>
__device__ __forceinline__ void backproject_global_impl(
    const T* __restrict__ proj, long long proj_bstride, const double* __restrict__ table,
    int table_bstride, T* __restrict__ out, int nx, int ny, int nb, int n_dirs, int n_samples,
    int b_offset, int accumulate)
{
    const int i = blockIdx.x * RADON_BX + threadIdx.x;
    const int j = blockIdx.y * RADON_BY + threadIdx.y;
    const int b0 = blockIdx.z * ZPT;
    if (i >= nx || j >= ny) return;
    const T* P = proj + (long long)b0 * proj_bstride;
    const double* tab = table + (long long)b0 * table_bstride * 4;
    const double di = (double)i, dj = (double)j;

    T acc[ZPT];
#pragma unroll
    for (int z = 0; z < ZPT; ++z) acc[z] = T(0);
    for (int q0 = 0; q0 < n_dirs; q0 += RADON_GLOBAL_BATCH) {
        const int q1 = min(n_dirs, q0 + RADON_GLOBAL_BATCH);
        T part[ZPT];
#pragma unroll
        for (int z = 0; z < ZPT; ++z) part[z] = T(0);
        for (int q = q0; q < q1; ++q) {
            const double a = __ldg(tab + q * 4 + 0), b = __ldg(tab + q * 4 + 1);
            const double c = __ldg(tab + q * 4 + 2), d = __ldg(tab + q * 4 + 3);
            const T* p = P + (long long)q * n_samples;
#pragma unroll
            for (int z = 0; z < ZPT; ++z) {
                const double base = __dadd_rn(__dadd_rn(__dmul_rn(dj, b),
                                                        __dmul_rn((double)(b0 + z + b_offset), c)), d);
                const double u = __dadd_rn(base, __dmul_rn(di, a));
                const double fl = floor(u);
                // Samples fl and fl + 1; both outside [0, n_samples) gives 0. The
                // test in float64 keeps the int conversion in range for any u.
                if (fl >= -1.0 && fl < (double)n_samples) {
                    const int s = (int)fl;
                    const T f = (T)(u - fl);
                    const T v0 = (s >= 0) ? __ldg(p + s) : T(0);
                    const T v1 = (s + 1 < n_samples) ? __ldg(p + s + 1) : T(0);
                    part[z] += fma(f, v1 - v0, v0);
                }
            }
        }
#pragma unroll
        for (int z = 0; z < ZPT; ++z) acc[z] += part[z];
    }
#pragma unroll
    for (int z = 0; z < ZPT; ++z) {
        const int b = b0 + z;
        if (b < nb) {
            T* o = out + ((long long)b * ny + j) * nx + i;
            *o = accumulate ? *o + acc[z] : acc[z];
        }
    }
}

#define RADON_BP_GLOBAL(NAME, T, ZPT)                                                            \
    extern "C" __global__ void __launch_bounds__(RADON_BX * RADON_BY) NAME(                       \
        const T* __restrict__ proj, long long proj_bstride, const double* __restrict__ table,    \
        int table_bstride, T* __restrict__ out, int nx, int ny, int nb, int n_dirs,               \
        int n_samples, int b_offset, int accumulate)                                              \
    {                                                                                             \
        backproject_global_impl<T, ZPT>(proj, proj_bstride, table, table_bstride, out, nx, ny,    \
                                        nb, n_dirs, n_samples, b_offset, accumulate);             \
    }

RADON_BP_GLOBAL(radon3d_bp_global_f32_z4, float, 4)
RADON_BP_GLOBAL(radon3d_bp_global_f32_z1, float, 1)
RADON_BP_GLOBAL(radon3d_bp_global_f64_z4, double, 4)
RADON_BP_GLOBAL(radon3d_bp_global_f64_z1, double, 1)

// Forward transform: one block per (direction, slab of k_per_block z slices).
// Each voxel splits its value between the two samples around
// u = (j a1 + k a2 + a3) + i a0 (float64, the CPU kernel's order) with linear
// weights, into a shared histogram of n_samples values (shared atomics), which
// is then added to out[q, :] (global atomics; out is zeroed by the caller).
// The summation order is not fixed, so float32 results agree with the CPU to
// rounding (~1e-6 relative), not bitwise. When the histogram does not fit in
// shared memory (more samples than the launcher's budget: 12288 float32,
// 6144 float64) the SHARED = false kernels add straight into out[q, :] with
// global atomics (the L2 performs them; long projections spread the voxels
// over many samples, so contention per address is lower there).
template <typename T, bool SHARED>
__device__ __forceinline__ void forward_impl(const T* __restrict__ vol, const double* __restrict__ table,
                                             T* __restrict__ out, int nx, int ny, int nz,
                                             int n_samples, int k_per_block)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int q = blockIdx.x;
    T* hist = SHARED ? reinterpret_cast<T*>(smem_raw) : out + (long long)q * n_samples;
    const int k0 = blockIdx.y * k_per_block;
    const int k1 = min(nz, k0 + k_per_block);
    const double a = table[q * 4 + 0], b = table[q * 4 + 1], c = table[q * 4 + 2], d = table[q * 4 + 3];
    if (SHARED) {
        for (int s = threadIdx.x; s < n_samples; s += blockDim.x) hist[s] = T(0);
        __syncthreads();
    }
    const long long n = (long long)(k1 - k0) * ny * nx;
    const T* v = vol + (long long)k0 * ny * nx;
    for (long long idx = threadIdx.x; idx < n; idx += blockDim.x) {
        const T x = v[idx];
        if (x == T(0)) continue;
        const int i = (int)(idx % nx);
        const long long r = idx / nx;
        const int j = (int)(r % ny);
        const int k = k0 + (int)(r / ny);
        // The CPU kernel's roundings, uncontracted (see the global back-projection).
        const double base = __dadd_rn(__dadd_rn(__dmul_rn((double)j, b), __dmul_rn((double)k, c)), d);
        const double u = __dadd_rn(base, __dmul_rn((double)i, a));
        const double fl = floor(u);
        if (!(fl >= -1.0 && fl < (double)n_samples)) continue;   // also keeps the int in range
        const int s = (int)fl;
        const double f = u - fl;
        if (s >= 0 && s < n_samples) atomicAdd(hist + s, (T)((1.0 - f) * (double)x));
        if (s + 1 >= 0 && s + 1 < n_samples) atomicAdd(hist + s + 1, (T)(f * (double)x));
    }
    if (SHARED) {
        __syncthreads();
        for (int s = threadIdx.x; s < n_samples; s += blockDim.x) {
            const T h = hist[s];
            if (h != T(0)) atomicAdd(out + (long long)q * n_samples + s, h);
        }
    }
}

#define RADON_FWD(NAME, T, SHARED)                                                               \
    extern "C" __global__ void NAME(const T* __restrict__ vol, const double* __restrict__ table,  \
                                    T* __restrict__ out, int nx, int ny, int nz, int n_samples,   \
                                    int k_per_block)                                              \
    {                                                                                             \
        forward_impl<T, SHARED>(vol, table, out, nx, ny, nz, n_samples, k_per_block);             \
    }

RADON_FWD(radon3d_fwd_f32, float, true)
RADON_FWD(radon3d_fwd_f64, double, true)
RADON_FWD(radon3d_fwd_global_f32, float, false)
RADON_FWD(radon3d_fwd_global_f64, double, false)
