// Structured cone-beam Siddon (Thompson and Lionheart (2014)): one block per
// (view, detector column), one thread per detector row. The block builds the
// sorted xy crossing parameters of its column once, in parallel (the x-face
// and y-face crossings are two sorted lists; each element finds its place in
// the merged list by binary search in the other list), then each thread
// follows one detector row along that path. When no xy step is longer than
// one voxel in z (raytrace.py's structured_ratio checks this over the whole
// geometry) each xy step touches at most two z voxels, so the inner loop has
// no data-dependent branches. The kernels read and write a z-fastest copy of
// the volume, (ny, nx, nz) (raytrace_layout.cu), so adjacent threads (rows)
// touch adjacent z voxels. The transpose is ray-driven with atomicAdd. The
// float32 kernels (precision="float32") march in float32 (structured_fast,
// error bound below) and run in view groups (grouped_block); their transpose
// is launched z slab by z slab (row_slab), so that the blocks running at
// once add into a part of the volume that stays in L2.
#include "raytrace_common.cuh"

// Block: one (view, column); threads: detector rows.
// Dynamic shared memory: X (nx+1) and Y (ny+1) crossing parameters, the merged list
// B (nx+ny+2) as float64, and the xy voxel (j * nx + i) of each of the nx+ny+1 segments.
//
// Along the column's xy line, tau is the horizontal (xy) world length from the
// source; x_idx(tau) = px + tau * ax, y_idx(tau) = py + tau * ay. For row r the
// z index is z_idx(tau) = pz + tau * mz_r and the 3D length per unit tau is L_r.

// Number of elements of the ascending list a[0..n) that are < x (STRICT) or <= x.
template <bool STRICT>
__device__ __forceinline__ int rank_in(const double* a, int n, double x)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        const bool before = STRICT ? (a[mid] < x) : (a[mid] <= x);
        if (before) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// tau of the line's crossing with face F (0..n) of one axis, clamped to [t_in, t_out].
__device__ __forceinline__ double face_tau(int F, double p, double a, double t_in, double t_out)
{
    const double t = a == 0.0 ? (((double)F <= p) ? t_in : t_out) : __ddiv_rn(sub((double)F, p), a);
    return fmin(fmax(t, t_in), t_out);
}

// The xy cell of the segment [ta, tb] (by its midpoint), clamped into the grid.
__device__ __forceinline__ int segment_cell(const ColumnLine& c, double ta, double tb, int nx, int ny)
{
    const double mid = mul(0.5, add(ta, tb));
    const int i = min(max((int)floor(add(c.px, mul(mid, c.ax))), 0), nx - 1);
    const int j = min(max((int)floor(add(c.py, mul(mid, c.ay))), 0), ny - 1);
    return j * nx + i;
}

// The (at most) two z voxels of xy segment [B0, B1] for one row and their
// lengths: l1 in kz, l2 in kz2 (with |dz| per xy step below one
// voxel, no third voxel; zero lengths outside the grid, indices clamped).
__device__ __forceinline__ void z_split(const RowLine& r, double pz, double B0, double B1, int nz,
                                        int& kz, int& kz2, double& l1, double& l2)
{
    const double ta = fmax(B0, r.zlo);
    const double tb = fmax(fmin(B1, r.zhi), ta);
    const double za = add(pz, mul(ta, r.mz));
    int k = r.mz >= 0.0 ? (int)floor(za) : (int)ceil(za) - 1;
    k = min(max(k, 0), nz - 1);
    // The z face this step may cross, clamped into the step.
    const double tf = r.mz == 0.0 ? d_inf() : mul(sub((double)(k + (r.step > 0)), pz), r.inv_mz);
    const double tm = fmin(fmax(tf, ta), tb);
    l1 = mul(sub(tm, ta), r.L);
    l2 = mul(sub(tb, tm), r.L);
    kz = k;
    kz2 = min(max(k + r.step, 0), nz - 1);
}

// The row's tau range restricted to the z slab [z0, z1) of the grid: row_line's
// formulas with the slab's faces (the same numbers for [0, nz)), so the
// segment a slab face cuts is split at the same tau in both slabs.
__device__ __forceinline__ void row_slab(RowLine& r, double pz, int z0, int z1)
{
    const double lo = sub((double)z0, pz), hi = sub((double)z1, pz);
    if (r.mz > 0.0) { r.zlo = mul(lo, r.inv_mz); r.zhi = mul(hi, r.inv_mz); }
    else if (r.mz < 0.0) { r.zlo = mul(hi, r.inv_mz); r.zhi = mul(lo, r.inv_mz); }
    else if (!((double)z0 <= pz && pz < (double)z1)) { r.zlo = d_inf(); r.zhi = -d_inf(); }
}

