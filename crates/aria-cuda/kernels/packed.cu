// Products with packed weights (`linear_packed`), on the blocks as the op set lays them out
// (`U8 [rows, row_bytes]`, uploaded unchanged): one warp per output `y[r, j]`, its lanes taking
// the row's blocks (or bf16 pairs) in turn, the warp summing their partial results. The f32
// sums run in another order than the CPU reference's (the harness's tolerance table says how
// far that may move a result).

// A little-endian f16 at a byte address (blocks are 34 bytes: no alignment to rely on).
__device__ __forceinline__ float ld_f16(const unsigned char* p) {
    return h2f((u16)((u16)p[0] | ((u16)p[1] << 8)));
}

__device__ __forceinline__ bool finite_f(float v) {
    return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
}

// `q8_0`, weight-only: blocks of an f16 scale `d` and 32 int8 weights; each output is
// Σ_blocks d·(Σ x·q) plus the bias (may be null). The padding of the last block is not read.
extern "C" __global__ void linear_q8_0_f32(const float* x, const unsigned char* w,
                                           const float* bias, float* y, u64 m, u64 n, u64 k) {
    const u64 nb = (k + 31) / 32, row_bytes = nb * 34;
    const u64 per_block = blockDim.x >> 5;
    const u64 stride = (u64)gridDim.x * per_block;
    const int lane = threadIdx.x & 31;
    for (u64 o = (u64)blockIdx.x * per_block + (threadIdx.x >> 5); o < m * n; o += stride) {
        const u64 r = o / n, j = o % n;
        const float* xr = x + r * k;
        const unsigned char* wr = w + j * row_bytes;
        float acc = 0.0f;
        for (u64 b = lane; b < nb; b += 32) {
            const unsigned char* blk = wr + b * 34;
            const u64 k0 = b * 32;
            const u64 k1 = (k0 + 32 < k) ? k0 + 32 : k;
            float dot = 0.0f;
            for (u64 i = k0; i < k1; ++i) dot += xr[i] * (float)(signed char)blk[2 + (i - k0)];
            acc += ld_f16(blk) * dot;
        }
        acc = warp_sum(acc);
        if (lane == 0) y[o] = bias ? acc + bias[j] : acc;
    }
}

// The W8A8 activations: one block per row of `x [m, k]`, quantized per token to int8 with
// `s = max|x| / 127` (values `rint(x · 127 / max|x|)`, ties to even, clamped to ±127) into
// `q [m, kpad]` (the tail past `k` zero); a row with a non-finite value gets zeros and a NaN
// scale, a zero row zeros and scale 0 (the reference's rule).
extern "C" __global__ void quantize_rows_i8(const float* x, signed char* q, float* s, u64 k,
                                            u64 kpad) {
    __shared__ float scratch[32];
    const u64 r = blockIdx.x;
    const float* xr = x + r * k;
    signed char* qr = q + r * kpad;
    float amax = 0.0f, bad = 0.0f;
    for (u64 i = threadIdx.x; i < k; i += blockDim.x) {
        const float v = xr[i];
        if (finite_f(v)) {
            amax = fmaxf(amax, fabsf(v));
        } else {
            bad = 1.0f;
        }
    }
    amax = block_max(amax, scratch);
    bad = block_max(bad, scratch);
    const bool zero = bad != 0.0f || amax == 0.0f;
    const float inv = zero ? 0.0f : 127.0f / amax;
    for (u64 i = threadIdx.x; i < kpad; i += blockDim.x) {
        float v = (i < k && !zero) ? rintf(xr[i] * inv) : 0.0f;
        v = fminf(fmaxf(v, -127.0f), 127.0f);
        qr[i] = (signed char)(int)v;
    }
    if (threadIdx.x == 0) s[r] = bad != 0.0f ? __int_as_float(0x7fc00000) : amax / 127.0f;
}

// `q8_0` with W8A8: each block's products summed exactly in integers, `Σ_blocks d·isum`, times
// the row's activation scale, plus the bias (may be null).
extern "C" __global__ void linear_q8_0_w8a8_f32(const signed char* qx, const float* sx,
                                                const unsigned char* w, const float* bias,
                                                float* y, u64 m, u64 n, u64 nb) {
    const u64 row_bytes = nb * 34;
    const u64 per_block = blockDim.x >> 5;
    const u64 stride = (u64)gridDim.x * per_block;
    const int lane = threadIdx.x & 31;
    for (u64 o = (u64)blockIdx.x * per_block + (threadIdx.x >> 5); o < m * n; o += stride) {
        const u64 r = o / n, j = o % n;
        const signed char* xr = qx + r * nb * 32;
        const unsigned char* wr = w + j * row_bytes;
        float acc = 0.0f;
        for (u64 b = lane; b < nb; b += 32) {
            const unsigned char* blk = wr + b * 34;
            const signed char* xb = xr + b * 32;
            int isum = 0;
            for (int i = 0; i < 32; ++i) isum += (int)xb[i] * (int)(signed char)blk[2 + i];
            acc += ld_f16(blk) * (float)isum;
        }
        acc = warp_sum(acc);
        if (lane == 0) {
            const float v = acc * sx[r];
            y[o] = bias ? v + bias[j] : v;
        }
    }
}

