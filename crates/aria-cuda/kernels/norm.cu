// Row reductions over the last dimension: one thread block per row, `x` contiguous f32.

// RMSNorm: `x · rsqrt(mean(x²) + eps) · w` (`style` 0) or `· (1 + w)` (`style` 1, Gemma);
// `w` may be null (no gain).
extern "C" __global__ void rms_norm_f32(const float* x, const float* w, float* y, u64 d,
                                        float eps, int style) {
    __shared__ float scratch[32];
    const float* xr = x + (u64)blockIdx.x * d;
    float* yr = y + (u64)blockIdx.x * d;
    float ss = 0.0f;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, scratch);
    float inv = 1.0f / sqrtf(ss / (float)d + eps);
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) {
        float v = xr[i] * inv;
        if (w) v = style == 0 ? v * w[i] : v * (1.0f + w[i]);
        yr[i] = v;
    }
}

// LayerNorm with optional weight and bias (two passes: mean, then centred variance).
extern "C" __global__ void layer_norm_f32(const float* x, const float* w, const float* b,
                                          float* y, u64 d, float eps) {
    __shared__ float scratch[32];
    const float* xr = x + (u64)blockIdx.x * d;
    float* yr = y + (u64)blockIdx.x * d;
    float s = 0.0f;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
    float mean = block_sum(s, scratch) / (float)d;
    float v = 0.0f;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) {
        float c = xr[i] - mean;
        v += c * c;
    }
    float inv = 1.0f / sqrtf(block_sum(v, scratch) / (float)d + eps);
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) {
        float o = (xr[i] - mean) * inv;
        if (w) o *= w[i];
        if (b) o += b[i];
        yr[i] = o;
    }
}

// Dynamic tanh `γ ⊙ tanh(α·x) + β` over rows of `d` (elementwise; rows only index γ, β).
extern "C" __global__ void dyt_f32(const float* x, const float* gamma, const float* beta,
                                   float* y, u64 n, u64 d, float alpha) {
    ARIA_FOR(i, n) {
        u64 c = i % d;
        y[i] = gamma[c] * tanhf(alpha * x[i]) + beta[c];
    }
}

// Softmax over the last dimension, max subtracted.
extern "C" __global__ void softmax_f32(const float* x, float* y, u64 d) {
    __shared__ float scratch[32];
    const float* xr = x + (u64)blockIdx.x * d;
    float* yr = y + (u64)blockIdx.x * d;
    float m = ARIA_NEG_INF;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_max(m, scratch);
    float s = 0.0f;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) {
        float e = expf(xr[i] - m);
        yr[i] = e;
        s += e;
    }
    float inv = 1.0f / block_sum(s, scratch);
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) yr[i] *= inv;
}

// Unbiased standard deviation over the last dimension: one value per row.
extern "C" __global__ void std_last_f32(const float* x, float* y, u64 d) {
    __shared__ float scratch[32];
    const float* xr = x + (u64)blockIdx.x * d;
    float s = 0.0f;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
    float mean = block_sum(s, scratch) / (float)d;
    float v = 0.0f;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) {
        float c = xr[i] - mean;
        v += c * c;
    }
    v = block_sum(v, scratch);
    if (threadIdx.x == 0) y[blockIdx.x] = sqrtf(v / ((float)d - 1.0f));
}
