// Batched c = a·b: a [batch, M, K], b [batch, K, N], c [batch, M, N], all f32 row-major.
//
// One TILE×TILE workgroup per TILE×TILE tile of one batch item (workgroup z = item); a and b
// are staged through workgroup memory TILE values of K at a time and each output accumulates
// Σ_k a·b in K order with fma. Edges are zero-padded and masked on store.
// Constants: TILE.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    a_off: u32,
    b_off: u32,
    z0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

var<workgroup> at: array<array<f32, TILE>, TILE>;
var<workgroup> bs: array<array<f32, TILE>, TILE>;

@compute @workgroup_size(TILE, TILE, 1)
fn matmul(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let z = p.z0 + wg.z;
    let row = wg.y * TILE + lid.y;
    let col = wg.x * TILE + lid.x;
    let abase = p.a_off + z * p.m * p.k;
    let bbase = p.b_off + z * p.k * p.n;
    var acc = 0.0;
    let tiles = (p.k + TILE - 1u) / TILE;
    for (var t = 0u; t < tiles; t = t + 1u) {
        let ka = t * TILE + lid.x;
        var av = 0.0;
        if (row < p.m && ka < p.k) {
            av = a[abase + row * p.k + ka];
        }
        at[lid.y][lid.x] = av;
        let kb = t * TILE + lid.y;
        var bv = 0.0;
        if (col < p.n && kb < p.k) {
            bv = b[bbase + kb * p.n + col];
        }
        bs[lid.y][lid.x] = bv;
        workgroupBarrier();
        for (var i = 0u; i < TILE; i = i + 1u) {
            acc = fma(at[lid.y][i], bs[i][lid.x], acc);
        }
        workgroupBarrier();
    }
    if (row < p.m && col < p.n) {
        c[z * p.m * p.n + row * p.n + col] = acc;
    }
}