// `bf16_panels`: rows of bf16 pairs (`lo | hi << 16`, the odd last weight paired with 0); the
// activations are rounded to bf16 (nearest even) and the pair products summed in f32.
extern "C" __global__ void linear_bf16_pairs_f32(const float* x, const u32* w, const float* bias,
                                                 float* y, u64 m, u64 n, u64 k) {
    const u64 kp = (k + 1) / 2;
    const u64 per_block = blockDim.x >> 5;
    const u64 stride = (u64)gridDim.x * per_block;
    const int lane = threadIdx.x & 31;
    for (u64 o = (u64)blockIdx.x * per_block + (threadIdx.x >> 5); o < m * n; o += stride) {
        const u64 r = o / n, j = o % n;
        const float* xr = x + r * k;
        const u32* wr = w + j * kp;
        float acc = 0.0f;
        for (u64 p = lane; p < kp; p += 32) {
            const u32 wp = wr[p];
            const float x0 = bf2f(f2bf(xr[2 * p]));
            const float x1 = (2 * p + 1 < k) ? bf2f(f2bf(xr[2 * p + 1])) : 0.0f;
            acc = fmaf(x0, bf2f((u16)(wp & 0xffffu)), acc);
            acc = fmaf(x1, bf2f((u16)(wp >> 16)), acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) y[o] = bias ? acc + bias[j] : acc;
    }
}

// `q4_k`, weight-only: blocks of 256 weights (144 bytes: f16 `d`, f16 `dmin`, 12 bytes of
// 6-bit scales and mins, 128 bytes of 4-bit values); the lanes take the blocks' 32-weight
// sub-blocks in turn, each weight dequantized as the reference does, `(d·sc)·q − dmin·m`.
extern "C" __global__ void linear_q4_k_f32(const float* x, const unsigned char* w,
                                           const float* bias, float* y, u64 m, u64 n, u64 k) {
    const u64 nb = (k + 255) / 256, row_bytes = nb * 144;
    const u64 per_block = blockDim.x >> 5;
    const u64 stride = (u64)gridDim.x * per_block;
    const int lane = threadIdx.x & 31;
    for (u64 o = (u64)blockIdx.x * per_block + (threadIdx.x >> 5); o < m * n; o += stride) {
        const u64 r = o / n, c = o % n;
        const float* xr = x + r * k;
        const unsigned char* wr = w + c * row_bytes;
        float acc = 0.0f;
        for (u64 u = lane; u < nb * 8; u += 32) {
            const unsigned char* blk = wr + (u >> 3) * 144;
            const unsigned char* sc = blk + 4;
            const int j = (int)(u & 7);
            int s, mn;
            if (j < 4) {
                s = sc[j] & 63;
                mn = sc[j + 4] & 63;
            } else {
                s = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
                mn = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
            }
            const float d1 = ld_f16(blk) * (float)s, m1 = ld_f16(blk + 2) * (float)mn;
            const unsigned char* qs = blk + 16 + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            const u64 k0 = (u >> 3) * 256 + 32 * (u64)j;
            float dot = 0.0f;
            for (int l = 0; l < 32 && k0 + l < k; ++l)
                dot += xr[k0 + l] * (d1 * (float)((qs[l] >> shift) & 0xF) - m1);
            acc += dot;
        }
        acc = warp_sum(acc);
        if (lane == 0) y[o] = bias ? acc + bias[c] : acc;
    }
}

// `q6_k`, weight-only: blocks of 256 weights (210 bytes: 128 bytes of low 4 bits, 64 of high
// 2 bits, 16 int8 scales, f16 `d`); the lanes take the 16-weight sub-blocks in turn, each
// weight dequantized as the reference does, `(d·sc)·(q − 32)`.
extern "C" __global__ void linear_q6_k_f32(const float* x, const unsigned char* w,
                                           const float* bias, float* y, u64 m, u64 n, u64 k) {
    const u64 nb = (k + 255) / 256, row_bytes = nb * 210;
    const u64 per_block = blockDim.x >> 5;
    const u64 stride = (u64)gridDim.x * per_block;
    const int lane = threadIdx.x & 31;
    for (u64 o = (u64)blockIdx.x * per_block + (threadIdx.x >> 5); o < m * n; o += stride) {
        const u64 r = o / n, c = o % n;
        const float* xr = x + r * k;
        const unsigned char* wr = w + c * row_bytes;
        float acc = 0.0f;
        for (u64 u = lane; u < nb * 16; u += 32) {
            const unsigned char* blk = wr + (u >> 4) * 210;
            const int s = (int)(u & 15);
            const float d1 = ld_f16(blk + 208) * (float)(signed char)blk[192 + s];
            float dot = 0.0f;
            for (int t = 0; t < 16; ++t) {
                const int e = 16 * s + t;
                const u64 i = (u >> 4) * 256 + (u64)e;
                if (i >= k) break;
                const int h = e >> 7, part = (e & 127) >> 5, l = e & 31;
                const int qlb = blk[64 * h + 32 * (part & 1) + l];
                const int lo = part < 2 ? (qlb & 0xF) : (qlb >> 4);
                const int hi = (blk[128 + 32 * h + l] >> (2 * part)) & 3;
                dot += xr[i] * (d1 * (float)((lo | (hi << 4)) - 32));
            }
            acc += dot;
        }
        acc = warp_sum(acc);
        if (lane == 0) y[o] = bias ? acc + bias[c] : acc;
    }
}
