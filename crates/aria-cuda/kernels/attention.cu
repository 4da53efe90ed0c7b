// Flash-style attention: one warp per query, four queries per block, keys streamed through
// shared memory in tiles of `tk` (≤ 32) with an online (running max) softmax, so memory stays
// O(tile) whatever the sequence length. Variants, all in one kernel:
// - full attention, optionally with a key mask `[B, Nk]` (non-zero = valid) applied the CPU
//   way: mode 0 ("zero values": masked keys keep their weight in the denominator but add no
//   value, as PyTorch SDPA after `v ← v ⊙ mask`) or mode 1 ("exclude": masked keys leave the
//   softmax; a query with no valid key outputs zeros);
// - banded: query `i` sees keys `i − wl ..= i + wr` (`banded` non-zero; e.g. ±17);
// - chunked: query `i` sees only keys of its own chunk `⌊i/chunk⌋·chunk ..` (`chunk` non-zero);
// - differential: `softmax(q·kᵀ) − softmax(q2·k2ᵀ)` times the same `v` (`q2`, `k2` non-null).
// Scores are `scale·q·k`, soft-capped `c·tanh(s/c)` when `softcap > 0`.
// `q [B, H, Nq, D]`, `k [B, H, Nk, D]`, `v [B, H, Nk, Dv]` contiguous f32; `D, Dv ≤ 256`.

#define ATT_BQ 4
#define ATT_MAXV 8

struct AttnArgs {
    u64 b, h, nq, nk, d, dv;
    float scale, softcap;
    int mask_mode, banded;
    u64 wl, wr, chunk, tk;
};

__device__ __forceinline__ void visible(const AttnArgs& a, u64 i, u64* lo, u64* hi) {
    u64 l = 0, r = a.nk;
    if (a.banded) {
        l = i > a.wl ? i - a.wl : 0;
        r = i + a.wr + 1 < a.nk ? i + a.wr + 1 : a.nk;
    }
    if (a.chunk) {
        u64 c0 = (i / a.chunk) * a.chunk;
        if (c0 > l) l = c0;
        if (c0 + a.chunk < r) r = c0 + a.chunk;
    }
    *lo = l;
    *hi = r > l ? r : l;
}

// Running state of one softmax for one query (per lane: its share of the output dims).
struct Online {
    float m, l;
    float acc[ATT_MAXV];
};

__device__ __forceinline__ void online_init(Online& o) {
    o.m = ARIA_NEG_INF;
    o.l = 0.0f;
    for (int k = 0; k < ATT_MAXV; ++k) o.acc[k] = 0.0f;
}

// One tile: lane `t < tk` scored key `j0 + t` as `s` (−∞ when it does not take part) and
// `keep` says whether its value enters the sum (false for zero-value masked keys).
__device__ __forceinline__ void online_tile(Online& o, float s, bool keep, const float* vt,
                                            u64 tk, u64 dv) {
    int lane = threadIdx.x & 31;
    float tmax = warp_max(s);
    float mnew = fmaxf(o.m, tmax);
    if (mnew == ARIA_NEG_INF) return;  // nothing visible yet
    float alpha = (o.m == ARIA_NEG_INF) ? 0.0f : expf(o.m - mnew);
    float p = (s == ARIA_NEG_INF) ? 0.0f : expf(s - mnew);
    o.l = o.l * alpha + warp_sum(p);
    float pv = keep ? p : 0.0f;
    for (int k = 0; k < ATT_MAXV; ++k) o.acc[k] *= alpha;
    for (u64 t = 0; t < tk; ++t) {
        float pt = __shfl_sync(0xffffffffu, pv, (int)t);
        if (pt != 0.0f) {
            for (int k = 0; k < ATT_MAXV; ++k) {
                u64 c = (u64)lane + 32u * (u64)k;
                if (c < dv) o.acc[k] += pt * vt[t * dv + c];
            }
        }
    }
    o.m = mnew;
}

__device__ __forceinline__ float score(const AttnArgs& a, const float* qs, const float* kt) {
    float s = 0.0f;
    for (u64 c = 0; c < a.d; ++c) s += qs[c] * kt[c];
    s *= a.scale;
    if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
    return s;
}

