//! Conditioning rows that are equal bit for bit, projected once ([`aria_core::ops::distinct_rows`]:
//! found on the CPU; a device backend chooses whether it looks).
//!
//! Everything [`super::Dit::prepare`] computes from the context tokens and the local condition
//! is row-wise (linear layers, SiLU, per-head norms), so rows equal bit for bit give equal
//! results. They are common: the text conditioner replaces every position after the prompt's
//! last token with the one learned padding embedding (most of the 256 positions for a typical
//! prompt, all of them for an empty negative prompt), and the local condition of text-to-audio
//! is all zeros (every latent position the same row). Projecting only the distinct rows and
//! copying the results out gives the same bits as projecting every row: each output row of a CPU
//! matrix product is the same FMA chain whatever the other rows and wherever the row sits
//! (`aria_core`'s product is bit-identical for any row blocking and thread count; tested below
//! on the fixture models against projecting every row).

pub(crate) use aria_core::ops::DistinctRows as UniqueRows;

#[cfg(test)]
mod tests {
    use crate::config::ModelConfig;
    use crate::dit::{Dit, DitConditioning, DitContext};
    use aria_core::WeightLoader;
    use aria_core::{DType, Tensor};
    use aria_testing::fixtures::{fixture, fixture_tensors};

    fn bits(t: &Tensor) -> Vec<u32> {
        let v = t.to_vec_f32().expect("f32");
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn same_context(a: &DitContext, b: &DitContext) {
        assert_eq!(a.cross.len(), b.cross.len());
        for (l, (x, y)) in a.cross.iter().zip(&b.cross).enumerate() {
            let (x, y) = (x.parts(), y.parts());
            assert_eq!(
                x.len(),
                y.len(),
                "layer {l}: differential keys on one side only"
            );
            for (p, q) in x.iter().zip(&y) {
                assert_eq!(p.shape(), q.shape(), "layer {l}");
                assert!(bits(p) == bits(q), "layer {l}: keys or values differ");
            }
        }
        let (Some((ta, la)), Some((tb, lb))) = (&a.local, &b.local) else {
            panic!("both contexts have local embeddings");
        };
        assert_eq!(ta, tb);
        for (l, (x, y)) in la.iter().zip(lb).enumerate() {
            assert_eq!(x.shape(), y.shape(), "layer {l} local");
            assert!(bits(x) == bits(y), "layer {l}: local embeddings differ");
        }
        assert!(bits(&a.global) == bits(&b.global));
    }

    /// Projecting the distinct context and local rows once gives every key, value and local
    /// embedding of every layer bit for bit as projecting each row, on the standard and the
    /// differential (medium) structure, with the official conditioner's padded context and
    /// zero local condition and with crafted repeats (across the batch too).
    #[test]
    fn shared_rows_give_the_same_context() {
        for folder in ["sa3-tiny", "sa3-tiny-medium"] {
            let (Some(cfg), Some(model), Some(w)) = (
                fixture(&format!("{folder}/model_config.json")),
                fixture(&format!("{folder}/model.safetensors")),
                fixture_tensors(&format!("{folder}/sampler.safetensors")),
            ) else {
                return;
            };
            let w = w.expect("sampler fixture");
            let cfg = ModelConfig::from_file(cfg).expect("config");
            let loader = WeightLoader::open_checkpoint(model).expect("checkpoint");
            let dit =
                Dit::load(&cfg.model.diffusion.config, &loader.pp("model.model")).expect("dit");
            let get = |n: &str| w.get_any(n).expect(n).to_dtype(DType::F32).expect("f32");
            let cross = get("in.sampler.cond.cross_attn_cond");
            let global = get("in.sampler.cond.global_cond");
            let local = get("in.sampler.cond.local_add_cond");
            let lt = local.transpose(1, 2).expect("t").contiguous().expect("c");
            assert!(
                aria_core::ops::distinct_rows(&lt).expect("of").is_some(),
                "{folder}: the fixture's local condition repeats rows"
            );
            // Crafted: a batch of two whose second half repeats the first's rows, and a run of
            // one row in the first.
            let s = cross.shape().to_vec();
            let (n, d) = (s[1], s[2]);
            let mut v = cross.to_vec_f32().expect("v")[..n * d].to_vec();
            for r in n / 2..n {
                let src = v[d..2 * d].to_vec();
                v[r * d..(r + 1) * d].copy_from_slice(&src);
            }
            let one = v.clone();
            v.extend_from_slice(&one);
            let crafted = Tensor::from_vec(v, &[2, n, d]).expect("crafted");
            let g2 = Tensor::cat(&[&global, &global], 0).expect("g2");
            let l2 = Tensor::cat(&[&local, &local], 0).expect("l2");
            assert!(aria_core::ops::distinct_rows(&crafted)
                .expect("of")
                .is_some());
            for (c, g, l) in [(&cross, &global, &local), (&crafted, &g2, &l2)] {
                let cond = DitConditioning {
                    cross_attn_cond: c,
                    global_cond: g,
                    local_add_cond: Some(l),
                };
                let shared = dit.prepare_rows(&cond, None, true).expect("shared");
                let each = dit.prepare_rows(&cond, None, false).expect("each");
                same_context(&shared, &each);
            }
        }
    }
}
