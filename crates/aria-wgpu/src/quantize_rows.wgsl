// W8A8 activations: each row of x [M, K] (f32) quantized per token, as the CPU does:
// s = max|x| / 127, q = round-half-even(x · (127 / max|x|)) clamped to ±127; a zero row has
// s = 0, q = 0; a row holding a non-finite value has s = NaN (its outputs are NaN, as in f32)
// and q = 0. Output [M, 1 + ⌈K/32⌉·8] words: s as f32 bits, then q 4 to a word (low byte
// first), zero past K. One workgroup of 64 per row.

struct Params {
    m: u32,
    k: u32,
    x_off: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> q: array<u32>;

var<workgroup> red: array<f32, 64>;
var<workgroup> bad: array<u32, 64>;

@compute @workgroup_size(64, 1, 1)
fn quantize_rows(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let r = wg.x;
    if (r >= p.m) {
        return;
    }
    let base = p.x_off + r * p.k;
    var m = 0.0;
    var nf = 0u;
    for (var i = lid.x; i < p.k; i = i + 64u) {
        let v = x[base + i];
        if ((bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u) {
            nf = 1u;
        } else {
            m = max(m, abs(v));
        }
    }
    red[lid.x] = m;
    bad[lid.x] = nf;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid.x < s) {
            red[lid.x] = max(red[lid.x], red[lid.x + s]);
            bad[lid.x] = max(bad[lid.x], bad[lid.x + s]);
        }
        workgroupBarrier();
    }
    let amax = red[0];
    let nonfinite = bad[0] != 0u;
    let kw = (p.k + 31u) / 32u * 8u;
    let out = r * (1u + kw);
    if (lid.x == 0u) {
        var sc = 0.0;
        if (nonfinite) {
            sc = bitcast<f32>(0x7fc00000u);
        } else if (amax > 0.0) {
            sc = amax / 127.0;
        }
        q[out] = bitcast<u32>(sc);
    }
    var inv = 0.0;
    if (!nonfinite && amax > 0.0) {
        inv = 127.0 / amax;
    }
    for (var wi = lid.x; wi < kw; wi = wi + 64u) {
        var word = 0u;
        for (var t = 0u; t < 4u; t = t + 1u) {
            let e = wi * 4u + t;
            var v = 0.0;
            if (e < p.k) {
                v = x[base + e];
            }
            let qi = clamp(i32(round(v * inv)), -127i, 127i);
            word = word | ((bitcast<u32>(qi) & 0xffu) << (8u * t));
        }
        q[out + 1u + wi] = word;
    }
}
