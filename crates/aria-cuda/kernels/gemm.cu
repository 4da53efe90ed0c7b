// A tiled strided-batched GEMM with cuBLAS's column-major semantics (`C = op(A)·op(B)`, f32
// accumulation), used when libcublas cannot be opened. `ty` codes the element type of A and
// B: 0 f32, 1 f16, 2 bf16 (raw 16-bit patterns). 16×16 output tiles, one thread per output.

#define GEMM_TILE 16

struct GemmArgs {
    int trans_a, trans_b, m, n, k, lda, ldb, ldc;
    i64 stride_a, stride_b, stride_c;
    int batch, ty;
};

__device__ __forceinline__ float gemm_ld(const void* p, i64 i, int ty) {
    if (ty == 0) return ((const float*)p)[i];
    u16 h = ((const u16*)p)[i];
    return ty == 1 ? h2f(h) : bf2f(h);
}

extern "C" __global__ void gemm_fallback(const void* a, const void* b, float* c, GemmArgs g) {
    __shared__ float as[GEMM_TILE][GEMM_TILE + 1];
    __shared__ float bs[GEMM_TILE][GEMM_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int i = blockIdx.x * GEMM_TILE + tx;  // row of C
    const int j = blockIdx.y * GEMM_TILE + ty;  // column of C
    const i64 oa = (i64)blockIdx.z * g.stride_a, ob = (i64)blockIdx.z * g.stride_b;
    float acc = 0.0f;
    for (int p0 = 0; p0 < g.k; p0 += GEMM_TILE) {
        // as[r][p] = op(A)[blockRow + r, p0 + p]; bs[p][q] = op(B)[p0 + p, blockCol + q].
        int r = blockIdx.x * GEMM_TILE + tx, p = p0 + ty;
        float av = 0.0f;
        if (r < g.m && p < g.k)
            av = gemm_ld(a, oa + (g.trans_a ? (i64)p + (i64)r * g.lda : (i64)r + (i64)p * g.lda), g.ty);
        as[tx][ty] = av;
        int q = blockIdx.y * GEMM_TILE + ty, pb = p0 + tx;
        float bv = 0.0f;
        if (q < g.n && pb < g.k)
            bv = gemm_ld(b, ob + (g.trans_b ? (i64)q + (i64)pb * g.ldb : (i64)pb + (i64)q * g.ldb), g.ty);
        bs[tx][ty] = bv;
        __syncthreads();
        for (int t = 0; t < GEMM_TILE; ++t) acc += as[tx][t] * bs[t][ty];
        __syncthreads();
    }
    if (i < g.m && j < g.n) c[(i64)blockIdx.z * g.stride_c + (i64)i + (i64)j * g.ldc] = acc;
}
