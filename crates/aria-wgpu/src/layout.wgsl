// Data-layout ops on raw 32-bit words (`Tensor::contiguous`, `Tensor::to_dtype`, `Tensor::cat`,
// `ops::pad`, `ops::unfold`, `ops::embedding`). Every dtype is addressed through `array<u32>`:
// 1- and 2-byte elements are packed little-endian into words, 8-byte elements span two.
// Dtype codes: 0 f32, 1 f16, 2 bf16, 3 i8, 4 u8, 5 i64.
// Bindings: 0 params, 1 the output, 2 source, 3 table (embedding).

@group(0) @binding(1) var<storage, read_write> o: array<u32>;
@group(0) @binding(2) var<storage, read> src: array<u32>;
@group(0) @binding(3) var<storage, read> tab: array<u32>;

fn esize(code: u32) -> u32 {
    var r = 1u;
    switch code {
        case 0u: { r = 4u; }
        case 1u, 2u: { r = 2u; }
        case 5u: { r = 8u; }
        default: { r = 1u; }
    }
    return r;
}

// The bits of element `e` (for sizes ≤ 4) of `src`.
fn bits_of(code: u32, e: u32) -> u32 {
    let sz = esize(code);
    if (sz == 4u) { return src[e]; }
    let byte = e * sz;
    let word = src[byte / 4u];
    let sh = (byte % 4u) * 8u;
    if (sz == 2u) { return (word >> sh) & 0xffffu; }
    return (word >> sh) & 0xffu;
}

fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let ex = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (ex == 0u) {
        let v = f32(m) * 5.9604644775390625e-8;
        return select(v, -v, s != 0u);
    }
    if (ex == 31u) {
        return bitcast<f32>(s | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(s | ((ex + 112u) << 23u) | (m << 13u));
}

// Round to nearest even, as `half::f16::from_f32` (NaN kept quiet, subnormals rounded).
fn f32_to_f16(x: u32) -> u32 {
    let sg = (x & 0x80000000u) >> 16u;
    let ex = x & 0x7f800000u;
    let man = x & 0x007fffffu;
    if (ex == 0x7f800000u) {
        let nan_bit = select(0x0200u, 0u, man == 0u);
        return sg | 0x7c00u | nan_bit | (man >> 13u);
    }
    let he = i32(ex >> 23u) - 127 + 15;
    if (he >= 31) {
        return sg | 0x7c00u;
    }
    if (he <= 0) {
        if (14 - he > 24) {
            return sg;
        }
        let mm = man | 0x00800000u;
        let shift = u32(14 - he);
        var hm = mm >> shift;
        let rb = 1u << (shift - 1u);
        if ((mm & rb) != 0u && (mm & (3u * rb - 1u)) != 0u) {
            hm = hm + 1u;
        }
        return sg | hm;
    }
    let v = sg | (u32(he) << 10u) | (man >> 13u);
    let rb = 0x1000u;
    if ((man & rb) != 0u && (man & (3u * rb - 1u)) != 0u) {
        return v + 1u;
    }
    return v;
}

fn f32_to_bf16(x: u32) -> u32 {
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (x >> 16u) | 0x0040u;
    }
    let rb = 0x8000u;
    if ((x & rb) != 0u && (x & (3u * rb - 1u)) != 0u) {
        return (x >> 16u) + 1u;
    }
    return x >> 16u;
}

// Element `e` of `src` as f32 bits (integers by value).
fn load_f32_bits(code: u32, e: u32) -> u32 {
    var r: u32;
    switch code {
        case 0u: { r = src[e]; }
        case 1u: { r = bitcast<u32>(f16_to_f32(bits_of(1u, e))); }
        case 2u: { r = bits_of(2u, e) << 16u; }
        case 3u: {
            let b = bits_of(3u, e);
            r = bitcast<u32>(f32(bitcast<i32>(b << 24u) >> 24u));
        }
        case 4u: { r = bitcast<u32>(f32(bits_of(4u, e))); }
        default: {
            // Exact for values that fit 32 bits (the sign extension of the low word).
            let lo = src[2u * e];
            let hi = src[2u * e + 1u];
            let small = hi == select(0u, 0xffffffffu, lo >= 0x80000000u);
            var v = f32(bitcast<i32>(lo));
            if (!small) {
                v = f32(bitcast<i32>(hi)) * 4294967296.0 + f32(lo);
            }
            r = bitcast<u32>(v);
        }
    }
    return r;
}

