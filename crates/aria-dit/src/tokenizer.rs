//! The prompt tokenizer: the `tokenizer.json` bundled in the checkpoint's `t5gemma-b-b-ul2/`
//! folder (the Gemma SentencePiece-BPE vocabulary of 256 000 entries for released models),
//! applied as the reference does with `tokenizer(texts, truncation=True, max_length=L,
//! padding="max_length")`:
//!
//! * special tokens are added as the file's post-processor says (`<bos>` for Gemma, no `<eos>`),
//! * the ids are truncated to `max_length` by the tokenizer itself (so that special tokens the
//!   post-processor appends would survive truncation exactly as in the reference),
//! * every row is right-padded to `max_length` with the `<pad>` id (0) and the mask is 1 for real
//!   ids, 0 for padding.

use std::path::{Path, PathBuf};

use aria_core::{Device, Tensor};
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::{DitError, Result};

/// A batch of tokenized prompts: `ids` and `mask`, both `[batch, len]` row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBatch {
    /// Token ids, right-padded with the pad id.
    pub ids: Vec<i64>,
    /// 1 for real tokens, 0 for padding.
    pub mask: Vec<u8>,
    /// Number of prompts.
    pub batch: usize,
    /// Padded length (`max_length`).
    pub len: usize,
}

impl TokenBatch {
    /// Build a batch from explicit ids and mask (`[batch, len]` each), e.g. pre-tokenized inputs.
    pub fn new(ids: Vec<i64>, mask: Vec<u8>, batch: usize, len: usize) -> Result<Self> {
        if ids.len() != batch * len || mask.len() != batch * len {
            return Err(DitError::Input {
                what: "token batch".into(),
                reason: format!(
                    "{} ids and {} mask entries for a [{batch}, {len}] batch",
                    ids.len(),
                    mask.len()
                ),
            });
        }
        Ok(TokenBatch {
            ids,
            mask,
            batch,
            len,
        })
    }

    /// Build a batch from `ids` and `mask` tensors of shape `[batch, len]` (any integer or float
    /// dtype; a non-zero mask entry is a real token).
    pub fn from_tensors(ids: &Tensor, mask: &Tensor) -> Result<Self> {
        let s = ids.shape();
        if s.len() != 2 || mask.shape() != s {
            return Err(DitError::Input {
                what: "token batch".into(),
                reason: format!(
                    "ids {:?} and mask {:?} must both be [batch, len]",
                    s,
                    mask.shape()
                ),
            });
        }
        let idv: Vec<i64> = match ids.dtype() {
            aria_core::DType::I64 => ids.to_vec::<i64>()?,
            aria_core::DType::U8 => ids.to_vec::<u8>()?.into_iter().map(i64::from).collect(),
            aria_core::DType::I8 => ids.to_vec::<i8>()?.into_iter().map(i64::from).collect(),
            _ => ids.to_vec_f32()?.into_iter().map(|x| x as i64).collect(),
        };
        let mv: Vec<u8> = match mask.dtype() {
            aria_core::DType::I64 => mask
                .to_vec::<i64>()?
                .into_iter()
                .map(|x| u8::from(x != 0))
                .collect(),
            aria_core::DType::U8 => mask
                .to_vec::<u8>()?
                .into_iter()
                .map(|x| u8::from(x != 0))
                .collect(),
            aria_core::DType::I8 => mask
                .to_vec::<i8>()?
                .into_iter()
                .map(|x| u8::from(x != 0))
                .collect(),
            _ => mask
                .to_vec_f32()?
                .into_iter()
                .map(|x| u8::from(x != 0.0))
                .collect(),
        };
        Self::new(idv, mv, s[0], s[1])
    }

    /// The ids of prompt `b` (padded).
    pub fn row_ids(&self, b: usize) -> &[i64] {
        &self.ids[b * self.len..(b + 1) * self.len]
    }

    /// The mask of prompt `b`.
    pub fn row_mask(&self, b: usize) -> &[u8] {
        &self.mask[b * self.len..(b + 1) * self.len]
    }

    /// The ids as an `I64` tensor `[batch, len]`.
    pub fn ids_tensor(&self) -> Result<Tensor> {
        Ok(Tensor::from_slice(&self.ids, &[self.batch, self.len])?)
    }

    /// The mask as a `U8` tensor `[batch, len]`.
    pub fn mask_tensor(&self) -> Result<Tensor> {
        Ok(Tensor::from_slice(&self.mask, &[self.batch, self.len])?)
    }

