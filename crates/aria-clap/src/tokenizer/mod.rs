//! The RoBERTa tokenizer of CLAP's text tower: GPT-2's byte-level BPE with RoBERTa's special
//! tokens, as `transformers`' `RobertaTokenizer` / `RobertaTokenizerFast` compute it.
//!
//! A text becomes ids in four steps, each as the reference does it:
//!
//! 1. the added tokens (`<s>`, `</s>`, `<pad>`, `<unk>`, `<mask>`, or those a `tokenizer.json`
//!    declares) are found in the raw text, leftmost and longest first, and kept whole; `<mask>`
//!    takes the whitespace before it (its `lstrip`), so `"a <mask>"` is `a`, `<mask>`;
//! 2. the text between them is cut into pieces by GPT-2's pattern
//!    `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
//! 3. every byte of a piece becomes one symbol of GPT-2's byte-to-unicode alphabet, and the
//!    symbols are merged by merge rank (byte-pair encoding);
//! 4. `<s>` and `</s>` enclose the result.
//!
//! Truncation is `transformers`' `truncation=True, max_length=N`: the first `N − 2` tokens of
//! the text, then `</s>`. `ClapProcessor` passes the caller's tokenizer arguments through and
//! sets none itself (no padding, no truncation; the checkpoints' `model_max_length` is 512);
//! LAION's CLAP pipeline tokenizes with `padding="max_length", truncation=True,
//! max_length=77` ([`CLAP_MAX_LENGTH`], [`Padding::MaxLength`]).
//!
//! Text length: tokenization is close to linear in the text (the merge step is `O(n log n)` in
//! a piece's length, so even one megabyte of letters without a break is cheap), and texts over
//! [`MAX_TEXT_BYTES`] are refused.

mod bpe;
mod pretokenize;
mod unicode;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{PoisonError, RwLock};

use rayon::prelude::*;
use serde_json::Value;

use crate::{ClapError, Result};
use bpe::Merges;
use pretokenize::Pieces;

/// The longest text [`RobertaTokenizer`] accepts, in bytes (4 MiB; the worst case, one run of
/// letters without a break, tokenizes at about 0.3 s per MiB).
pub const MAX_TEXT_BYTES: usize = 4 << 20;

/// The `max_length` LAION's CLAP pipeline truncates and pads to (special tokens included).
pub const CLAP_MAX_LENGTH: usize = 77;

/// Ids above this are refused (the id → token table is dense; the largest vocabularies in use
/// have about a million tokens).
const MAX_ID: u32 = (1 << 24) - 1;

/// Pieces up to this many bytes have their merged ids cached.
const CACHE_PIECE_BYTES: usize = 128;
/// The cache is emptied when it holds this many pieces.
const CACHE_ENTRIES: usize = 1 << 16;

/// How [`RobertaTokenizer::encode_batch`] pads its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// To the longest row of the batch (`padding=True`).
    Longest,
    /// To `max_len` (`padding="max_length"`, what LAION's CLAP pipeline uses).
    MaxLength,
}

/// Token ids of a batch of texts, right-padded with the padding id, row-major `[batch, len]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBatch {
    /// The ids, `batch × len`.
    pub ids: Vec<u32>,
    /// 1 for a token, 0 for padding, `batch × len`.
    pub mask: Vec<u8>,
    /// The number of rows.
    pub batch: usize,
    /// The length of every row.
    pub len: usize,
}

impl TokenBatch {
    /// The ids of row `b` (empty when `b` is out of range).
    pub fn row_ids(&self, b: usize) -> &[u32] {
        self.ids
            .get(b * self.len..(b + 1) * self.len)
            .unwrap_or(&[])
    }

    /// The mask of row `b` (empty when `b` is out of range).
    pub fn row_mask(&self, b: usize) -> &[u8] {
        self.mask
            .get(b * self.len..(b + 1) * self.len)
            .unwrap_or(&[])
    }
}

/// A token the tokenizer finds whole in the raw text before pre-tokenization.
#[derive(Clone, Debug)]
struct AddedToken {
    content: String,
    id: u32,
    /// Takes the whitespace on its left.
    lstrip: bool,
    /// Takes the whitespace on its right.
    rstrip: bool,
    /// Left out by `decode(.., skip_special_tokens = true)`.
    special: bool,
}