// f32 bits to an integer's bits as Rust's `as` converts: truncation toward zero, saturation,
// NaN to 0. `code` 3 i8, 4 u8 (low byte), 5 i64 (word `j` of two).
fn f32_to_int(x: u32, code: u32, j: u32) -> u32 {
    // NaN tested on the bits (a float compare may be folded away).
    if ((x & 0x7fffffffu) > 0x7f800000u) { return 0u; }
    let v = bitcast<f32>(x);
    let t = trunc(v);
    if (code == 3u) {
        return bitcast<u32>(i32(clamp(t, -128.0, 127.0))) & 0xffu;
    }
    if (code == 4u) {
        return u32(clamp(t, 0.0, 255.0));
    }
    var lo: u32;
    var hi: u32;
    if (t >= 9223372036854775807.0) {
        lo = 0xffffffffu;
        hi = 0x7fffffffu;
    } else if (t <= -9223372036854775808.0) {
        lo = 0u;
        hi = 0x80000000u;
    } else if (abs(t) < 2147483648.0) {
        let i = i32(t);
        lo = bitcast<u32>(i);
        hi = select(0u, 0xffffffffu, i < 0);
    } else {
        // |t| ≥ 2^31 is a multiple of 2^8: both parts are exact.
        let h = floor(t / 4294967296.0);
        lo = u32(t - h * 4294967296.0);
        hi = bitcast<u32>(i32(h));
    }
    return select(lo, hi, j == 1u);
}

// The source element of output element `e` (in the bound source buffer), or 0xffffffff when
// `e` lies outside the slot `lo..hi` along `dim` or its source outside the bound buffer's
// elements `src_lo..src_hi` (a tensor past one binding is copied one buffer pair at a time).
// params: 1 rank, 4..9 output shape, 10..15 source strides, 16 source offset, 17 dim, 18 lo,
// 19 hi, 22 src_lo, 23 src_hi.
fn source_of(e: u32) -> u32 {
    let rank = pu(1u);
    var rem = e;
    var off = pu(16u);
    for (var k = 0u; k < rank; k = k + 1u) {
        let d = rank - 1u - k;
        let n = pu(4u + d);
        var c = rem % n;
        rem = rem / n;
        if (d == pu(17u)) {
            if (c < pu(18u) || c >= pu(19u)) { return 0xffffffffu; }
            c = c - pu(18u);
        }
        off = off + c * pu(10u + d);
    }
    if (off < pu(22u) || off >= pu(23u)) { return 0xffffffffu; }
    return off - pu(22u);
}

// One invocation per output word of the bound output buffer, whose first word is word
// `pu(21)` of the whole output. params: 0 words (of this buffer), 2 source code, 3 output
// code, 20 elements (of the whole output), 21 first word. Same codes copy the bits; otherwise
// the value goes through f32 (to any dtype: floats round to nearest even, integers as
// `f32_to_int`). Output elements whose source is elsewhere keep their value.
@compute @workgroup_size(WG)
fn gather(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let wl = linear_id(wg, nwg, lid);
    if (wl >= pu(0u)) { return; }
    let w = wl + pu(21u);
    let sc = pu(2u);
    let dc = pu(3u);
    let raw = sc == dc;
    let ds = esize(dc);
    let n = pu(20u);
    if (ds == 8u) {
        let s = source_of(w / 2u);
        if (s != 0xffffffffu) {
            if (raw) {
                o[wl] = src[2u * s + (w % 2u)];
            } else {
                o[wl] = f32_to_int(load_f32_bits(sc, s), 5u, w % 2u);
            }
        }
        return;
    }
    if (ds == 4u) {
        let s = source_of(w);
        if (s != 0xffffffffu) {
            o[wl] = select(load_f32_bits(sc, s), bits_of(sc, s), raw);
        }
        return;
    }
    let per = 4u / ds;
    var word = o[wl];
    var touched = false;
    for (var j = 0u; j < per; j = j + 1u) {
        let e = w * per + j;
        if (e >= n) { break; }
        let s = source_of(e);
        if (s == 0xffffffffu) { continue; }
        var b: u32;
        if (raw) {
            b = bits_of(sc, s);
        } else {
            let f = load_f32_bits(sc, s);
            if (dc == 1u) {
                b = f32_to_f16(f);
            } else if (dc == 2u) {
                b = f32_to_bf16(f);
            } else {
                b = f32_to_int(f, dc, 0u);
            }
        }
        let sh = j * ds * 8u;
        let mask = ((1u << (ds * 8u)) - 1u) << sh;
        word = (word & ~mask) | (b << sh);
        touched = true;
    }
    if (touched) {
        o[wl] = word;
    }
}

