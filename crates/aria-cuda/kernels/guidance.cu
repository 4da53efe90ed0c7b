// Classifier-free guidance with the APG projection and the norm clamp (`apg_guidance`): one
// block per batch item of `x, v_cond, v_uncond [B, C, T]`, reductions in f64 as on the CPU.
// `sigma [B]` is read from device memory (a captured sampler step changes it per step);
// `mask [B, T]` may be null.

__device__ double block_sum_f64(double v, double* scratch) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) scratch[w] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < nw) ? scratch[threadIdx.x] : 0.0;
    if (w == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) scratch[0] = v;
    __syncthreads();
    double r = scratch[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void apg_guidance_f32(const float* x, const float* vc, const float* vu,
                                            const float* sigma, const float* mask, float* y,
                                            u64 c, u64 t, float cfg_scale, float apg_scale,
                                            float norm_threshold) {
    __shared__ double scratch[32];
    const u64 bi = blockIdx.x, per = c * t;
    const float s = sigma[bi];
    const float* xs = x + bi * per;
    const float* vcs = vc + bi * per;
    const float* vus = vu + bi * per;
    float* o = y + bi * per;
    const bool masked = mask != 0;
    // Pass 1: |diff ⊙ m|² and |v1|² (v1 = dc ⊙ m, or dc without a mask).
    double nd = 0.0, nv = 0.0;
    for (u64 i = threadIdx.x; i < per; i += blockDim.x) {
        float m = masked ? (mask[bi * t + i % t] != 0.0f ? 1.0f : 0.0f) : 1.0f;
        float dc = xs[i] - vcs[i] * s, du = xs[i] - vus[i] * s;
        float diff = dc - du;
        double a = (double)(diff * m);
        nd += a * a;
        double b = (double)(masked ? dc * m : dc);
        nv += b * b;
    }
    nd = block_sum_f64(nd, scratch);
    nv = block_sum_f64(nv, scratch);
    float fclamp = 1.0f;
    if (norm_threshold > 0.0f) fclamp = fminf(norm_threshold / (float)sqrt(nd), 1.0f);
    float norm_v1 = fmaxf((float)sqrt(nv), masked ? 1e-8f : 1e-12f);
    // Pass 2: the projection of the (clamped) difference on v1 / |v1|.
    double dot = 0.0;
    if (apg_scale != 0.0f) {
        for (u64 i = threadIdx.x; i < per; i += blockDim.x) {
            float m = masked ? (mask[bi * t + i % t] != 0.0f ? 1.0f : 0.0f) : 1.0f;
            float dc = xs[i] - vcs[i] * s, du = xs[i] - vus[i] * s;
            float diff = (dc - du) * fclamp;
            float v1 = (masked ? dc * m : dc) / norm_v1;
            dot += (double)(diff * v1);
        }
        dot = block_sum_f64(dot, scratch);
    }
    const float fdot = (float)dot;
    // Pass 3: the guided output.
    for (u64 i = threadIdx.x; i < per; i += blockDim.x) {
        float m = masked ? (mask[bi * t + i % t] != 0.0f ? 1.0f : 0.0f) : 1.0f;
        float dc = xs[i] - vcs[i] * s, du = xs[i] - vus[i] * s;
        float diff = (dc - du) * fclamp;
        float used = diff;
        if (apg_scale != 0.0f) {
            float v1 = (masked ? dc * m : dc) / norm_v1;
            float orth = masked ? (diff - fdot * v1) * m : diff - fdot * v1;
            used = apg_scale == 1.0f ? orth : apg_scale * orth + (1.0f - apg_scale) * diff;
        }
        float d = dc + (cfg_scale - 1.0f) * used;
        o[i] = (xs[i] - d) / s;
    }
}

// CFG rescale (`cfg_rescale`): `v` and `v_cond [B, C, T]`; for each (item, position) the
// channel standard deviations (unbiased, f64 as on the CPU) give `ratio = std(v_cond)/std(v)`,
// and `y = φ·(v·ratio) + (1 − φ)·v`. One thread per (item, position).
extern "C" __global__ void cfg_rescale_f32(const float* v, const float* vc, float* y, u64 nb,
                                           u64 c, u64 t, float phi) {
    ARIA_FOR(i, nb * t) {
        const u64 b = i / t, p = i % t;
        const float* vb = v + b * c * t + p;
        const float* cb = vc + b * c * t + p;
        double mv = 0.0, mc = 0.0;
        for (u64 ch = 0; ch < c; ++ch) {
            mv += (double)vb[ch * t];
            mc += (double)cb[ch * t];
        }
        mv /= (double)c;
        mc /= (double)c;
        double sv = 0.0, sc = 0.0;
        for (u64 ch = 0; ch < c; ++ch) {
            const double dv = (double)vb[ch * t] - mv, dc = (double)cb[ch * t] - mc;
            sv += dv * dv;
            sc += dc * dc;
        }
        sv /= (double)c - 1.0;
        sc /= (double)c - 1.0;
        const float ratio = (float)(sqrt(sc) / sqrt(sv));
        float* yb = y + b * c * t + p;
        for (u64 ch = 0; ch < c; ++ch) {
            const float val = vb[ch * t];
            yb[ch * t] = phi * (val * ratio) + (1.0f - phi) * val;
        }
    }
}
