//! The BERT uncased WordPiece tokenizer of all-MiniLM-L6-v2.
//!
//! It follows the `BertNormalizer` + `BertPreTokenizer` + `WordPiece` pipeline of the model's
//! `tokenizer.json` (the fast tokenizer sentence-transformers runs):
//! 1. clean: drop NUL, U+FFFD and control characters, map every whitespace to a space;
//! 2. put spaces around CJK ideographs;
//! 3. strip accents (NFD, then drop non-spacing marks) and lowercase;
//! 4. split on whitespace, then isolate every punctuation character (ASCII punctuation or a
//!    Unicode `P*` category);
//! 5. WordPiece each word greedily, longest match first, continuations prefixed `##`; a word
//!    longer than 100 characters, or one with an unmatched remainder, becomes `[UNK]`;
//! 6. wrap in `[CLS] … [SEP]`, truncating the word pieces so the whole fits `max_len`.

use std::collections::HashMap;
use std::path::Path;

use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::UnicodeNormalization;

use crate::{CacheError, Result};

/// Words longer than this many characters become `[UNK]` (the model's `max_input_chars_per_word`).
const MAX_WORD_CHARS: usize = 100;

/// A BERT uncased WordPiece tokenizer loaded from a `vocab.txt` (one token per line, id = line).
#[derive(Debug, Clone)]
pub struct WordPiece {
    vocab: HashMap<String, u32>,
    unk: u32,
    cls: u32,
    sep: u32,
    max_len: usize,
}

fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.is_other()
}

fn is_cjk(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation() || c.is_punctuation()
}

impl WordPiece {
    /// Read `vocab.txt`; `max_len` counts `[CLS]` and `[SEP]` (256 for all-MiniLM-L6-v2).
    pub fn from_file(path: &Path, max_len: usize) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| CacheError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_vocab(text.lines(), max_len)
    }

    /// Build from the vocabulary lines (id = position).
    pub fn from_vocab<'a>(
        lines: impl IntoIterator<Item = &'a str>,
        max_len: usize,
    ) -> Result<Self> {
        let vocab: HashMap<String, u32> = lines
            .into_iter()
            .enumerate()
            .map(|(i, l)| (l.trim_end_matches('\r').to_string(), i as u32))
            .collect();
        let special = |t: &str| {
            vocab.get(t).copied().ok_or_else(|| CacheError::Model {
                what: "MiniLM vocab.txt".into(),
                reason: format!("special token {t} is missing"),
            })
        };
        if max_len < 2 {
            return Err(CacheError::Invalid {
                name: "max_len".into(),
                reason: format!("{max_len} leaves no room for [CLS] and [SEP]"),
            });
        }
        Ok(WordPiece {
            unk: special("[UNK]")?,
            cls: special("[CLS]")?,
            sep: special("[SEP]")?,
            vocab,
            max_len,
        })
    }

    /// The number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The normalized words of `text` (steps 1–4).
    pub fn words(&self, text: &str) -> Vec<String> {
        let mut spaced = String::with_capacity(text.len());
        for c in text.chars() {
            if c == '\0' || c == '\u{fffd}' || is_control(c) {
                continue;
            }
            if is_whitespace(c) {
                spaced.push(' ');
            } else if is_cjk(c) {
                spaced.push(' ');
                spaced.push(c);
                spaced.push(' ');
            } else {
                spaced.push(c);
            }
        }
        let mut norm = String::with_capacity(spaced.len());
        for (c, _) in spaced.as_str().nfd() {
            if !c.is_mark_nonspacing() {
                norm.extend(c.to_lowercase());
            }
        }
        let mut words = Vec::new();
        for chunk in norm.split(char::is_whitespace) {
            let mut cur = String::new();
            for c in chunk.chars() {
                if is_punct(c) {
                    if !cur.is_empty() {
                        words.push(std::mem::take(&mut cur));
                    }
                    words.push(c.to_string());
                } else {
                    cur.push(c);
                }
            }
            if !cur.is_empty() {
                words.push(cur);
            }
        }
        words
    }

    /// The WordPiece ids of one normalized word, appended to `out`.
    fn word_ids(&self, word: &str, out: &mut Vec<u32>) {
        let chars: Vec<(usize, char)> = word.char_indices().collect();
        if chars.len() > MAX_WORD_CHARS {
            out.push(self.unk);
            return;
        }
        let mark = out.len();
        let mut start = 0usize;
        let mut piece = String::new();
        while start < chars.len() {
            let mut end = chars.len();
            let mut found = None;
            while start < end {
                let b0 = chars[start].0;
                let b1 = chars.get(end).map_or(word.len(), |c| c.0);
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                piece.push_str(&word[b0..b1]);
                if let Some(&id) = self.vocab.get(piece.as_str()) {
                    found = Some(id);
                    break;
                }
                end -= 1;
            }
            match found {
                Some(id) => out.push(id),
                None => {
                    out.truncate(mark);
                    out.push(self.unk);
                    return;
                }
            }
            start = end;
        }
    }

    /// Token ids of `text`: `[CLS] pieces… [SEP]`, at most `max_len` in all.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = vec![self.cls];
        for w in self.words(text) {
            self.word_ids(&w, &mut ids);
            if ids.len() >= self.max_len - 1 {
                break;
            }
        }
        ids.truncate(self.max_len - 1);
        ids.push(self.sep);
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok() -> WordPiece {
        let vocab = [
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "dog", "bark", "##s", "!", "caf", "##e",
            "rain", "—", "日", ",",
        ];
        WordPiece::from_vocab(vocab, 8).expect("vocab")
    }

    #[test]
    fn normalizes_and_splits() {
        let t = tok();
        assert_eq!(
            t.words("  A Dog\tbarks!— Café,日本"),
            ["a", "dog", "barks", "!", "—", "cafe", ",", "日", "本"]
        );
    }

    #[test]
    fn wordpiece_greedy_with_unk() {
        let t = tok();
        // [CLS] a dog bark ##s ! [SEP]
        assert_eq!(t.encode("A dog barks!"), [2, 4, 5, 6, 7, 8, 3]);
        // "dogx" has an unmatched remainder: the whole word is [UNK].
        assert_eq!(t.encode("dogx café"), [2, 1, 9, 10, 3]);
        // Truncated to max_len = 8 with [SEP] kept last.
        assert_eq!(t.encode("a a a a a a a a a a"), [2, 4, 4, 4, 4, 4, 4, 3]);
        let long = "a".repeat(MAX_WORD_CHARS + 1);
        assert_eq!(t.encode(&long), [2, 1, 3]);
    }
}
