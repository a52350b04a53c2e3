// FDK's per-pixel pre-weighting fused with the zero padding the ramp filter's
// FFT needs: one pass reads the raw views and writes FFT rows of n_pad floats,
// instead of five (cosine weights built, applied, column weights, padding copy).
//
//   out[row, c] = raw[row, c] * cos(ray, central ray) * per_column[view, c]   for c < n_cols
//   out[row, c] = 0                                                           for n_cols <= c < n_pad
// with row = view * n_rows + r and cos = 1 / sqrt(1 + tu^2 + tv^2),
// tu = (c - u0) / focal_u, tv = (row0 + r - v0) / focal_v (pixels): the raw
// rows are the detector's rows row0 .. row0 + n_rows - 1, weighted exactly as
// in a call with every row (an integer offset, no rounding).
// Memory-bound: 4 bytes read and n_pad / n_cols x 4 bytes written per pixel.

extern "C" __global__ void __launch_bounds__(256)
fdk_weight_pad(const float* __restrict__ raw,          // (n_views * n_rows, n_cols)
               float* __restrict__ out,                // (n_views * n_rows, n_pad)
               const float* __restrict__ per_column,   // (n_views, n_cols)
               const float4* __restrict__ frames,      // (n_views): u0, v0, 1 / focal_u, 1 / focal_v
               int n_rows, int n_cols, int n_pad, int n_total_rows, int row0)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_pad) return;
    for (int row = blockIdx.y; row < n_total_rows; row += gridDim.y) {
        float value = 0.0f;
        if (c < n_cols) {
            const int view = row / n_rows, r = row - view * n_rows;
            const float4 f = frames[view];
            const float tu = ((float)c - f.x) * f.z, tv = ((float)(row0 + r) - f.y) * f.w;
            value = raw[(size_t)row * n_cols + c] * rsqrtf(1.0f + tu * tu + tv * tv)
                    * per_column[(size_t)view * n_cols + c];
        }
        out[(size_t)row * n_pad + c] = value;
    }
}
