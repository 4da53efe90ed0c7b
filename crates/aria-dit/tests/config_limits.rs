//! `model_config.json` sizes: zero or absurd widths, depths and lengths are refused with the
//! key named (they would otherwise reach allocations, products and divisions), and every
//! released configuration stays accepted.

use std::path::Path;

use aria_dit::config::ModelConfig;
use serde_json::{json, Value};

fn parse(v: Value) -> Result<ModelConfig, String> {
    ModelConfig::from_value(v, Path::new("model_config.json"), Path::new("."))
        .map_err(|e| e.to_string())
}

fn small() -> Value {
    ModelConfig::preset_json("small-music").expect("preset")
}

#[test]
fn released_configurations_pass() {
    for name in ModelConfig::PRESETS {
        let v = ModelConfig::preset_json(name).expect("preset");
        parse(v).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn absurd_sizes_are_refused_with_their_key() {
    let cases: [(&str, Value); 9] = [
        (
            "/model/diffusion/config/embed_dim",
            json!(1_000_000_000_000u64),
        ),
        ("/model/diffusion/config/depth", json!(1_000_000_000_000u64)),
        ("/model/diffusion/config/depth", json!(0)),
        ("/model/diffusion/config/patch_size", json!(0)),
        ("/model/diffusion/config/timestep_features_dim", json!(0)),
        (
            "/model/diffusion/config/num_memory_tokens",
            json!(1u64 << 40),
        ),
        ("/model/diffusion/config/ff_kwargs", json!({ "mult": 0 })),
        ("/sample_size", json!(0)),
        ("/sample_rate", json!(0)),
    ];
    for (ptr, val) in cases {
        let mut v = small();
        *v.pointer_mut(ptr).expect(ptr) = val.clone();
        let e = parse(v)
            .err()
            .unwrap_or_else(|| panic!("{ptr} = {val} accepted"));
        let key = ptr.rsplit('/').next().expect("key");
        let key = if key == "ff_kwargs" { "mult" } else { key };
        assert!(e.contains(key), "{ptr} = {val}: {e}");
    }
}

#[test]
fn io_channels_of_zero_is_refused() {
    let mut v = small();
    v["model"]["io_channels"] = json!(0);
    v["model"]["diffusion"]["config"]["io_channels"] = json!(0);
    let e = parse(v).expect_err("zero latent channels accepted");
    assert!(e.contains("io_channels"), "{e}");
}

#[test]
fn overflowing_conditioning_width_is_an_error() {
    // cond_dim × global ids used to overflow before any size was checked.
    let mut v = small();
    let huge = json!(1u64 << 63);
    v["model"]["conditioning"]["cond_dim"] = huge.clone();
    v["model"]["diffusion"]["config"]["cond_token_dim"] = huge;
    let ids = v["model"]["diffusion"]["global_cond_ids"].clone();
    let ids = ids.as_array().expect("ids");
    let doubled: Vec<Value> = ids.iter().chain(ids).cloned().collect();
    v["model"]["diffusion"]["global_cond_ids"] = json!(doubled);
    let e = parse(v).expect_err("a 2^63-wide conditioning accepted");
    assert!(e.contains("cond_dim"), "{e}");
}

#[test]
fn prompt_length_and_number_ranges_are_bounded() {
    let mut v = small();
    let configs = v["model"]["conditioning"]["configs"]
        .as_array_mut()
        .expect("configs");
    let t5 = configs
        .iter_mut()
        .find(|c| c["type"] == "t5gemma")
        .expect("a t5gemma conditioner");
    t5["config"]["max_length"] = json!(1_000_000_000_000u64);
    let e = parse(v).expect_err("a 10^12-token prompt accepted");
    assert!(e.contains("max_length"), "{e}");

    let mut v = small();
    let configs = v["model"]["conditioning"]["configs"]
        .as_array_mut()
        .expect("configs");
    let n = configs
        .iter_mut()
        .find(|c| c["type"] == "number")
        .expect("a number conditioner");
    n["config"]["min_val"] = json!(-3e38);
    n["config"]["max_val"] = json!(3e38);
    let e = parse(v).expect_err("an infinite number range accepted");
    assert!(e.contains("max_val"), "{e}");
}
