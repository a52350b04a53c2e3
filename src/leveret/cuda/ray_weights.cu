// The pixel weights of Projector(adjoint="voxel"): each detector pixel's value
// times its ray's length factor, in one pass over the projections
//
//   out[view, r, c] = y[view, r, c] * scale[view] * |M^-1 (c, r, 1)|
//
// (M = P[:, :3] of the view; leveret.operators.Projector's class Notes derive
// it). The weight is computed per pixel in float64 from the view's ten numbers
// instead of stored: memory-bound, 4 bytes read and 4 written per pixel.

extern "C" __global__ void __launch_bounds__(256)
ray_length_weight(const float* __restrict__ y,         // (n_views * n_rows, n_cols)
                  float* __restrict__ out,             // (n_views * n_rows, n_cols)
                  const double* __restrict__ frames,   // (n_views, 10): M^-1 row-major, scale
                  int n_rows, int n_cols, long long n_total_rows)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_cols) return;
    for (long long row = blockIdx.y; row < n_total_rows; row += gridDim.y) {
        const long long view = row / n_rows;
        const double r = (double)(row - view * n_rows), u = (double)c;
        const double* f = frames + 10 * view;
        const double dx = f[0] * u + f[1] * r + f[2];
        const double dy = f[3] * u + f[4] * r + f[5];
        const double dz = f[6] * u + f[7] * r + f[8];
        const size_t i = (size_t)row * n_cols + c;
        out[i] = (float)((double)y[i] * f[9] * sqrt(dx * dx + dy * dy + dz * dz));
    }
}