/// Where a merge came from, for error messages.
#[derive(Clone, Copy)]
enum MergeSource {
    /// A line of `merges.txt` (1-based).
    Line(usize),
    /// An entry of `model.merges` in `tokenizer.json` (0-based).
    Index(usize),
}

impl std::fmt::Display for MergeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MergeSource::Line(n) => write!(f, "line {n}"),
            MergeSource::Index(i) => write!(f, "model.merges[{i}]"),
        }
    }
}

/// RoBERTa's byte-level BPE tokenizer (see the [module documentation](self)).
///
/// Cheap to share between threads: encoding takes `&self` (a cache of merged pieces sits behind
/// a lock).
pub struct RobertaTokenizer {
    vocab: HashMap<String, u32>,
    /// Token of every id (`None` for ids the vocabulary skips).
    tokens: Vec<Option<String>>,
    merges: Merges,
    /// The id of every byte's symbol.
    byte_ids: [u32; 256],
    /// Symbol (as a code point) → byte, for decoding.
    symbol_bytes: HashMap<char, u8>,
    /// Longest first, so the first that matches is the longest.
    added: Vec<AddedToken>,
    /// Whether an added token starts with this byte.
    added_first: [bool; 256],
    bos: u32,
    eos: u32,
    pad: u32,
    unk: u32,
    mask: Option<u32>,
    cache: RwLock<HashMap<Box<str>, Box<[u32]>>>,
}

impl std::fmt::Debug for RobertaTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobertaTokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("merges", &self.merges.len())
            .field("added", &self.added.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("pad", &self.pad)
            .finish_non_exhaustive()
    }
}

impl Clone for RobertaTokenizer {
    fn clone(&self) -> Self {
        RobertaTokenizer {
            vocab: self.vocab.clone(),
            tokens: self.tokens.clone(),
            merges: self.merges.clone(),
            byte_ids: self.byte_ids,
            symbol_bytes: self.symbol_bytes.clone(),
            added: self.added.clone(),
            added_first: self.added_first,
            bos: self.bos,
            eos: self.eos,
            pad: self.pad,
            unk: self.unk,
            mask: self.mask,
            cache: RwLock::new(HashMap::new()),
        }
    }
}

fn tok_err(file: impl std::fmt::Display, reason: impl Into<String>) -> ClapError {
    ClapError::Tokenizer {
        file: file.to_string(),
        reason: reason.into(),
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| ClapError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// `vocab.json` (or `model.vocab`): token → id.
fn parse_vocab(file: &str, value: Value) -> Result<HashMap<String, u32>> {
    let Value::Object(map) = value else {
        return Err(tok_err(
            file,
            "the vocabulary is not a JSON object of token → id",
        ));
    };
    let mut vocab = HashMap::with_capacity(map.len());
    for (token, id) in map {
        let id = id
            .as_u64()
            .and_then(|i| u32::try_from(i).ok())
            .filter(|&i| i < u32::MAX)
            .ok_or_else(|| tok_err(file, format!("the id of {token:?} is {id}, not an id")))?;
        vocab.insert(token, id);
    }
    Ok(vocab)
}

/// The lines of `merges.txt`: `#version` lines skipped, every other line two tokens separated by
/// one space.
fn parse_merges_txt(file: &str, text: &str) -> Result<Vec<(String, String, MergeSource)>> {
    let mut merges = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("#version") {
            continue;
        }
        let (a, b) = line
            .split_once(' ')
            .filter(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains(' '))
            .ok_or_else(|| {
                tok_err(
                    file,
                    format!(
                        "line {}: {line:?} is not two tokens separated by a space",
                        i + 1
                    ),
                )
            })?;
        merges.push((a.to_owned(), b.to_owned(), MergeSource::Line(i + 1)));
    }
    Ok(merges)
}

fn parse_json(file: &str, text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| tok_err(file, format!("malformed JSON: {e}")))
}

