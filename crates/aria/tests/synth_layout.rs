//! The random-checkpoint layouts reproduce the reference fixtures' tensor names and shapes, and
//! the stand-in tokenizer produces the fixtures' token ids.
#![allow(clippy::unwrap_used)]

use aria::synth::{sa3_layout, stand_in_tokenizer, t5_layout};
use aria_core::WeightLoader;
use aria_testing::fixtures::fixture;

fn names_and_shapes(path: &std::path::Path) -> Vec<(String, Vec<usize>)> {
    let w = WeightLoader::open(&[path]).unwrap();
    w.names()
        .into_iter()
        .map(|n| {
            let shape = w.info(&n).unwrap().1.shape.clone();
            (n, shape)
        })
        .collect()
}

#[test]
fn layouts_match_the_fixture_checkpoints() {
    for folder in ["sa3-tiny", "sa3-tiny-medium"] {
        let Some(dir) = fixture(folder) else { return };
        let cfg = aria_core::config::read_json(dir.join("model_config.json")).unwrap();
        let ours: Vec<(String, Vec<usize>)> = sa3_layout(&cfg)
            .unwrap()
            .into_iter()
            .map(|s| (s.name, s.shape))
            .collect();
        assert_eq!(
            ours,
            names_and_shapes(&dir.join("model.safetensors")),
            "{folder}"
        );
        let t5 = dir.join("t5gemma-b-b-ul2");
        let tcfg = aria_core::config::read_json(t5.join("config.json")).unwrap();
        let ours: Vec<(String, Vec<usize>)> = t5_layout(&tcfg)
            .unwrap()
            .into_iter()
            .map(|s| (s.name, s.shape))
            .collect();
        assert_eq!(
            ours,
            names_and_shapes(&t5.join("model.safetensors")),
            "{folder} text encoder"
        );
    }
}

#[test]
fn stand_in_tokenizer_gives_the_fixture_ids() {
    let Some(text) = fixture("sa3-tiny/text.safetensors") else {
        return;
    };
    let dir = aria_testing::TempDir::new("standin");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&stand_in_tokenizer()).unwrap()).unwrap();
    let tok = aria_dit::tokenizer::PromptTokenizer::from_file(&path, 16).unwrap();
    let batch = tok
        .encode_batch(&["lofi house loop", "Amen break 174 BPM, dusty vinyl drums"])
        .unwrap();
    let w = WeightLoader::open(&[text]).unwrap();
    let ids = w.get_any("input_ids").unwrap().to_vec::<i64>().unwrap();
    let mask = w.get_any("attention_mask").unwrap().to_vec_f32().unwrap();
    assert_eq!(batch.ids_tensor().unwrap().to_vec::<i64>().unwrap(), ids);
    assert_eq!(batch.mask_tensor().unwrap().to_vec_f32().unwrap(), mask);
}