// Ray-driven structured kernel (forward, or transpose with atomics).
// A block's xy path of its column (all threads): the x- and y-face crossings
// X (nx + 1) and Y (ny + 1) clamped to [t_in, t_out] in ascending order
// (faces walked backwards when the ray runs towards lower indices), merged
// stably into B (X before equal Y; nx + ny + 2 entries), and the xy cell of
// each of the nx + ny + 1 segments. Ends without a barrier after cell[].
__device__ __forceinline__ void column_segments(const ColumnLine& c, int nx, int ny, double* X, double* Y, double* B,
                                                int* cell)
{
    for (int f = threadIdx.x; f <= nx; f += blockDim.x)
        X[f] = face_tau(c.ax >= 0.0 ? f : nx - f, c.px, c.ax, c.t_in, c.t_out);
    for (int f = threadIdx.x; f <= ny; f += blockDim.x)
        Y[f] = face_tau(c.ay >= 0.0 ? f : ny - f, c.py, c.ay, c.t_in, c.t_out);
    __syncthreads();
    for (int f = threadIdx.x; f <= nx; f += blockDim.x) B[f + rank_in<true>(Y, ny + 1, X[f])] = X[f];
    for (int f = threadIdx.x; f <= ny; f += blockDim.x) B[f + rank_in<false>(X, nx + 1, Y[f])] = Y[f];
    __syncthreads();
    for (int k = threadIdx.x; k < nx + ny + 1; k += blockDim.x) cell[k] = segment_cell(c, B[k], B[k + 1], nx, ny);
}

template <typename T, bool ADJ>
__device__ void structured(T* volT, T* proj, int nx, int ny, int nz, const double* __restrict__ params,
                           const double* __restrict__ g, int n_rows, int n_cols)
{
    extern __shared__ double smem[];
    double* X = smem;                 // nx + 1
    double* Y = X + (nx + 1);         // ny + 1
    double* B = Y + (ny + 1);         // nx + ny + 2
    int* cell = (int*)(B + (nx + ny + 2));  // nx + ny + 1
    const int col = blockIdx.x, view = blockIdx.y;
    const double* par = params + 12 * view;
    const double u = (double)col;
    const ColumnLine c = column_line(par, g, u, nx, ny);
    const long long out0 = (long long)view * n_rows * n_cols + col;
    if (!c.hit) {   // uniform over the block
        if (!ADJ)
            for (int row = threadIdx.x; row < n_rows; row += blockDim.x) proj[out0 + (long long)row * n_cols] = (T)0;
        return;
    }
    column_segments(c, nx, ny, X, Y, B, cell);
    const int n_seg = nx + ny + 1;
    __syncthreads();
    for (int row = threadIdx.x; row < n_rows; row += blockDim.x) {
        const RowLine r = row_line(c, par, g, u, (double)row, nz);
        const double value = ADJ ? (double)proj[out0 + (long long)row * n_cols] : 0.0;
        double acc = 0.0;
        if (!ADJ || value != 0.0) {
            // Only the segments that overlap this row's part of the ray inside
            // the grid, (max(t_in, zlo), min(t_out, zhi)); the others have
            // zero weight (ta == tb in z_split), so skipping them changes
            // nothing. B is sorted: two binary searches give the range.
            // Adjacent rows get nearly the same range: the warp stays together.
            const int k0 = max(rank_in<false>(B, n_seg + 1, fmax(B[0], r.zlo)) - 1, 0);
            const int k1 = rank_in<true>(B, n_seg + 1, fmin(B[n_seg], r.zhi));
            for (int k = k0; k < k1; ++k) {
                int kz, kz2;
                double l1, l2;
                z_split(r, c.pz, B[k], B[k + 1], nz, kz, kz2, l1, l2);
                const long long base = (long long)cell[k] * nz;
                if (ADJ) {
                    if (l1 > 0.0) atomicAdd(volT + base + kz, (T)(l1 * value));
                    if (l2 > 0.0) atomicAdd(volT + base + kz2, (T)(l2 * value));
                } else {
                    acc += l1 * (double)volT[base + kz] + l2 * (double)volT[base + kz2];
                }
            }
        }
        if (!ADJ) proj[out0 + (long long)row * n_cols] = (T)acc;
    }
}

