//! The string-valued settings of `model_config.json`, parsed once into enums.

use serde::Deserialize;

/// `model.diffusion.diffusion_objective`: what the model predicts and which sampler the
/// reference uses by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Objective {
    /// `rf_denoiser`: post-trained models (ping-pong sampler).
    #[serde(rename = "rf_denoiser")]
    RfDenoiser,
    /// `rectified_flow`: base models (Euler sampler).
    #[serde(rename = "rectified_flow")]
    RectifiedFlow,
}

impl Objective {
    /// The values accepted in `model_config.json`.
    pub const ALLOWED: &'static [&'static str] = &["rf_denoiser", "rectified_flow"];

    /// The name as written in `model_config.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Objective::RfDenoiser => "rf_denoiser",
            Objective::RectifiedFlow => "rectified_flow",
        }
    }

    /// Parse a config value (`None` for anything else than [`Objective::ALLOWED`]).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "rf_denoiser" => Some(Objective::RfDenoiser),
            "rectified_flow" => Some(Objective::RectifiedFlow),
            _ => None,
        }
    }
}

impl PartialEq<&str> for Objective {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for Objective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `model.diffusion.config.global_cond_type`: how the global condition enters the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum GlobalCondType {
    /// `adaLN`: per-block scale, shift and gate from the global embedding (SA3; the only one
    /// supported).
    #[default]
    #[serde(rename = "adaLN")]
    AdaLn,
}

impl GlobalCondType {
    /// The values accepted in `model_config.json`.
    pub const ALLOWED: &'static [&'static str] = &["adaLN"];
}

/// `model.diffusion.config.attn_kwargs.qk_norm`: normalisation of query and key heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QkNorm {
    /// No QK-norm (`"none"`, `null` or absent: the reference's default).
    #[default]
    None,
    /// RMSNorm of every head vector with learned gains `q_norm.gamma`, `k_norm.gamma` (SA3).
    Rms,
}

impl QkNorm {
    /// The values accepted in `model_config.json` (or `null`).
    pub const ALLOWED: &'static [&'static str] = &["rms", "none"];

    /// Parse a config value (`None` for anything else than [`QkNorm::ALLOWED`]).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "rms" => Some(QkNorm::Rms),
            "none" => Some(QkNorm::None),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for QkNorm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(QkNorm::None),
            Some(s) => QkNorm::parse(&s).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "qk_norm `{s}` is not supported (allowed: {})",
                    QkNorm::ALLOWED.join(", ")
                ))
            }),
        }
    }
}
