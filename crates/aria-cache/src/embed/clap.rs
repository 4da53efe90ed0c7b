//! CLAP as the cache's embedder: entries are indexed by the CLAP embedding of their **audio**,
//! so the selector's `s_pos` is the similarity of a candidate's audio to the prompt and `s_neg`
//! its similarity to the negative prompt (SoundWeaver's eq. 1–2), and segment embeddings of the
//! pyramid index are audio embeddings too. MiniLM (text only) stays the fallback when no CLAP
//! files are given.

use std::path::Path;

use aria_clap::Clap;

use super::Embedder;
use crate::Result;

/// The embedder over a loaded [`Clap`] model.
#[derive(Debug)]
pub struct ClapEmbedder {
    clap: Clap,
    name: String,
}

impl ClapEmbedder {
    /// Wrap a loaded model (it needs its tokenizer: prompts are embedded as text).
    pub fn new(clap: Clap) -> Result<Self> {
        if clap.tokenizer().is_none() {
            return Err(crate::CacheError::Model {
                what: format!("CLAP {}", clap.dir().display()),
                reason: "no tokenizer files (tokenizer.json, or vocab.json + merges.txt): the \
                         cache embeds prompts as text"
                    .into(),
            });
        }
        // The name is stored with every entry: vectors of different checkpoints never mix.
        let a = &clap.config().audio_config;
        let name = format!(
            "clap-{}x{}-{}-d{}",
            a.patch_embeds_hidden_size,
            a.depths
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(""),
            if a.enable_fusion { "fused" } else { "unfused" },
            clap.dim()
        );
        Ok(ClapEmbedder { clap, name })
    }

    /// Load a checkpoint folder (see [`Clap::load`]).
    pub fn load(dir: &Path) -> Result<Self> {
        Self::new(Clap::load(dir)?)
    }

    /// The checkpoint `ARIA_CLAP` names (a folder or a repository id in the Hugging Face cache),
    /// or `None` when the variable is unset: the embedder the program and the server prefer.
    pub fn from_env() -> Result<Option<Self>> {
        if std::env::var_os(aria_clap::discover::ENV).is_none() {
            return Ok(None);
        }
        let dir = aria_clap::discover::find(None)?;
        Self::load(&dir).map(Some)
    }

    /// The model.
    pub fn model(&self) -> &Clap {
        &self.clap
    }
}

impl Embedder for ClapEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dim(&self) -> usize {
        self.clap.dim()
    }

    fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(self.clap.embed_texts(texts)?)
    }

    fn embed_audio(
        &self,
        samples: &[f32],
        channels: usize,
        sample_rate: u32,
    ) -> Result<Option<Vec<f32>>> {
        Ok(Some(self.clap.embed_audio(
            samples,
            channels,
            sample_rate,
        )?))
    }
}