extern "C" __global__ void flash_attn_f32(const float* q, const float* k, const float* v,
                                          const float* q2, const float* k2, const float* mask,
                                          float* out, AttnArgs a) {
    extern __shared__ float smem[];
    const bool diff = q2 != 0;
    const u64 d = a.d, dv = a.dv, tk = a.tk;
    float* qs = smem;                                   // [BQ, D]
    float* q2s = qs + ATT_BQ * d;                       // [BQ, D] (diff only)
    float* ks = q2s + (diff ? ATT_BQ * d : 0);          // [tk, D]
    float* k2s = ks + tk * d;                           // [tk, D] (diff only)
    float* vs = k2s + (diff ? tk * d : 0);              // [tk, Dv]

    const u64 bh = blockIdx.y, bi = bh / a.h;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const u64 i0 = (u64)blockIdx.x * ATT_BQ;
    const u64 i = i0 + (u64)warp;
    const bool active = i < a.nq;
    const float* qb = q + bh * a.nq * d;
    const float* kb = k + bh * a.nk * d;
    const float* vb = v + bh * a.nk * dv;
    const float* mrow = mask ? mask + bi * a.nk : 0;

    for (u64 x = threadIdx.x; x < ATT_BQ * d; x += blockDim.x) {
        u64 r = x / d;
        bool in = i0 + r < a.nq;
        qs[x] = in ? qb[(i0 + r) * d + x % d] : 0.0f;
        if (diff) q2s[x] = in ? q2[bh * a.nq * d + (i0 + r) * d + x % d] : 0.0f;
    }

    // The union of the key ranges of this block's queries (monotone in the query index).
    u64 ilast = i0 + ATT_BQ - 1 < a.nq ? i0 + ATT_BQ - 1 : a.nq - 1;
    u64 blo, bhi, tmp, lo = 0, hi = 0;
    visible(a, i0, &blo, &tmp);
    visible(a, ilast, &tmp, &bhi);
    if (active) visible(a, i, &lo, &hi);

    Online o1, o2;
    online_init(o1);
    online_init(o2);
    for (u64 j0 = blo; j0 < bhi; j0 += tk) {
        u64 n_here = bhi - j0 < tk ? bhi - j0 : tk;
        __syncthreads();
        for (u64 x = threadIdx.x; x < n_here * d; x += blockDim.x) {
            ks[x] = kb[j0 * d + x];
            if (diff) k2s[x] = k2[bh * a.nk * d + j0 * d + x];
        }
        for (u64 x = threadIdx.x; x < n_here * dv; x += blockDim.x) vs[x] = vb[j0 * dv + x];
        __syncthreads();
        if (!active) continue;
        u64 j = j0 + (u64)lane;
        bool seen = (u64)lane < n_here && j >= lo && j < hi;
        bool valid = !(mrow && mrow[seen ? j : 0] == 0.0f);
        bool excluded = !seen || (a.mask_mode == 1 && !valid);
        float s1 = excluded ? ARIA_NEG_INF : score(a, qs + (u64)warp * d, ks + (u64)lane * d);
        online_tile(o1, s1, valid, vs, n_here, dv);
        if (diff) {
            float s2 =
                excluded ? ARIA_NEG_INF : score(a, q2s + (u64)warp * d, k2s + (u64)lane * d);
            online_tile(o2, s2, valid, vs, n_here, dv);
        }
    }
    if (!active) return;
    float* orow = out + (bh * a.nq + i) * dv;
    float inv1 = o1.l > 0.0f ? 1.0f / o1.l : 0.0f;
    float inv2 = o2.l > 0.0f ? 1.0f / o2.l : 0.0f;
    for (int kx = 0; kx < ATT_MAXV; ++kx) {
        u64 c = (u64)lane + 32u * (u64)kx;
        if (c < dv) {
            float r = o1.acc[kx] * inv1;
            if (diff) r -= o2.acc[kx] * inv2;
            orow[c] = r;
        }
    }
}
