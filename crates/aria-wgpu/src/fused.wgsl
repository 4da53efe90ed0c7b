// Fused row ops of the transformers (`ops::gated_residual_add`, `ops::split_heads`,
// `ops::merge_heads`, `ops::qkv_heads`). Bindings: 0 params, 1 the output, 2 x, 3 g, 4 ct,
// 5 st, 6 bt; each entry uses a prefix.

@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> ct: array<f32>;
@group(0) @binding(5) var<storage, read> st: array<f32>;
@group(0) @binding(6) var<storage, read> bt: array<f32>;

// `h + u ⊙ gate[b]` onto the last Nu tokens, masked rows kept. x = h, g = u, ct = gate (any
// strides), st = row mask (f32). params: 0 total, 1 n, 2 nu, 3 e, 4 h offset, 5 u offset,
// 6 has gate, 7 gate offset, 8 gate stride 0, 9 gate stride 1, 10 has mask, 11 mask offset.
@compute @workgroup_size(WG)
fn gated_residual_add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let n = pu(1u);
    let nu = pu(2u);
    let e = pu(3u);
    let row = i / e;
    let c = i % e;
    let bi = row / n;
    let p = row % n;
    let skip = n - nu;
    var v = x[pu(4u) + i];
    let keep = pu(10u) == 0u || st[pu(11u) + row] != 0.0;
    if (p >= skip && keep) {
        let uv = g[pu(5u) + (bi * nu + p - skip) * e + c];
        let gv = ct[pu(7u) + bi * pu(8u) + c * pu(9u)];
        v = v + select(uv, uv * gv, pu(6u) != 0u);
    }
    o[i] = v;
}

// One workgroup per output head vector of `[B, heads, N, d]` from columns `col..` of
// `x [B, N, W]`: optional RMS norm with gain g [d], then rotate-hf RoPE on the first r dims
// (ct, st `[≥N, r]`). params: 0 vectors, 1 n, 2 w, 3 col, 4 heads, 5 d, 6 has norm, 7 eps,
// 8 r (0: no rope), 9 x offset, 10 g offset, 11 cos offset, 12 sin offset.
fn sh_norm(v: f32, inv: f32, i: u32) -> f32 {
    if (pu(6u) != 0u) {
        return v * inv * g[pu(10u) + i];
    }
    return v;
}

@compute @workgroup_size(WG)
fn split_heads(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>) {
    let idx = group_id(wg, nwg);
    if (idx >= pu(0u)) { return; }
    let n = pu(1u);
    let heads = pu(4u);
    let d = pu(5u);
    let r = pu(8u);
    let t = lid.x;
    let bh = idx / n;
    let p = idx % n;
    let bi = bh / heads;
    let hi = bh % heads;
    let src = pu(9u) + (bi * n + p) * pu(2u) + pu(3u) + hi * d;
    var ss = 0.0;
    for (var i = t; i < d; i = i + WG) {
        let v = x[src + i];
        ss = ss + v * v;
    }
    ss = wg_sum(ss, t);
    let inv = 1.0 / sqrt(ss / f32(d) + pf(7u));
    let hf = r / 2u;
    let cr = pu(11u) + p * r;
    let sr = pu(12u) + p * r;
    for (var i = t; i < d; i = i + WG) {
        var v = sh_norm(x[src + i], inv, i);
        if (i < hf) {
            let w2 = sh_norm(x[src + i + hf], inv, i + hf);
            v = v * ct[cr + i] - w2 * st[sr + i];
        } else if (i < r) {
            let w2 = sh_norm(x[src + i - hf], inv, i - hf);
            v = v * ct[cr + i] + w2 * st[sr + i];
        }
        o[idx * d + i] = v;
    }
}

// `[B, H, N, D]` → `[B, N, H·D]`, rows with mask (g, f32) 0 zeroed. params: 0 total, 1 h,
// 2 n, 3 d, 4 x offset, 5 has mask, 6 mask offset.
@compute @workgroup_size(WG)
fn merge_heads(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let h = pu(1u);
    let n = pu(2u);
    let d = pu(3u);
    let c = i % d;
    var t = i / d;
    let hi = t % h;
    t = t / h;
    let p = t % n;
    let bi = t / n;
    let v = x[pu(4u) + ((bi * h + hi) * n + p) * d + c];
    let masked = pu(5u) != 0u && g[pu(6u) + bi * n + p] == 0.0;
    o[i] = select(v, 0.0, masked);
}

// Part `part` of `x [B, N, parts·H·Dh]` as heads `[B, H, N, Dh]`, DyT-normed (g γ, bt β) and
// rotated (ct, st `[≥N, r]`). params: 0 total, 1 n, 2 parts, 3 part, 4 heads, 5 dh, 6 has norm,
// 7 α, 8 r, 9 x offset, 10 γ offset, 11 β offset, 12 cos offset, 13 sin offset.
fn qkv_norm(v: f32, i: u32) -> f32 {
    if (pu(6u) != 0u) {
        return g[pu(10u) + i] * tanh_f(pf(7u) * v) + bt[pu(11u) + i];
    }
    return v;
}

@compute @workgroup_size(WG)
fn qkv_heads(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
    let idx = linear_id(wg, nwg, lid);
    if (idx >= pu(0u)) { return; }
    let n = pu(1u);
    let parts = pu(2u);
    let heads = pu(4u);
    let dh = pu(5u);
    let r = pu(8u);
    let d = heads * dh;
    let i = idx % dh;
    let rest = idx / dh;
    let t = rest % n;
    let bh = rest / n;
    let hh = bh % heads;
    let bi = bh / heads;
    let src = pu(9u) + (bi * n + t) * parts * d + pu(3u) * d + hh * dh;
    var v = qkv_norm(x[src + i], i);
    let hf = r / 2u;
    if (i < hf) {
        let w2 = qkv_norm(x[src + i + hf], i + hf);
        v = v * ct[pu(12u) + t * r + i] - w2 * st[pu(13u) + t * r + i];
    } else if (i < r) {
        let w2 = qkv_norm(x[src + i - hf], i - hf);
        v = v * ct[pu(12u) + t * r + i] + w2 * st[pu(13u) + t * r + i];
    }
    o[idx] = v;
}
