// 1-D convolution, stride 1: x [B, Cin, L] f32, w [Cout, Cin, KW] (f32, f16 or bf16, read as
// 32-bit words), b [Cout] f32, `pad` zeros each side → y [B, Cout, Lo], Lo = L + 2·pad − KW + 1.
//
// A tiled product over the implicit im2col matrix (nothing is copied): rows are output
// channels, columns output positions, and the reduction index r = ci·KW + k runs in that
// order (as the CPU kernel), with X[r, t] = x[b, ci, t + k − pad] (zero outside). One
// TILE×TILE workgroup per output tile, workgroup z = batch item.
// Constants: TILE, WDT (0 f32, 1 f16, 2 bf16).
// The bindings and `load_w` come first, from weights.wgsl.

struct Params {
    cin: u32,
    l: u32,
    cout: u32,
    kw: u32,
    pad: u32,
    lo: u32,
    has_bias: u32,
    x_off: u32,
    w_off: u32,
    b_off: u32,
}

var<workgroup> wt: array<array<f32, TILE>, TILE>;
var<workgroup> xt: array<array<f32, TILE>, TILE>;

@compute @workgroup_size(TILE, TILE, 1)
fn conv1d(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let bi = wg.z;
    let co = wg.y * TILE + lid.y;
    let t = wg.x * TILE + lid.x;
    let kdim = p.cin * p.kw;
    let xbase = p.x_off + bi * p.cin * p.l;
    var acc = 0.0;
    let tiles = (kdim + TILE - 1u) / TILE;
    for (var s = 0u; s < tiles; s = s + 1u) {
        // Weights: row co, reduction index s·TILE + lid.x.
        let rw = s * TILE + lid.x;
        var wv = 0.0;
        if (co < p.cout && rw < kdim) {
            wv = load_w(p.w_off + co * kdim + rw);
        }
        wt[lid.y][lid.x] = wv;
        // Inputs: reduction index s·TILE + lid.y, position t.
        let rx = s * TILE + lid.y;
        var xv = 0.0;
        if (t < p.lo && rx < kdim) {
            let ci = rx / p.kw;
            let pos = i32(t + rx % p.kw) - i32(p.pad);
            if (pos >= 0 && pos < i32(p.l)) {
                xv = x[xbase + ci * p.l + u32(pos)];
            }
        }
        xt[lid.y][lid.x] = xv;
        workgroupBarrier();
        for (var i = 0u; i < TILE; i = i + 1u) {
            acc = fma(wt[lid.y][i], xt[i][lid.x], acc);
        }
        workgroupBarrier();
    }
    if (co < p.cout && t < p.lo) {
        if (p.has_bias != 0u) {
            acc = acc + b[p.b_off + co];
        }
        y[(bi * p.cout + co) * p.lo + t] = acc;
    }
}
