// The bindings and the weight reader of the weight products (linear.wgsl, conv1d.wgsl, each
// after this piece and declaring its own `Params`): 0 the parameters, 1 x f32, 2 the weights
// as 32-bit words, 3 the bias f32, 4 the output f32. Constant: WDT (0 f32, 1 f16, 2 bf16).

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// Element `i` of the weight buffer as f32.
fn load_w(i: u32) -> f32 {
    if (WDT == 0u) {
        return bitcast<f32>(w[i]);
    }
    let word = w[i >> 1u];
    let hi = (i & 1u) == 1u;
    if (WDT == 1u) {
        let v = unpack2x16float(word);
        return select(v.x, v.y, hi);
    }
    return bitcast<f32>(select(word << 16u, word & 0xffff0000u, hi));
}
