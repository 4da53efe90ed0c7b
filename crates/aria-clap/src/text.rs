//! The text tower: RoBERTa (post-LayerNorm BERT with fairseq position numbering) and its pooler
//! (`tanh(W·h₀ + b)` on the first token), as `transformers`' `ClapTextModel` computes it.

use aria_core::nn::{Bias, Linear};
use aria_core::ops;
use aria_core::{Tensor, WeightLoader};

use crate::layers::{EncoderLayer, LayerNorm};
use crate::{ClapError, Result, TextConfig};

/// What [`TextTower::forward`] returns.
#[derive(Debug, Clone)]
pub struct TextOutput {
    /// The pooled first-token state `[B, hidden]` (what the projection reads).
    pub pooler: Tensor,
    /// The last layer's token states `[B, N, hidden]`.
    pub last_hidden_state: Tensor,
}

/// The RoBERTa text tower of CLAP.
#[derive(Debug)]
pub struct TextTower {
    cfg: TextConfig,
    word: Tensor,
    pos: Tensor,
    token_type0: Tensor,
    ln: LayerNorm,
    layers: Vec<EncoderLayer>,
    pooler: Linear,
}

impl TextTower {
    /// Load from a loader rooted at the checkpoint's `text_model.` prefix (`embeddings.*`,
    /// `encoder.layer.{i}.*`, `pooler.dense.*`).
    pub fn load(vb: &WeightLoader, cfg: &TextConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let e = vb.pp("embeddings");
        if cfg.type_vocab_size == 0 {
            return Err(ClapError::config(
                "text_config",
                "type_vocab_size must be at least 1",
            ));
        }
        let tt = e.get("token_type_embeddings.weight", &[cfg.type_vocab_size, h])?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                EncoderLayer::load(
                    &vb.pp(format!("encoder.layer.{i}")),
                    h,
                    cfg.intermediate_size,
                    cfg.layer_norm_eps as f32,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TextTower {
            word: e.get("word_embeddings.weight", &[cfg.vocab_size, h])?,
            pos: e.get(
                "position_embeddings.weight",
                &[cfg.max_position_embeddings, h],
            )?,
            token_type0: tt.narrow(0, 0, 1)?.contiguous()?.reshape(&[1, 1, h])?,
            ln: LayerNorm::load(&e.pp("LayerNorm"), h, cfg.layer_norm_eps as f32)?,
            layers,
            pooler: Linear::load(&vb.pp("pooler.dense"), h, h, Bias::Yes)?,
            cfg: cfg.clone(),
        })
    }

    /// Pack every linear layer's weight as bf16 panels (see [`crate::Precision::Bf16Dot`]).
    pub fn pack_bf16(&mut self) -> Result<()> {
        for l in &mut self.layers {
            l.pack_bf16()?;
        }
        crate::precision::pack_bf16(&mut self.pooler)
    }

    /// The configuration.
    pub fn config(&self) -> &TextConfig {
        &self.cfg
    }

    /// The longest sequence (special tokens included) the position table allows.
    pub fn max_tokens(&self) -> usize {
        self.cfg.max_position_embeddings - self.cfg.pad_token_id - 1
    }

    /// Run the tower on `ids [B, N]` (right-padded with the padding id) and `mask [B, N]`
    /// (1 = token, 0 = padding), both as row-major slices.
    pub fn forward(&self, ids: &[u32], mask: &[u8], b: usize, n: usize) -> Result<TextOutput> {
        self.forward_traced(ids, mask, b, n, &mut |_, _| Ok(()))
    }

    /// [`TextTower::forward`], handing each boundary (`text.embeddings`, `text.layer{i}`,
    /// `text.last_hidden_state`, `text.pooler`) to `trace` as it is computed.
    pub fn forward_traced(
        &self,
        ids: &[u32],
        mask: &[u8],
        b: usize,
        n: usize,
        trace: &mut dyn FnMut(&str, &Tensor) -> Result<()>,
    ) -> Result<TextOutput> {
        let h = self.cfg.hidden_size;
        if ids.len() != b * n || mask.len() != b * n {
            return Err(ClapError::Shape {
                what: "text ids and mask".into(),
                expected: vec![b, n],
                got: vec![ids.len(), mask.len()],
            });
        }
        if b == 0 || n == 0 {
            return Err(ClapError::invalid(
                "text batch",
                format!("needs at least one token in one sequence, got [{b}, {n}]"),
            ));
        }
        if n > self.max_tokens() {
            return Err(ClapError::invalid(
                "text length",
                format!(
                    "{n} tokens exceed the {} positions of the text tower",
                    self.max_tokens()
                ),
            ));
        }
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(ClapError::invalid(
                "token id",
                format!("{bad} is outside the vocabulary of {}", self.cfg.vocab_size),
            ));
        }
        // fairseq position numbering, as the reference derives it from the ids: tokens that are
        // not the padding id count up from `pad + 1`; padding ids sit at position `pad`.
        let pad = self.cfg.pad_token_id;
        let mut pos = vec![0i64; b * n];
        for r in 0..b {
            let mut count = 0usize;
            for j in 0..n {
                let t = ids[r * n + j] as usize;
                pos[r * n + j] = if t == pad {
                    pad as i64
                } else {
                    count += 1;
                    (count + pad) as i64
                };
            }
        }
        let ids_t = Tensor::from_vec(ids.iter().map(|&t| t as i64).collect(), &[b, n])?;
        let pos_t = Tensor::from_vec(pos, &[b, n])?;
        let mask_t = Tensor::from_vec(mask.iter().map(|&m| f32::from(m)).collect(), &[b, n])?;
        let tok = ops::embedding(&ids_t, &self.word)?;
        let p = ops::embedding(&pos_t, &self.pos)?;
        // The reference's order: (word + token type) + position.
        let x = ops::add(&ops::add(&tok, &self.token_type0)?, &p)?;
        let mut x = self.ln.forward(&x)?;
        trace("text.embeddings", &x)?;
        for (i, l) in self.layers.iter().enumerate() {
            x = l.forward(&x, &mask_t, self.cfg.num_attention_heads)?;
            trace(&format!("text.layer{i}"), &x)?;
        }
        trace("text.last_hidden_state", &x)?;
        let first = x.narrow(1, 0, 1)?.contiguous()?.reshape(&[b, h])?;
        let pooler = ops::tanh(&self.pooler.forward(&first)?)?;
        trace("text.pooler", &pooler)?;
        Ok(TextOutput {
            pooler,
            last_hidden_state: x,
        })
    }
}
