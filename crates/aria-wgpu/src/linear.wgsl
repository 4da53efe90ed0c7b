// y = x·Wᵀ + b: x [M, K] f32, w [N, K] (f32, f16 or bf16, read as 32-bit words), b [N] f32,
// y [M, ldy] f32 written at columns y_col .. y_col + N (a weight split over several buffers
// runs once per buffer into its column range).
//
// One TILE×TILE workgroup computes a TILE×TILE tile of y; x and w are staged through
// workgroup memory TILE columns of K at a time, and each output accumulates Σ_k x·w in K
// order with fma (as the CPU kernels). Edges are zero-padded in the tiles and masked on
// store. 16-bit weights stay 16-bit in memory: f16 is unpacked with unpack2x16float, bf16 by
// shifting into the high half of an f32. Offsets are in elements so views bind whole buffers.
// Constants: TILE (the tile side), WDT (0 f32, 1 f16, 2 bf16).
// The bindings and `load_w` come first, from weights.wgsl.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    has_bias: u32,
    x_off: u32,
    w_off: u32,
    b_off: u32,
    ldy: u32,
    y_col: u32,
}

var<workgroup> xs: array<array<f32, TILE>, TILE>;
var<workgroup> ws: array<array<f32, TILE>, TILE>;

@compute @workgroup_size(TILE, TILE, 1)
fn linear(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wg.y * TILE + lid.y;
    let col = wg.x * TILE + lid.x;
    let wrow = wg.x * TILE + lid.y;
    var acc = 0.0;
    let tiles = (p.k + TILE - 1u) / TILE;
    for (var t = 0u; t < tiles; t = t + 1u) {
        let kk = t * TILE + lid.x;
        var xv = 0.0;
        if (row < p.m && kk < p.k) {
            xv = x[p.x_off + row * p.k + kk];
        }
        xs[lid.y][lid.x] = xv;
        var wv = 0.0;
        if (wrow < p.n && kk < p.k) {
            wv = load_w(p.w_off + wrow * p.k + kk);
        }
        ws[lid.y][lid.x] = wv;
        workgroupBarrier();
        for (var i = 0u; i < TILE; i = i + 1u) {
            acc = fma(xs[lid.y][i], ws[lid.x][i], acc);
        }
        workgroupBarrier();
    }
    if (row < p.m && col < p.n) {
        if (p.has_bias != 0u) {
            acc = acc + b[p.b_off + col];
        }
        y[row * p.ldy + p.y_col + col] = acc;
    }
}
