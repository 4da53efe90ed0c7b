//! Precision policies: which packed format each weight of a model gets.

use crate::{Format, QuantError, Result};

/// A quantization policy, recorded in packed files (`aria.quant.policy`).
///
/// The per-layer table (a starting point; the rules match layer names of the SA3 DiT and
/// T5Gemma checkpoints by substring):
///
/// | weight | `q8` | `q4` | `q4-mixed` |
/// |---|---|---|---|
/// | cross-attention K/V (`cross_attn.to_kv`): computed once per generation | dense | dense | dense |
/// | `in` not a multiple of 256 (e.g. `to_local_embed.0`, 257 wide) | q8_0 | q8_0 | q8_0 |
/// | attention projections (`attn`, `to_qkv`, `to_q`, `to_out`, `q_proj`…) | q8_0 | q4_k | q8_0 |
/// | FFN output (`ff.ff.2`, `down_proj`, `fc2`) | q8_0 | q4_k | q6_k |
/// | other FFN (`ff.`, `mlp`, `up_proj`, `gate_proj`, `fc1`) | q8_0 | q4_k | q4_k |
/// | everything else (embeddings, conditioning, output projections) | q8_0 | q4_k | q8_0 |
///
/// `q4-mixed` keeps attention at 8 bits and the FFN output at 6 bits, as the sensitive
/// projections. Measured sensitivity on the real-shape random small-music checkpoint
/// (`cargo xtask bench quant --sensitivity`: DiT velocity rel-RMS against f32 at σ = 1 with only
/// that group packed, the rest f32; 2 prompts, 3 s):
///
/// | group | f32 MB | q8_0 | q6_k | q4_k |
/// |---|---|---|---|---|
/// | self-attention `to_qkv` | 252 | 1.34 % | 4.07 % | 16.8 % |
/// | self-attention `to_out` | 84 | 1.12 % | 3.54 % | 14.3 % |
/// | cross-attention `to_q` | 84 | 0.17 % | 0.57 % | 2.85 % |
/// | cross-attention `to_out` | 84 | 0.37 % | 1.19 % | 5.50 % |
/// | FFN in (`ff.ff.0`) | 671 | 1.56 % | 5.18 % | 20.5 % |
/// | FFN out (`ff.ff.2`) | 336 | 1.11 % | 3.61 % | 15.1 % |
/// | embeddings, conditioning, in/out projections | 157 | 1.37 % | 4.67 % | 19.2 % |
///
/// Self-attention and the embeddings are the most sensitive groups per byte (kept at 8 bits); cross-attention
/// barely matters; the FFN input holds most of the bytes, so it takes 4 bits. Whole-model velocity error on the
/// same checkpoint: q8 3.0 %, q4-mixed 21 %, q4 39 % (published figures on trained weights:
/// q8 2.45 %, q4-mixed 9.3 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Every eligible weight in `q8_0`.
    Q8,
    /// Every eligible weight in `q4_k` (`q8_0` where the width does not fit).
    Q4,
    /// `q4_k` FFN, `q6_k` FFN output, `q8_0` attention and the rest.
    Q4Mixed,
}

impl Policy {
    /// Every policy.
    pub const ALL: [Policy; 3] = [Policy::Q8, Policy::Q4, Policy::Q4Mixed];

    /// The name (`q8`, `q4`, `q4-mixed`).
    pub fn name(self) -> &'static str {
        match self {
            Policy::Q8 => "q8",
            Policy::Q4 => "q4",
            Policy::Q4Mixed => "q4-mixed",
        }
    }

    /// Parse a name written by [`Policy::name`].
    pub fn from_name(name: &str) -> Result<Policy> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| QuantError::UnknownFormat {
                tag: name.to_string(),
                known: "policies q8, q4, q4-mixed".into(),
            })
    }

    /// The format for the linear weight `name` of shape `[out, in]`, or `None` to keep it
    /// dense.
    pub fn format_for(self, name: &str, shape: [usize; 2]) -> Option<Format> {
        let has = |keys: &[&str]| keys.iter().any(|k| name.contains(k));
        if has(&["cross_attn.to_kv"]) || shape[0] == 0 || shape[1] == 0 {
            return None;
        }
        let k_quant = |f: Format| {
            if shape[1].is_multiple_of(Format::Q4K.block_elems()) {
                f
            } else {
                Format::Q8_0
            }
        };
        let ffn_out = has(&["ff.ff.2", "down_proj", "fc2"]);
        let ffn = ffn_out || has(&["ff.", "mlp", "up_proj", "gate_proj", "fc1"]);
        Some(match self {
            Policy::Q8 => Format::Q8_0,
            Policy::Q4 => k_quant(Format::Q4K),
            Policy::Q4Mixed if ffn_out => k_quant(Format::Q6K),
            Policy::Q4Mixed if ffn => k_quant(Format::Q4K),
            Policy::Q4Mixed => Format::Q8_0,
        })
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let qkv = "model.model.transformer.layers.0.self_attn.to_qkv.weight";
        let ff0 = "model.model.transformer.layers.0.ff.ff.0.proj.weight";
        let ff2 = "model.model.transformer.layers.0.ff.ff.2.weight";
        let kv = "model.model.transformer.layers.0.cross_attn.to_kv.weight";
        let emb = "model.model.to_local_embed.0.weight";
        assert_eq!(Policy::Q8.format_for(qkv, [3072, 1024]), Some(Format::Q8_0));
        assert_eq!(Policy::Q4.format_for(qkv, [3072, 1024]), Some(Format::Q4K));
        assert_eq!(
            Policy::Q4Mixed.format_for(qkv, [3072, 1024]),
            Some(Format::Q8_0)
        );
        assert_eq!(
            Policy::Q4Mixed.format_for(ff0, [8192, 1024]),
            Some(Format::Q4K)
        );
        assert_eq!(
            Policy::Q4Mixed.format_for(ff2, [1024, 4096]),
            Some(Format::Q6K)
        );
        assert_eq!(Policy::Q4Mixed.format_for(kv, [2048, 1024]), None);
        assert_eq!(Policy::Q4.format_for(emb, [1024, 257]), Some(Format::Q8_0));
        for p in Policy::ALL {
            assert_eq!(Policy::from_name(p.name()).ok(), Some(p));
        }
        assert!(Policy::from_name("q3").is_err());
    }
}