/// RoBERTa's special tokens as its tokenizer classes declare them: `<mask>` takes the whitespace
/// before it; each present in `vocab`.
fn roberta_added(vocab: &HashMap<String, u32>) -> Vec<AddedToken> {
    ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        .into_iter()
        .filter_map(|t| {
            vocab.get(t).map(|&id| AddedToken {
                content: t.to_owned(),
                id,
                lstrip: t == "<mask>",
                rstrip: false,
                special: true,
            })
        })
        .collect()
}

/// The smallest vocabulary this tokenizer takes: the four specials (`<s>` 0, `<pad>` 1,
/// `</s>` 2, `<unk>` 3) and the 256 byte symbols (ids 4–259), no merges, so every text
/// tokenizes to its UTF-8 bytes. For random-weight checkpoints, where no real vocabulary
/// means anything; written as `vocab.json` + `merges.txt` by [`write_byte_level`].
pub fn byte_level_vocab() -> HashMap<String, u32> {
    let mut v = HashMap::new();
    for (i, s) in ["<s>", "<pad>", "</s>", "<unk>"].iter().enumerate() {
        v.insert((*s).to_string(), i as u32);
    }
    for (i, c) in pretokenize::byte_symbols().iter().enumerate() {
        v.insert(c.to_string(), 4 + i as u32);
    }
    v
}

impl RobertaTokenizer {
    /// Load `vocab.json` (token → id) and `merges.txt` (one merge per line, `#version` lines
    /// skipped), with RoBERTa's special tokens: `<s>`, `</s>`, `<pad>`, `<unk>` (all required)
    /// and `<mask>` (optional; it takes the whitespace before it).
    pub fn from_files(vocab_json: impl AsRef<Path>, merges_txt: impl AsRef<Path>) -> Result<Self> {
        let (vpath, mpath) = (vocab_json.as_ref(), merges_txt.as_ref());
        let vfile = vpath.display().to_string();
        let mfile = mpath.display().to_string();
        let vocab = parse_vocab(&vfile, parse_json(&vfile, &read(vpath)?)?)?;
        let merges = parse_merges_txt(&mfile, &read(mpath)?)?;
        let added = roberta_added(&vocab);
        Self::build(&vfile, &mfile, vocab, merges, added, None)
    }

    /// Build from a vocabulary (token → id) and merges (in rank order), with RoBERTa's special
    /// tokens as [`from_files`](Self::from_files) does.
    pub fn from_vocab_and_merges(
        vocab: HashMap<String, u32>,
        merges: Vec<(String, String)>,
    ) -> Result<Self> {
        let merges = merges
            .into_iter()
            .enumerate()
            .map(|(i, (a, b))| (a, b, MergeSource::Index(i)))
            .collect();
        let added = roberta_added(&vocab);
        Self::build("vocab", "merges", vocab, merges, added, None)
    }

