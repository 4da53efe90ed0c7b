// y = x·Wᵀ + b (f32): x [M, K], w [N, K], b [N], y [M, N], all row-major.
//
// One 16×16 workgroup computes a 16×16 tile of y; x and w are staged through workgroup memory
// 16 columns of K at a time. Edges (M, N or K not multiples of 16) are zero-padded in the tiles
// and masked on store. Offsets are in elements so that views (narrowed tensors) bind whole
// buffers.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    has_bias: u32,
    x_off: u32,
    w_off: u32,
    b_off: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const TILE: u32 = 16u;

// xs[r][i] = x[row0 + r, k0 + i]; ws[c][i] = w[col0 + c, k0 + i].
var<workgroup> xs: array<array<f32, 16>, 16>;
var<workgroup> ws: array<array<f32, 16>, 16>;

@compute @workgroup_size(16, 16, 1)
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
            wv = w[p.w_off + wrow * p.k + kk];
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
        y[row * p.n + col] = acc;
    }
}