    /// The first `len` positions of every prompt (`len` at most the padded length).
    pub fn prefix(&self, len: usize) -> Result<TokenBatch> {
        if len > self.len {
            return Err(DitError::Input {
                what: "token batch".into(),
                reason: format!(
                    "a prefix of {len} positions of a [{}, {}] batch",
                    self.batch, self.len
                ),
            });
        }
        fn rows<T: Copy>(v: &[T], (batch, full, len): (usize, usize, usize)) -> Vec<T> {
            v.chunks_exact(full.max(1))
                .take(batch)
                .flat_map(|r| r[..len].iter().copied())
                .collect()
        }
        let dims = (self.batch, self.len, len);
        TokenBatch::new(
            rows(&self.ids, dims),
            rows(&self.mask, dims),
            self.batch,
            len,
        )
    }

    /// The ids and the mask ([`Self::ids_tensor`], [`Self::mask_tensor`]) on `device` (one
    /// upload each; none on the CPU).
    pub fn to_device(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        Ok((
            device.put(&self.ids_tensor()?)?,
            device.put(&self.mask_tensor()?)?,
        ))
    }
}

/// The prompt tokenizer (a `tokenizer.json` plus the padded length).
pub struct PromptTokenizer {
    inner: Tokenizer,
    path: PathBuf,
    max_length: usize,
    pad_id: u32,
}

impl std::fmt::Debug for PromptTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptTokenizer")
            .field("path", &self.path)
            .field("max_length", &self.max_length)
            .field("pad_id", &self.pad_id)
            .finish()
    }
}

impl PromptTokenizer {
    /// Load `tokenizer.json` and pad/truncate every prompt to `max_length` ids.
    ///
    /// The pad id is the id of `<pad>` in the file (0 for Gemma), or 0 if it has none.
    pub fn from_file(path: impl AsRef<Path>, max_length: usize) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let err = |reason: String| DitError::Tokenizer {
            path: path.clone(),
            reason,
        };
        if max_length == 0 {
            return Err(err("max_length must be at least 1".into()));
        }
        if !path.is_file() {
            return Err(err("file not found".into()));
        }
        let mut inner = Tokenizer::from_file(&path).map_err(|e| err(e.to_string()))?;
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| err(e.to_string()))?;
        let pad_id = inner.token_to_id("<pad>").unwrap_or(0);
        Ok(PromptTokenizer {
            inner,
            path,
            max_length,
            pad_id,
        })
    }

    /// The `tokenizer.json` this was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The padded length of every row.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The id used for padding.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Number of ids the tokenizer can produce (vocabulary plus added tokens).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The encoding of one text with special tokens (truncated; the rest in its overflow).
    fn encoding(&self, text: &str) -> Result<tokenizers::Encoding> {
        self.inner
            .encode_fast(text, true)
            .map_err(|e| DitError::Tokenizer {
                path: self.path.clone(),
                reason: format!("encoding {text:?}: {e}"),
            })
    }

    /// The ids of one text with special tokens, truncated to `max_length`, not padded.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.encoding(text)?;
        let mut ids = enc.get_ids().to_vec();
        ids.truncate(self.max_length);
        Ok(ids)
    }

    /// How many ids `text` makes with special tokens before truncation to `max_length` (more
    /// than [`Self::max_length`]: the rest is cut, as the reference cuts it).
    pub fn length(&self, text: &str) -> Result<usize> {
        let enc = self.encoding(text)?;
        Ok(enc.get_ids().len()
            + enc
                .get_overflowing()
                .iter()
                .map(|o| o.get_ids().len())
                .sum::<usize>())
    }

    /// Tokenize a batch: `[batch, max_length]` ids right-padded with the pad id, and the mask.
    pub fn encode_batch(&self, texts: &[&str]) -> Result<TokenBatch> {
        let len = self.max_length;
        let mut ids = vec![i64::from(self.pad_id); texts.len() * len];
        let mut mask = vec![0u8; texts.len() * len];
        for (b, text) in texts.iter().enumerate() {
            let row = self.encode(text)?;
            for (j, &id) in row.iter().enumerate() {
                ids[b * len + j] = i64::from(id);
                mask[b * len + j] = 1;
            }
        }
        TokenBatch::new(ids, mask, texts.len(), len)
    }
}
