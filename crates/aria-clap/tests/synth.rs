//! Random-weight checkpoints: the parameter counts of the releases' configurations (as the
//! reference's `ClapModel` counts them: every parameter and BatchNorm statistic, without the
//! index buffers), and a written checkpoint loads and embeds.

use aria_clap::synth::{parameter_count, write_random, Preset};
use aria_clap::Clap;
use aria_testing::tempdir::TempDir;

#[test]
fn parameter_counts_match_the_releases() {
    // ClapModel(ClapConfig(...)).state_dict() of the reference, less num_batches_tracked,
    // position_ids, token_type_ids and relative_position_index.
    for (p, n) in [
        (Preset::HtsatUnfused, 153_493_018),
        (Preset::HtsatFused, 153_508_138),
        (Preset::LargerMusic, 193_914_010),
    ] {
        assert_eq!(parameter_count(&p.config()).expect("count"), n, "{p:?}");
    }
}

#[test]
fn a_written_checkpoint_loads_and_embeds() {
    let dir = TempDir::new("clap-synth");
    for fused in [false, true] {
        let mut cfg = Preset::Tiny.config();
        cfg.audio_config.enable_fusion = fused;
        cfg.audio_config.fusion_type = fused.then(|| "aff_2d".to_string());
        let d = dir.path().join(format!("fused-{fused}"));
        write_random(&d, &cfg, 1, None).expect("write");
        let clap = Clap::load(&d).expect("load");
        assert_eq!(clap.config(), &cfg);
        let noise: Vec<f32> = (0..44_100 * 3)
            .map(|i| (i as f32 * 0.37).sin() * 0.3)
            .collect();
        let e = clap.embed_audio(&noise, 1, 44_100).expect("embed");
        assert_eq!(e.len(), cfg.projection_dim);
        let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "unit vector, got norm {norm}");
        let t = clap
            .embed_token_ids(&[0, 5, 9, 2], &[1, 1, 1, 1], 1, 4)
            .expect("text");
        assert!(t[0].iter().all(|x| x.is_finite()));
    }
}