// Float32 traversal of the structured path (precision="float32"). Everything
// per block (the column's xy line, the face crossings, their merge and the
// cells) and per row (slope, length factor, z range, found by the same float64
// code as above) is float64; only the per-segment march is float32, in
// coordinates relative to the midpoint t_m of the column's chord through the
// grid's xy box [t_in, t_out] (tau) and to its entry point (z):
//   tau' = tau - t_m in [-T/2, T/2]   (T = t_out - t_in, world length),
//   z index = zi0 + z',  zi0 = the integer nearest to z at t_in,
//   z' = z0f + (tau' - t0') mz with t0' = t_in - t_m (rounded once)
//   (z0f in [-1/2, 1/2] is rounded relative to its own size, and z at t_in is
//   the float64 z_split's own first value, so a row that runs along a z face
//   stays on the side where the float64 march puts it).
// Rounding error (u = 2^-24), per row:
//   - every merged crossing B'[k] is within u T / 4 of its float64 value;
//   - z' is within u (1/2 + 2 T |mz|) of the float64 z (a vertical shift of
//     the row's ray by that much: z0f, t0' and mz rounded once each);
//   - a z face crossing tau' = (face - zi0 - z0f) / mz is within 1.5 u T of
//     the crossing of that shifted ray (two roundings and the rounded 1 / mz);
//   - lengths (tb - ta) L: the subtraction of nearby floats is exact, times L
//     one rounding.
// So the float32 weights are the exact weights of a ray displaced by at most
// eps_z = u (1/2 + 2 T |mz|) z voxels, with every boundary moved by at most
// eps_t = 2 u T along tau: each boundary moves at most eps_t L of length
// between its two voxels, and |p32 - p64| <= 2 eps_t L N_b max|f| + (vertical
// shift) + 16 u |p| (float32 partial sums of 16 segments, then float64), with
// N_b <= nx + ny + nz + 2 boundaries. The vertical shift matters only for a
// near-horizontal row whose ray runs within eps_z of a z face (as the float64
// path's own rounding does at 2^-53); tests/cuda/test_raytrace_host.py checks
// the bound on the host build and tests/cuda/test_raytrace_gpu.py on
// the GPU.
struct RowLineF {
    float mz, inv_mz, L, zlo, zhi, z0, t0;
    int zi0, step;
    bool flat;   // mz == 0: no z face crossing
};

// The origin of the float32 march: the midpoint of the column's chord.
__device__ __forceinline__ double march_origin(const ColumnLine& c) { return mul(0.5, add(c.t_in, c.t_out)); }

__device__ __forceinline__ RowLineF row_line_f(const ColumnLine& c, const RowLine& r)
{
    RowLineF f;
    const double t_m = march_origin(c);
    f.mz = (float)r.mz;
    f.inv_mz = (float)r.inv_mz;
    f.L = (float)r.L;
    f.zlo = (float)sub(r.zlo, t_m);   // +-inf stay infinite
    f.zhi = (float)sub(r.zhi, t_m);
    // z is measured from the entry t_in (as the float64 z_split's first
    // segment computes it), tau from the midpoint t_m.
    f.t0 = (float)sub(c.t_in, t_m);
    const double z_in = fmin(fmax(add(c.pz, mul(c.t_in, r.mz)), -1.0e9), 1.0e9);
    // The nearest integer, not the floor: z0f in [-1/2, 1/2] keeps its
    // relative precision near a z face (a row running along a face stays on
    // its side; a fraction just below 1 would round up to the face itself).
    const double zi = rint(z_in);
    f.zi0 = (int)zi;
    f.z0 = (float)sub(z_in, zi);
    f.step = r.step;
    f.flat = r.mz == 0.0;
    return f;
}

// z_split in float32 (tau' and z' relative to the column entry, as above).
__device__ __forceinline__ void z_split_f(const RowLineF& r, float B0, float B1, int nz, int& kz, int& kz2,
                                          float& l1, float& l2)
{
    const float ta = fmaxf(B0, r.zlo);
    const float tb = fmaxf(fminf(B1, r.zhi), ta);
    const float za = r.z0 + (ta - r.t0) * r.mz;
    int k = r.step > 0 ? (int)floorf(za) : (int)ceilf(za) - 1;
    k = min(max(k + r.zi0, 0), nz - 1);
    float tm = tb;
    if (!r.flat) {
        const float tf = r.t0 + ((float)(k + (r.step > 0) - r.zi0) - r.z0) * r.inv_mz;
        tm = fminf(fmaxf(tf, ta), tb);
    }
    l1 = (tm - ta) * r.L;
    l2 = (tb - tm) * r.L;
    kz = k;
    kz2 = min(max(k + r.step, 0), nz - 1);
}

