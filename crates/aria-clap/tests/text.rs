//! The text tower and its projection against the reference's recorded boundaries (random
//! weights at the tiny fixture shapes; every boundary within 1e-5 relative of the float64 run).

mod support;

use aria_clap::projection::{l2_normalize_rows, Projection};
use aria_clap::text::TextTower;
use aria_clap::ClapConfig;
use aria_core::WeightLoader;

const TOL: f64 = 1e-5;

fn run(folder: &str) {
    let Some(dir) = support::folder(folder) else {
        return;
    };
    let cfg = ClapConfig::from_file(dir.join("config.json")).expect("config");
    let vb = WeightLoader::open(&[dir.join("model.safetensors")]).expect("weights");
    let tower = TextTower::load(&vb.pp("text_model"), &cfg.text_config).expect("text tower");
    let proj = Projection::load(
        &vb.pp("text_projection"),
        cfg.text_config.hidden_size,
        cfg.projection_dim,
    )
    .expect("projection");
    let fx = support::Tensors::open(&dir.join("text.safetensors"));
    let (shape, ids) = fx.get("text.input_ids");
    let (b, n) = (shape[0], shape[1]);
    let ids: Vec<u32> = ids.iter().map(|&v| v as u32).collect();
    let mask: Vec<u8> = fx
        .get("text.attention_mask")
        .1
        .iter()
        .map(|&v| v as u8)
        .collect();
    let mut worst = 0f64;
    let out = tower
        .forward_traced(&ids, &mask, b, n, &mut |name, t| {
            if fx.has(name) {
                let v = t.to_vec_f32()?;
                worst = worst.max(support::check(name, t.shape(), &v, fx.reference(name), TOL));
            }
            Ok(())
        })
        .expect("forward");
    let p = proj.forward(&out.pooler).expect("projection");
    support::check(
        "text.proj",
        p.shape(),
        &p.to_vec_f32().expect("proj"),
        fx.reference("text.proj"),
        TOL,
    );
    let e: Vec<f32> = l2_normalize_rows(&p).expect("normalize").concat();
    support::check(
        "text.embeds",
        p.shape(),
        &e,
        fx.reference("text.embeds"),
        TOL,
    );
    assert!(worst.is_finite());
}

#[test]
fn text_tower_matches_reference_unfused() {
    run("clap-tiny-unfused");
}

#[test]
fn text_tower_matches_reference_fused() {
    run("clap-tiny-fused");
}
