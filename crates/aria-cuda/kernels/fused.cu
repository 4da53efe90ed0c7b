// Fused row ops of the diffusion transformer (one pass per row, token-major `[B, N, E]`).

// RMSNorm with gain, then the adaLN modulation of batch item `row / n`:
// `y = x·rsqrt(mean(x²)+eps)·γ; y·(1 + scale[b]) + shift[b]` (`scale`, `shift` contiguous
// `[B, E]`, or null for no modulation). One block per row.
extern "C" __global__ void rms_norm_modulate_f32(const float* x, const float* gamma,
                                                 const float* scale, const float* shift,
                                                 float* y, u64 n, u64 e, float eps) {
    __shared__ float scratch[32];
    u64 row = blockIdx.x;
    const float* xr = x + row * e;
    float* yr = y + row * e;
    float ss = 0.0f;
    for (u64 i = threadIdx.x; i < e; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, scratch);
    float inv = 1.0f / sqrtf(ss / (float)e + eps);
    u64 b = row / n;
    for (u64 i = threadIdx.x; i < e; i += blockDim.x) {
        float v = xr[i] * inv * gamma[i];
        if (scale) v = v * (1.0f + scale[b * e + i]) + shift[b * e + i];
        yr[i] = v;
    }
}

// `y = h`, then `y[b, p] += u[b, p − (N − Nu)] ⊙ gate[b]` on the last `Nu` tokens of each item,
// rows with `row_mask[b, p] == 0` kept (`gate`, `row_mask` may be null).
extern "C" __global__ void gated_residual_add_f32(const float* h, const float* u,
                                                  const float* gate, const float* row_mask,
                                                  float* y, u64 b, u64 n, u64 nu, u64 e) {
    ARIA_FOR(i, b * n * e) {
        u64 row = i / e, c = i % e;
        u64 bi = row / n, p = row % n, skip = n - nu;
        float v = h[i];
        if (p >= skip && !(row_mask && row_mask[row] == 0.0f)) {
            float uv = u[(bi * nu + p - skip) * e + c];
            v += gate ? uv * gate[bi * e + c] : uv;
        }
        y[i] = v;
    }
}

// Rotate-half RoPE on the first `r` dims of one head vector held in shared memory.
__device__ __forceinline__ void rope_vec(float* v, const float* cr, const float* sr, u64 r) {
    u64 half = r / 2;
    for (u64 i = threadIdx.x; i < half; i += blockDim.x) {
        float a = v[i], bb = v[i + half];
        v[i] = a * cr[i] - bb * sr[i];
        v[i + half] = bb * cr[i + half] + a * sr[i + half];
    }
}

// Columns `col..col + heads·d` of `x [B, N, W]` → head-major `[B, heads, N, d]`, with optional
// per-head RMS QK-norm (`gamma` [d], null for none) and RoPE (`cos`, `sin` `[≥N, r]`, null for
// none). One block per output head vector; dynamic shared memory holds `d` floats.
extern "C" __global__ void split_heads_f32(const float* x, const float* gamma, const float* cos_t,
                                           const float* sin_t, float* y, u64 n, u64 w, u64 col,
                                           u64 heads, u64 d, float eps, u64 r) {
    extern __shared__ float sh[];
    __shared__ float scratch[32];
    u64 idx = blockIdx.x;
    u64 bh = idx / n, p = idx % n, bi = bh / heads, hi = bh % heads;
    const float* src = x + (bi * n + p) * w + col + hi * d;
    float ss = 0.0f;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) {
        float v = src[i];
        sh[i] = v;
        ss += v * v;
    }
    ss = block_sum(ss, scratch);
    if (gamma) {
        float inv = 1.0f / sqrtf(ss / (float)d + eps);
        for (u64 i = threadIdx.x; i < d; i += blockDim.x) sh[i] = sh[i] * inv * gamma[i];
    }
    __syncthreads();
    if (cos_t) rope_vec(sh, cos_t + p * r, sin_t + p * r, r);
    __syncthreads();
    float* dst = y + idx * d;
    for (u64 i = threadIdx.x; i < d; i += blockDim.x) dst[i] = sh[i];
}

// `[B, H, N, D]` (contiguous) → `[B, N, H·D]`, rows with `row_mask[b, p] == 0` zeroed.
extern "C" __global__ void merge_heads_f32(const float* x, const float* row_mask, float* y,
                                           u64 b, u64 h, u64 n, u64 d) {
    ARIA_FOR(i, b * h * n * d) {
        u64 c = i % d, t = i / d;
        u64 hi = t % h;
        t /= h;
        u64 p = t % n, bi = t / n;
        float v = x[((bi * h + hi) * n + p) * d + c];
        if (row_mask && row_mask[bi * n + p] == 0.0f) v = 0.0f;
        y[i] = v;
    }
}

// Rotary embedding of `x [rows, d]` (row `i` at position `i % n`) on its first `r` dims.
extern "C" __global__ void rope_f32(const float* x, const float* cos_t, const float* sin_t,
                                    float* y, u64 rows, u64 n, u64 d, u64 r) {
    ARIA_FOR(i, rows * d) {
        u64 row = i / d, c = i % d, p = row % n, half = r / 2;
        const float* xr = x + row * d;
        const float* cr = cos_t + p * r;
        const float* sr = sin_t + p * r;
        float v;
        if (c < half) {
            v = xr[c] * cr[c] - xr[c + half] * sr[c];
        } else if (c < r) {
            v = xr[c] * cr[c] + xr[c - half] * sr[c];
        } else {
            v = xr[c];
        }
        y[i] = v;
    }
}