// `x [B, L, C]` (f32 bits) → `[B, L, k·C]`, row t holding x[t − k/2] … x[t + k/2], zeros
// outside. params: 0 total, 1 l, 2 c, 3 k, 4 x offset.
@compute @workgroup_size(WG)
fn unfold(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear_id(wg, nwg, lid);
    if (i >= pu(0u)) { return; }
    let l = pu(1u);
    let c = pu(2u);
    let k = pu(3u);
    let kc = k * c;
    let row = i / kc;
    let rest = i % kc;
    let kk = rest / c;
    let ci = rest % c;
    let bi = row / l;
    let t = row % l;
    let s = t + kk;
    let hk = k / 2u;
    var v = 0u;
    if (s >= hk && s - hk < l) {
        v = src[pu(4u) + (bi * l + s - hk) * c + ci];
    }
    o[i] = v;
}

// Rows of `table [V, D]` (tab; f32, f16 or bf16) for ids (src; i64 words or f32 values)
// → f32 `[.., D]`, for the output elements of the bound output buffer (first element `pu(7)`
// of the whole output) whose table element lies in the bound table buffer's elements
// `pu(8)..pu(9)`; other elements keep their value (an id outside the vocabulary leaves the
// fresh, zeroed row). params: 0 total (of this buffer), 1 d, 2 vocab, 3 ids code (0 f32,
// 5 i64), 4 ids offset, 5 table code, 6 table offset, 7 first element, 8 tab_lo, 9 tab_hi.
@compute @workgroup_size(WG)
fn embedding(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
    let il = linear_id(wg, nwg, lid);
    if (il >= pu(0u)) { return; }
    let i = il + pu(7u);
    let d = pu(1u);
    let r = i / d;
    let col = i % d;
    let vocab = pu(2u);
    var id = 0u;
    var ok = false;
    if (pu(3u) == 5u) {
        let lo = src[2u * (pu(4u) + r)];
        let hi = src[2u * (pu(4u) + r) + 1u];
        id = lo;
        ok = hi == 0u && lo < vocab;
    } else {
        let bits = src[pu(4u) + r];
        let nan = (bits & 0x7fffffffu) > 0x7f800000u;
        let tv = trunc(bitcast<f32>(bits));
        // `x as i64` maps NaN to 0.
        ok = nan || (tv >= 0.0 && tv < f32(vocab));
        id = select(u32(max(tv, 0.0)), 0u, nan);
        ok = ok && id < vocab;
    }
    if (!ok) { return; }
    let e = pu(6u) + id * d + col;
    if (e < pu(8u) || e >= pu(9u)) { return; }
    let el = e - pu(8u);
    let tc = pu(5u);
    var res: u32;
    if (tc == 0u) {
        res = tab[el];
    } else {
        let word = tab[el / 2u];
        let h = (word >> ((el % 2u) * 16u)) & 0xffffu;
        res = select(bitcast<u32>(f16_to_f32(h)), h << 16u, tc == 2u);
    }
    o[il] = res;
}