    /// Load a `tokenizers` `tokenizer.json` (what the released CLAP checkpoints ship): a `BPE`
    /// model (`vocab`, `merges` as `"a b"` strings or `["a", "b"]` pairs), the `ByteLevel`
    /// pre-tokenizer without a prefix space, no normalizer, the `RobertaProcessing`
    /// post-processor (its `cls` and `sep` are the ids that enclose a text), and `added_tokens`
    /// (found whole in the text, with their `lstrip`/`rstrip`). Other settings are refused with
    /// an error naming them.
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let root = parse_json(&file, &read(path)?)?;
        let err = |reason: String| tok_err(&file, reason);
        let model = root
            .get("model")
            .filter(|m| m.is_object())
            .ok_or_else(|| err("no `model` object".into()))?;
        let model_type = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
        if model_type != "BPE" {
            return Err(err(format!(
                "model.type is {model_type:?}; only \"BPE\" is supported"
            )));
        }
        for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
            match model.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s.is_empty() => {}
                Some(v) => return Err(err(format!("model.{key} is {v}; not supported"))),
            }
        }
        if model.get("dropout").is_some_and(|d| !d.is_null()) {
            return Err(err(
                "model.dropout is set; BPE dropout is not supported".into()
            ));
        }
        if model.get("ignore_merges").and_then(Value::as_bool) == Some(true) {
            return Err(err("model.ignore_merges is true; not supported".into()));
        }
        if root.get("normalizer").is_some_and(|n| !n.is_null()) {
            return Err(err("has a normalizer; RoBERTa's tokenizer has none".into()));
        }
        let pre = root.get("pre_tokenizer").unwrap_or(&Value::Null);
        if pre.get("type").and_then(Value::as_str) != Some("ByteLevel") {
            return Err(err(format!(
                "pre_tokenizer is {pre}; only ByteLevel (GPT-2's pattern) is supported"
            )));
        }
        if pre.get("add_prefix_space").and_then(Value::as_bool) == Some(true) {
            return Err(err(
                "pre_tokenizer.add_prefix_space is true; not supported".into()
            ));
        }
        if pre.get("use_regex").and_then(Value::as_bool) == Some(false) {
            return Err(err("pre_tokenizer.use_regex is false; not supported".into()));
        }

        let vocab = parse_vocab(
            &format!("{file} (model.vocab)"),
            model.get("vocab").cloned().unwrap_or(Value::Null),
        )?;
        let Some(Value::Array(list)) = model.get("merges") else {
            return Err(err("model.merges is not a list".into()));
        };
        let mut merges = Vec::with_capacity(list.len());
        for (i, m) in list.iter().enumerate() {
            let pair = match m {
                Value::String(s) => s
                    .split_once(' ')
                    .filter(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains(' '))
                    .map(|(a, b)| (a.to_owned(), b.to_owned())),
                Value::Array(p) => match p.as_slice() {
                    [Value::String(a), Value::String(b)] => Some((a.clone(), b.clone())),
                    _ => None,
                },
                _ => None,
            };
            let (a, b) = pair.ok_or_else(|| {
                err(format!(
                    "model.merges[{i}] is {m}, not \"a b\" or [\"a\", \"b\"]"
                ))
            })?;
            merges.push((a, b, MergeSource::Index(i)));
        }

        let mut added = Vec::new();
        if let Some(list) = root.get("added_tokens").filter(|a| !a.is_null()) {
            let Value::Array(list) = list else {
                return Err(err("added_tokens is not a list".into()));
            };
            for (i, t) in list.iter().enumerate() {
                let bad = |what: &str| err(format!("added_tokens[{i}]: {what}"));
                let content = t
                    .get("content")
                    .and_then(Value::as_str)
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| bad("no content"))?;
                let id = t
                    .get("id")
                    .and_then(Value::as_u64)
                    .and_then(|i| u32::try_from(i).ok())
                    .filter(|&i| i < u32::MAX)
                    .ok_or_else(|| bad("no id"))?;
                let flag = |k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
                if flag("single_word") {
                    return Err(bad("single_word is not supported"));
                }
                added.push(AddedToken {
                    content: content.to_owned(),
                    id,
                    lstrip: flag("lstrip"),
                    rstrip: flag("rstrip"),
                    special: flag("special"),
                });
            }
        }

        let post = root.get("post_processor").unwrap_or(&Value::Null);
        if post.get("type").and_then(Value::as_str) != Some("RobertaProcessing") {
            return Err(err(format!(
                "post_processor is {post}; only RobertaProcessing (<s> … </s>) is supported"
            )));
        }
        let pair_id = |k: &str| -> Result<u32> {
            post.get(k)
                .and_then(|p| p.get(1))
                .and_then(Value::as_u64)
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| err(format!("post_processor.{k} is not [token, id]")))
        };
        let ends = (pair_id("cls")?, pair_id("sep")?);
        Self::build(&file, &file, vocab, merges, added, Some(ends))
    }

    /// Load the tokenizer files of a checkpoint folder: `tokenizer.json` when present, else
    /// `vocab.json` + `merges.txt`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let json = dir.join("tokenizer.json");
        if json.is_file() {
            return Self::from_tokenizer_json(json);
        }
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        let missing: Vec<&str> = [("vocab.json", &vocab), ("merges.txt", &merges)]
            .into_iter()
            .filter(|(_, p)| !p.is_file())
            .map(|(n, _)| n)
            .collect();
        if !missing.is_empty() {
            return Err(tok_err(
                dir.display(),
                format!(
                    "no tokenizer.json, and {} missing (a RoBERTa tokenizer needs tokenizer.json, \
                     or vocab.json and merges.txt)",
                    missing.join(" and ")
                ),
            ));
        }
        Self::from_files(vocab, merges)
    }

    fn build(
        vocab_file: &str,
        merges_file: &str,
        vocab: HashMap<String, u32>,
        merge_list: Vec<(String, String, MergeSource)>,
        added: Vec<AddedToken>,
        ends: Option<(u32, u32)>,
    ) -> Result<Self> {
        // Every id names one token; added tokens may extend the vocabulary.
        let max_id = vocab
            .values()
            .chain(added.iter().map(|t| &t.id))
            .copied()
            .max()
            .ok_or_else(|| tok_err(vocab_file, "the vocabulary is empty"))?;
        if max_id > MAX_ID {
            return Err(tok_err(
                vocab_file,
                format!("id {max_id} is above the supported maximum {MAX_ID}"),
            ));
        }
        let mut tokens: Vec<Option<String>> = vec![None; max_id as usize + 1];
        let mut sorted: Vec<(&String, &u32)> = vocab.iter().collect();
        sorted.sort_unstable_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)));
        for (token, &id) in sorted {
            if let Some(other) = &tokens[id as usize] {
                return Err(tok_err(
                    vocab_file,
                    format!("id {id} is given to both {other:?} and {token:?}"),
                ));
            }
            tokens[id as usize] = Some(token.clone());
        }
        for t in &added {
            match &tokens[t.id as usize] {
                Some(other) if *other != t.content => {
                    return Err(tok_err(
                        vocab_file,
                        format!(
                            "added token {:?} has id {}, which the vocabulary gives to {other:?}",
                            t.content, t.id
                        ),
                    ))
                }
                _ => tokens[t.id as usize] = Some(t.content.clone()),
            }
        }

        let symbols = pretokenize::byte_symbols();
        let mut byte_ids = [0u32; 256];
        let mut symbol_bytes = HashMap::with_capacity(256);
        for (b, &sym) in symbols.iter().enumerate() {
            let s = sym.to_string();
            byte_ids[b] = *vocab.get(&s).ok_or_else(|| {
                tok_err(
                    vocab_file,
                    format!(
                        "the vocabulary lacks {s:?}, the symbol of byte 0x{b:02X}: not a \
                         byte-level BPE vocabulary"
                    ),
                )
            })?;
            symbol_bytes.insert(sym, b as u8);
        }

        let mut merges = Merges::with_capacity_and_hasher(merge_list.len(), Default::default());
        for (rank, (a, b, source)) in merge_list.into_iter().enumerate() {
            let id = |t: &str| {
                vocab.get(t).copied().ok_or_else(|| {
                    tok_err(
                        merges_file,
                        format!("{source}: the merge names {t:?}, which is not in the vocabulary"),
                    )
                })
            };
            let (ia, ib) = (id(&a)?, id(&b)?);
            let joined = format!("{a}{b}");
            let merged = vocab.get(&joined).copied().ok_or_else(|| {
                tok_err(
                    merges_file,
                    format!(
                        "{source}: the merge of {a:?} and {b:?}, {joined:?}, is not in the \
                         vocabulary"
                    ),
                )
            })?;
            let rank =
                u32::try_from(rank).map_err(|_| tok_err(merges_file, "more than 2^32 merges"))?;
            // A repeated merge takes its last rank, as both references do.
            merges.insert((ia, ib), (rank, merged));
        }

        let find = |name: &str| -> Result<u32> {
            added
                .iter()
                .find(|t| t.content == name)
                .map(|t| t.id)
                .or_else(|| vocab.get(name).copied())
                .ok_or_else(|| {
                    tok_err(
                        vocab_file,
                        format!("the special token {name} is missing from the vocabulary"),
                    )
                })
        };
        let (bos, eos) = match ends {
            Some(ends) => ends,
            None => (find("<s>")?, find("</s>")?),
        };
        let pad = find("<pad>")?;
        let unk = find("<unk>")?;
        let mask = find("<mask>").ok();
        for id in [bos, eos, pad] {
            if tokens.get(id as usize).is_none_or(Option::is_none) {
                return Err(tok_err(vocab_file, format!("special id {id} has no token")));
            }
        }

        let mut added = added;
        added.sort_by_key(|t| std::cmp::Reverse(t.content.len()));
        let mut added_first = [false; 256];
        for t in &added {
            if let Some(&b) = t.content.as_bytes().first() {
                added_first[b as usize] = true;
            }
        }
        Ok(RobertaTokenizer {
            vocab,
            tokens,
            merges,
            byte_ids,
            symbol_bytes,
            added,
            added_first,
            bos,
            eos,
            pad,
            unk,
            mask,
            cache: RwLock::new(HashMap::new()),
        })
    }

    /// The number of ids: one more than the largest.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The padding id (`<pad>`).
    pub fn pad_id(&self) -> u32 {
        self.pad
    }

    /// The id that starts every text (`<s>`).
    pub fn bos_id(&self) -> u32 {
        self.bos
    }

    /// The id that ends every text (`</s>`).
    pub fn eos_id(&self) -> u32 {
        self.eos
    }

    /// The unknown-token id (`<unk>`; byte-level BPE never produces it from text).
    pub fn unk_id(&self) -> u32 {
        self.unk
    }

    /// The `<mask>` id, when the vocabulary has one.
    pub fn mask_id(&self) -> Option<u32> {
        self.mask
    }

    /// The id of a token of the vocabulary (in its byte-symbol spelling, e.g. `"Ġdog"`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.added
            .iter()
            .find(|t| t.content == token)
            .map(|t| t.id)
            .or_else(|| self.vocab.get(token).copied())
    }

    /// The token of an id (in its byte-symbol spelling).
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize)?.as_deref()
    }

    fn check_len(text: &str) -> Result<()> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(ClapError::invalid(
                "text",
                format!(
                    "{} bytes exceed the tokenizer's limit of {MAX_TEXT_BYTES}",
                    text.len()
                ),
            ));
        }
        Ok(())
    }

    /// The ids of `text`: `<s>`, the text's tokens, `</s>`; untruncated.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Self::check_len(text)?;
        let mut out = vec![self.bos];
        self.encode_content(text, usize::MAX, &mut out);
        out.push(self.eos);
        Ok(out)
    }

    /// The ids of `text` truncated as `transformers` does with `truncation=True,
    /// max_length=max_len`: `<s>`, the first `max_len − 2` tokens of the text, `</s>`. Stops
    /// tokenizing once it has them. `max_len` must be at least 2.
    pub fn encode_truncated(&self, text: &str, max_len: usize) -> Result<Vec<u32>> {
        Self::check_len(text)?;
        if max_len < 2 {
            return Err(ClapError::invalid(
                "max_len",
                format!("{max_len} leaves no room for <s> and </s> (at least 2)"),
            ));
        }
        let mut out = Vec::with_capacity(max_len.min(1024));
        out.push(self.bos);
        self.encode_content(text, max_len - 1, &mut out);
        out.truncate(max_len - 1);
        out.push(self.eos);
        Ok(out)
    }

    /// Tokenize a batch ([`encode_truncated`](Self::encode_truncated) per text, in parallel) and
    /// pad it on the right with [`pad_id`](Self::pad_id): to `max_len`, or to the longest row.
    pub fn encode_batch(
        &self,
        texts: &[&str],
        max_len: usize,
        padding: Padding,
    ) -> Result<TokenBatch> {
        let rows: Vec<Vec<u32>> = texts
            .par_iter()
            .map(|t| self.encode_truncated(t, max_len))
            .collect::<Result<_>>()?;
        let len = match padding {
            Padding::MaxLength => max_len,
            Padding::Longest => rows.iter().map(Vec::len).max().unwrap_or(0),
        };
        let mut ids = Vec::with_capacity(rows.len() * len);
        let mut mask = Vec::with_capacity(rows.len() * len);
        for row in &rows {
            ids.extend_from_slice(row);
            ids.resize(ids.len() + len - row.len(), self.pad);
            mask.resize(mask.len() + row.len(), 1);
            mask.resize(mask.len() + len - row.len(), 0);
        }
        Ok(TokenBatch {
            ids,
            mask,
            batch: rows.len(),
            len,
        })
    }

    /// The text of `ids`: the byte-level symbols back to bytes, read as UTF-8 (invalid sequences
    /// become U+FFFD, as the reference's `errors="replace"`). Added tokens are written as they
    /// are, or left out when they are special and `skip_special_tokens`. No clean-up of spaces.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if let Some(t) = self.added.iter().find(|t| t.id == id) {
                if !(skip_special_tokens && t.special) {
                    bytes.extend_from_slice(t.content.as_bytes());
                }
                continue;
            }
            let token = self.id_to_token(id).ok_or_else(|| {
                ClapError::invalid(
                    "token id",
                    format!("{id} is not in the vocabulary of {}", self.vocab_size()),
                )
            })?;
            for c in token.chars() {
                match self.symbol_bytes.get(&c) {
                    Some(&b) => bytes.push(b),
                    None => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Appends the tokens of `text` (no `<s>`/`</s>`) to `out`, stopping once `out` holds
    /// `limit` ids.
    fn encode_content(&self, text: &str, limit: usize, out: &mut Vec<u32>) {
        let bytes = text.as_bytes();
        let mut seg_start = 0;
        let mut i = 0;
        while i < bytes.len() && out.len() < limit {
            // An added token starts at a character boundary: its first byte is never a UTF-8
            // continuation byte.
            let hit = if self.added_first[bytes[i] as usize] {
                self.added
                    .iter()
                    .find(|t| bytes[i..].starts_with(t.content.as_bytes()))
            } else {
                None
            };
            let Some(tok) = hit else {
                i += 1;
                continue;
            };
            let mut start = i;
            if tok.lstrip {
                start = text[seg_start..i]
                    .char_indices()
                    .rev()
                    .find(|&(_, c)| !c.is_whitespace())
                    .map_or(seg_start, |(j, c)| seg_start + j + c.len_utf8());
            }
            let mut end = i + tok.content.len();
            if tok.rstrip {
                end = text[end..]
                    .char_indices()
                    .find(|&(_, c)| !c.is_whitespace())
                    .map_or(text.len(), |(j, _)| end + j);
            }
            self.encode_plain(&text[seg_start..start], limit, out);
            if out.len() < limit {
                out.push(tok.id);
            }
            seg_start = end;
            i = end;
        }
        if out.len() < limit {
            self.encode_plain(&text[seg_start..], limit, out);
        }
    }

    /// Appends the tokens of text without added tokens, stopping once `out` holds `limit` ids.
    fn encode_plain(&self, text: &str, limit: usize, out: &mut Vec<u32>) {
        for piece in Pieces::new(text) {
            if out.len() >= limit {
                return;
            }
            self.encode_piece(piece, out);
        }
    }

    fn encode_piece(&self, piece: &str, out: &mut Vec<u32>) {
        let cacheable = piece.len() <= CACHE_PIECE_BYTES;
        if cacheable {
            let cache = self.cache.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(ids) = cache.get(piece) {
                out.extend_from_slice(ids);
                return;
            }
        }
        let mut ids: Vec<u32> = piece.bytes().map(|b| self.byte_ids[b as usize]).collect();
        bpe::merge(&mut ids, &self.merges);
        out.extend_from_slice(&ids);
        if cacheable {
            let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(piece.into(), ids.into_boxed_slice());
        }
    }
}

/// Write the byte-level vocabulary ([`byte_level_vocab`]) as `vocab.json` and
/// an empty `merges.txt` into `dir`.
pub fn write_byte_level(dir: &Path) -> Result<()> {
    let vocab = byte_level_vocab();
    let mut entries: Vec<(&String, &u32)> = vocab.iter().collect();
    entries.sort_by_key(|e| *e.1);
    let map: serde_json::Map<String, serde_json::Value> = entries
        .into_iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::from(*v)))
        .collect();
    let io = |path: std::path::PathBuf| move |source| crate::ClapError::Io { path, source };
    let text = serde_json::to_string(&map).map_err(|e| crate::ClapError::Tokenizer {
        file: "vocab.json".into(),
        reason: e.to_string(),
    })?;
    let v = dir.join("vocab.json");
    std::fs::write(&v, text).map_err(io(v.clone()))?;
    let m = dir.join("merges.txt");
    std::fs::write(&m, "#version: 0.2\n").map_err(io(m.clone()))?;
    Ok(())
}