// The float32 transpose's rows of one (view, column), adding into the z slab
// [z0, z1). A warp's lanes step through the segments together, from the
// first segment any of its rows reaches in the slab to the last: lanes at one
// segment add into one xy cell at adjacent z, so a warp's atomics touch one or
// two cache lines instead of one per lane (rows that enter or leave the slab
// through a z face start and end at different segments). A segment outside a
// row's [zlo, zhi) gets zero lengths from z_split_f and adds nothing; so does
// a lane without a row (zlo = zhi = 0). Every warp of the block runs the loop
// over row blocks the same number of times (the warp-wide min and max).
__device__ __forceinline__ void structured_fast_transpose_rows(float* volT, const float* proj, const ColumnLine& c,
                                                               const double* par, const double* g, double u,
                                                               const double* B, const float* Bf, const int* cell,
                                                               int n_seg, long long out0, int nz, int n_rows,
                                                               int n_cols, int z0, int z1)
{
    for (int rb = 0; rb < n_rows; rb += blockDim.x) {
        const int row = rb + threadIdx.x;
        int k0 = 0, k1 = 0;
        float value = 0.0f;
        RowLineF rf = {};
        if (row < n_rows) {
            RowLine r = row_line(c, par, g, u, (double)row, nz);
            row_slab(r, c.pz, z0, z1);
            if (r.zlo < r.zhi) {   // else the row's ray misses the slab
                value = proj[out0 + (long long)row * n_cols];
                if (value != 0.0f) {
                    rf = row_line_f(c, r);
                    k0 = max(rank_in<false>(B, n_seg + 1, fmax(B[0], r.zlo)) - 1, 0);
                    k1 = rank_in<true>(B, n_seg + 1, fmin(B[n_seg], r.zhi));
                }
            }
        }
        const bool any = k1 > k0;
        const int lo = __reduce_min_sync(0xffffffffu, any ? k0 : 0x7fffffff);
        const int hi = __reduce_max_sync(0xffffffffu, any ? k1 : -1);
        for (int k = lo; k < hi; ++k) {
            int kz, kz2;
            float l1, l2;
            z_split_f(rf, Bf[k], Bf[k + 1], nz, kz, kz2, l1, l2);
            const long long base = (long long)cell[k] * nz;
            if (l1 > 0.0f) atomicAdd(volT + base + kz, l1 * value);
            if (l2 > 0.0f) atomicAdd(volT + base + kz2, l2 * value);
        }
    }
}

// The float32 forward's rows of one (view, column): each lane marches its own row.
__device__ __forceinline__ void structured_fast_forward_rows(const float* volT, float* proj, const ColumnLine& c,
                                                             const double* par, const double* g, double u,
                                                             const double* B, const float* Bf, const int* cell,
                                                             int n_seg, long long out0, int nz, int n_rows,
                                                             int n_cols)
{
    for (int row = threadIdx.x; row < n_rows; row += blockDim.x) {
        const RowLine r = row_line(c, par, g, u, (double)row, nz);
        double acc = 0.0;
        const RowLineF rf = row_line_f(c, r);
        const int k0 = max(rank_in<false>(B, n_seg + 1, fmax(B[0], r.zlo)) - 1, 0);
        const int k1 = rank_in<true>(B, n_seg + 1, fmin(B[n_seg], r.zhi));
        float part = 0.0f;   // float32 partial sums of 8 segments, then float64
        // Software-pipelined like structured_joseph's forward: the next 8
        // segments' 16 loads in flight while the current 8 are summed.
        const float* const vz = volT;
        auto load8 = [&](int k8, float (&L)[4][8]) {
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                int kz, kz2;
                z_split_f(rf, Bf[k8 + q], Bf[k8 + q + 1], nz, kz, kz2, L[2][q], L[3][q]);
                const float* const base = vz + (long long)cell[k8 + q] * nz;
                L[0][q] = base[kz];
                L[1][q] = base[kz2];
            }
        };
        auto sum8 = [&](const float (&L)[4][8]) {
#pragma unroll
            for (int q = 0; q < 8; ++q) part += L[2][q] * L[0][q] + L[3][q] * L[1][q];
            acc += (double)part;
            part = 0.0f;
        };
        int k = k0;
        const int k_full = k0 + ((k1 - k0) & ~7);
        if (k_full > k0) {
            float SA[4][8], SB[4][8];
            load8(k, SA);
            while (true) {
                load8(k + 8 < k_full ? k + 8 : k, SB);
                sum8(SA);
                k += 8;
                if (k >= k_full) break;
                load8(k + 8 < k_full ? k + 8 : k, SA);
                sum8(SB);
                k += 8;
                if (k >= k_full) break;
            }
        }
        for (; k < k1; ++k) {
            int kz, kz2;
            float l1, l2;
            z_split_f(rf, Bf[k], Bf[k + 1], nz, kz, kz2, l1, l2);
            const long long base = (long long)cell[k] * nz;
            part += l1 * volT[base + kz] + l2 * volT[base + kz2];
        }
        acc += (double)part;
        proj[out0 + (long long)row * n_cols] = (float)acc;
    }
}

