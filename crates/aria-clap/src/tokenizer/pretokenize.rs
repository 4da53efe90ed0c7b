//! GPT-2's pre-tokenization, by hand: the pieces the pattern
//!
//! ```text
//! 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//! ```
//!
//! finds (leftmost, first alternative that matches, each quantifier greedy), and the byte-to-
//! unicode mapping that turns every byte of a piece into one printable symbol of the vocabulary.

use super::unicode::{LETTERS, NUMBERS};

/// The character classes of the pattern. `\s` is Unicode's `White_Space` property, which is
/// what both Python's `regex` and Rust's [`char::is_whitespace`] implement.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Class {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\s`.
    Space,
    /// `[^\s\p{L}\p{N}]`.
    Other,
}

fn in_table(table: &[(u32, u32)], c: u32) -> bool {
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// The class of `c`.
pub(super) fn class(c: char) -> Class {
    if c.is_ascii() {
        return if c.is_ascii_alphabetic() {
            Class::Letter
        } else if c.is_ascii_digit() {
            Class::Number
        } else if matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r') {
            Class::Space
        } else {
            Class::Other
        };
    }
    if c.is_whitespace() {
        Class::Space
    } else if in_table(LETTERS, c as u32) {
        Class::Letter
    } else if in_table(NUMBERS, c as u32) {
        Class::Number
    } else {
        Class::Other
    }
}

/// The end (byte offset) of the run of characters of class `cls` that starts at `from`.
fn run_end(text: &str, from: usize, cls: Class) -> usize {
    text[from..]
        .char_indices()
        .find(|&(_, c)| class(c) != cls)
        .map_or(text.len(), |(i, _)| from + i)
}

/// The length in bytes of the contraction (`'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`) that
/// `rest` starts with, if any. Case-sensitive, as the pattern is.
fn contraction(rest: &[u8]) -> Option<usize> {
    match rest {
        [b'\'', b's' | b't' | b'm' | b'd', ..] => Some(2),
        [b'\'', b'r', b'e', ..] | [b'\'', b'v', b'e', ..] | [b'\'', b'l', b'l', ..] => Some(3),
        _ => None,
    }
}

/// The pieces of `text`, in order; they cover `text` exactly.
pub(super) struct Pieces<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Pieces<'a> {
    /// The pieces of `text`.
    pub(super) fn new(text: &'a str) -> Self {
        Pieces { text, pos: 0 }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let text = self.text;
        let start = self.pos;
        let mut chars = text[start..].chars();
        let c = chars.next()?;
        let end = if let Some(n) = contraction(&text.as_bytes()[start..]) {
            start + n
        } else {
            // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one
            // class (the first character after the optional space picks the alternative).
            let (body, first) = match (c, chars.next()) {
                (' ', Some(n)) => (start + 1, n),
                _ => (start, c),
            };
            match class(first) {
                Class::Space => {
                    // `\s+(?!\S)`: the whole whitespace run when it ends the text, else the run
                    // but its last character (that one then starts the next piece), when that
                    // leaves at least one; otherwise `\s+`: the run (here one character).
                    let run = run_end(text, start, Class::Space);
                    if run == text.len() {
                        run
                    } else {
                        let last = text[start..run]
                            .chars()
                            .next_back()
                            .map_or(0, char::len_utf8);
                        if run - last > start {
                            run - last
                        } else {
                            run
                        }
                    }
                }
                cls => run_end(text, body + first.len_utf8(), cls),
            }
        };
        self.pos = end;
        Some(&text[start..end])
    }
}

/// GPT-2's byte-to-unicode mapping: the printable bytes `!`..=`~`, `¡`..=`¬`, `®`..=`ÿ` stand for
/// themselves; the other 68 bytes, in increasing order, for U+0100, U+0101, … U+0143.
pub(super) fn byte_symbols() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for (b, slot) in out.iter_mut().enumerate() {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let code = if printable {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        // Every code is below U+0144, a valid scalar value.
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &str) -> Vec<&str> {
        Pieces::new(s).collect()
    }

    #[test]
    fn pattern_alternatives() {
        assert_eq!(pieces("Hello world"), ["Hello", " world"]);
        assert_eq!(pieces("it's DON'T"), ["it", "'s", " DON", "'", "T"]);
        assert_eq!(pieces("''s"), ["''", "s"]);
        assert_eq!(pieces("a  b"), ["a", " ", " b"]);
        assert_eq!(pieces("a \tb"), ["a", " ", "\t", "b"]);
        assert_eq!(pieces("end   "), ["end", "   "]);
        assert_eq!(pieces(" 12ab!? x"), [" 12", "ab", "!?", " x"]);
        assert_eq!(pieces("\t\n"), ["\t\n"]);
        assert_eq!(pieces(" "), [" "]);
        assert_eq!(pieces(""), Vec::<&str>::new());
        assert_eq!(pieces("e\u{301}x"), ["e", "\u{301}", "x"]);
        assert_eq!(pieces("日本 ½"), ["日本", " ½"]);
    }

    #[test]
    fn whitespace_is_white_space_property() {
        // Unicode's White_Space, the set Python's `regex` matches with `\s`.
        let ws: Vec<u32> = [0x9..=0xD, 0x20..=0x20, 0x85..=0x85, 0xA0..=0xA0]
            .into_iter()
            .chain([0x1680..=0x1680, 0x2000..=0x200A, 0x2028..=0x2029])
            .chain([0x202F..=0x202F, 0x205F..=0x205F, 0x3000..=0x3000])
            .flatten()
            .collect();
        let got: Vec<u32> = (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|&c| class(c) == Class::Space)
            .map(|c| c as u32)
            .collect();
        assert_eq!(got, ws);
    }

    #[test]
    fn byte_mapping() {
        let m = byte_symbols();
        assert_eq!(m[b'!' as usize], '!');
        assert_eq!(m[b' ' as usize], '\u{120}');
        assert_eq!(m[0], '\u{100}');
        assert_eq!(m[0xAD], '\u{143}');
        let mut seen: Vec<char> = m.to_vec();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 256);
    }
}
