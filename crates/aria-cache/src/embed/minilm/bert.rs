//! The BERT encoder of all-MiniLM-L6-v2 (post-LayerNorm, absolute positions, exact GELU).

use aria_clap::layers::{EncoderLayer, LayerNorm};
use aria_core::ops;
use aria_core::{Tensor, WeightLoader};

use crate::{CacheError, Result};

/// The model's hyper-parameters (its `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BertConfig {
    /// Vocabulary size.
    pub vocab: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width.
    pub intermediate: usize,
    /// Learned positions.
    pub max_positions: usize,
}

impl BertConfig {
    /// all-MiniLM-L6-v2: 30 522 tokens, 384 wide, 6 layers, 12 heads, FFN 1 536, 512 positions.
    pub const MINILM_L6: BertConfig = BertConfig {
        vocab: 30_522,
        hidden: 384,
        layers: 6,
        heads: 12,
        intermediate: 1_536,
        max_positions: 512,
    };
}

/// LayerNorm epsilon of the checkpoint.
const LN_EPS: f32 = 1e-12;

/// The BERT encoder: token ids to contextual token states.
#[derive(Debug)]
pub struct Bert {
    cfg: BertConfig,
    word: Tensor,
    pos: Tensor,
    token_type0: Tensor,
    ln: LayerNorm,
    layers: Vec<EncoderLayer>,
}

impl Bert {
    /// Load from a loader rooted at the checkpoint (`embeddings.*`, `encoder.layer.{i}.*`).
    pub fn load(vb: &WeightLoader, cfg: BertConfig) -> Result<Self> {
        if cfg.heads == 0 || !cfg.hidden.is_multiple_of(cfg.heads) {
            return Err(CacheError::Invalid {
                name: "BertConfig".into(),
                reason: format!(
                    "hidden {} is not a multiple of heads {}",
                    cfg.hidden, cfg.heads
                ),
            });
        }
        let e = vb.pp("embeddings");
        let h = cfg.hidden;
        let tt = e.get("token_type_embeddings.weight", &[2, h])?;
        let layers = (0..cfg.layers)
            .map(|i| {
                EncoderLayer::load(
                    &vb.pp(format!("encoder.layer.{i}")),
                    cfg.hidden,
                    cfg.intermediate,
                    LN_EPS,
                )
                .map_err(CacheError::from)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            word: e.get("word_embeddings.weight", &[cfg.vocab, h])?,
            pos: e.get("position_embeddings.weight", &[cfg.max_positions, h])?,
            token_type0: tt.narrow(0, 0, 1)?.contiguous()?,
            ln: LayerNorm::load(&e.pp("LayerNorm"), h, LN_EPS)?,
            layers,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// Mean-pooled token states, one `hidden`-vector per sequence (not normalized).
    ///
    /// The sequences are right-padded to the longest; padded keys are excluded from attention and
    /// padded positions from the mean, so each result equals that of the sequence alone.
    pub fn mean_pooled(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let b = seqs.len();
        let n = seqs.iter().map(Vec::len).max().unwrap_or(0);
        if b == 0 || n == 0 {
            return Ok(vec![Vec::new(); b]);
        }
        if n > self.cfg.max_positions {
            return Err(CacheError::Invalid {
                name: "token sequence".into(),
                reason: format!("{n} tokens exceed the {} positions", self.cfg.max_positions),
            });
        }
        let h = self.cfg.hidden;
        let mut ids = vec![0i64; b * n];
        let mut mask = vec![0f32; b * n];
        for (i, s) in seqs.iter().enumerate() {
            for (j, &t) in s.iter().enumerate() {
                ids[i * n + j] = t as i64;
                mask[i * n + j] = 1.0;
            }
        }
        let ids = Tensor::from_vec(ids, &[b, n])?;
        let mask = Tensor::from_vec(mask, &[b, n])?;
        let tok = ops::embedding(&ids, &self.word)?;
        let pos = self
            .pos
            .narrow(0, 0, n)?
            .contiguous()?
            .reshape(&[1, n, h])?;
        // The reference's order: (word + token type) + position.
        let x = ops::add(
            &ops::add(&tok, &self.token_type0.reshape(&[1, 1, h])?)?,
            &pos,
        )?;
        let mut x = self.ln.forward(&x)?;
        for l in &self.layers {
            x = l.forward(&x, &mask, self.cfg.heads)?;
        }
        let xs = x.to_vec::<f32>()?;
        Ok(seqs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut acc = vec![0f32; h];
                for j in 0..s.len() {
                    let row = &xs[(i * n + j) * h..(i * n + j + 1) * h];
                    acc.iter_mut().zip(row).for_each(|(a, r)| *a += r);
                }
                let inv = 1.0 / s.len().max(1) as f32;
                acc.iter_mut().for_each(|a| *a *= inv);
                acc
            })
            .collect())
    }
}