// Ray-driven structured kernel, float32 volume and projections, float32 march.
// The transpose adds into the z slab [z0, z1) only
// (structured_fast_transpose_rows); the forward reads all of z.
template <bool ADJ>
__device__ void structured_fast(float* volT, float* proj, int nx, int ny, int nz, const double* __restrict__ params,
                                const double* __restrict__ g, int n_views, int n_rows, int n_cols, int view_group,
                                int z0, int z1)
{
    extern __shared__ double smem[];
    double* X = smem;                 // nx + 1
    double* Y = X + (nx + 1);         // ny + 1
    double* B = Y + (ny + 1);         // nx + ny + 2
    int* cell = (int*)(B + (nx + ny + 2));  // nx + ny + 1
    float* Bf = (float*)(cell + (nx + ny + 1));  // nx + ny + 2: B - t_m in float32
    int col, view;
    if (!grouped_block(view_group, n_views, col, view)) return;
    const double* par = params + 12 * view;
    const double u = (double)col;
    const ColumnLine c = column_line(par, g, u, nx, ny);
    const long long out0 = (long long)view * n_rows * n_cols + col;
    if (!c.hit) {   // uniform over the block
        if (!ADJ)
            for (int row = threadIdx.x; row < n_rows; row += blockDim.x) proj[out0 + (long long)row * n_cols] = 0.0f;
        return;
    }
    column_segments(c, nx, ny, X, Y, B, cell);
    const int n_seg = nx + ny + 1;
    const double t_m = march_origin(c);
    for (int k = threadIdx.x; k <= n_seg; k += blockDim.x) Bf[k] = (float)sub(B[k], t_m);
    __syncthreads();
    if constexpr (ADJ)
        structured_fast_transpose_rows(volT, proj, c, par, g, u, B, Bf, cell, n_seg, out0, nz, n_rows, n_cols, z0, z1);
    else
        structured_fast_forward_rows(volT, proj, c, par, g, u, B, Bf, cell, n_seg, out0, nz, n_rows, n_cols);
}

extern "C" __global__ void structured_siddon_forward_fast(float* volT, float* proj, int nx, int ny, int nz,
                                                          const double* __restrict__ params,
                                                          const double* __restrict__ g, int n_views, int n_rows,
                                                          int n_cols, int view_group)
{
    structured_fast<false>(volT, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, view_group, 0, nz);
}

extern "C" __global__ void structured_siddon_adjoint_fast(float* volT, float* proj, int nx, int ny, int nz,
                                                          const double* __restrict__ params,
                                                          const double* __restrict__ g, int n_views, int n_rows,
                                                          int n_cols, int view_group, int z0, int z1)
{
    structured_fast<true>(volT, proj, nx, ny, nz, params, g, n_views, n_rows, n_cols, view_group, z0, z1);
}

#define STRUCTURED_KERNEL(NAME, T, ADJ)                                                                 \
    extern "C" __global__ void NAME(T* volT, T* proj, int nx, int ny, int nz,                           \
                                    const double* __restrict__ params, const double* __restrict__ g,     \
                                    int n_rows, int n_cols)                                             \
    {                                                                                                   \
        structured<T, ADJ>(volT, proj, nx, ny, nz, params, g, n_rows, n_cols);                          \
    }

STRUCTURED_KERNEL(structured_siddon_forward_f32, float, false)
STRUCTURED_KERNEL(structured_siddon_adjoint_f32, float, true)
STRUCTURED_KERNEL(structured_siddon_forward_f64, double, false)
STRUCTURED_KERNEL(structured_siddon_adjoint_f64, double, true)
