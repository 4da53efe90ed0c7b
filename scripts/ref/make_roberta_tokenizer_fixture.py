"""The RoBERTa tokenizer parity fixture of aria-clap: reference ids for a few thousand texts.

Runs under the Python it is started with (it needs `transformers` and `tokenizers`; `regex`
comes with them). Reads the RoBERTa-layout `vocab.json` + `merges.txt` that
`.ci/fetch-roberta-tokenizer.sh` derives from GPT-2's tokenizer, tokenizes every text of
`fixtures/tokenizer/gemma-audiocaps.jsonl` (12 edge cases, 3 000 AudioCaps captions) and the
extra edge cases below with two independent references, checks that they agree on every text,
and writes `fixtures/tokenizer/roberta-audiocaps.jsonl`:

  line 1   {"header": {vocab_sha256, merges_sha256, vocab_size, max_length, count, references...}}
  then     {"text", "ids", "full_len", "ids_77"} per text
           ids     special tokens added (<s> ... </s>), untruncated
           full_len  len(ids)
           ids_77  truncation=True, max_length=77 (the first 75 tokens, then </s>)

The two references:
  fast  `tokenizers` (Rust) through transformers: RobertaTokenizerFast (transformers 4) or
        RobertaTokenizer (transformers 5, where it is the tokenizers-backed class), with
        <mask> lstrip=True as the released RoBERTa/CLAP tokenizer files declare it.
  slow  pure Python: transformers 4's RobertaTokenizer (the `regex` pattern, Python BPE by merge
        rank, added tokens split by transformers' trie); transformers 5 dropped that class, so
        under 5 the same algorithm runs here on transformers' PythonBackend (the slow-tokenizer
        base class, which does the added-token split and the <mask> lstrip).

Also `--unicode-table PATH` writes the Rust tables of the \\p{L} and \\p{N} classes the
pre-tokenization pattern uses, taken from the `regex` module the slow reference runs on.

Usage: python scripts/ref/make_roberta_tokenizer_fixture.py [--tokenizer-dir DIR] [--out FILE]
       python scripts/ref/make_roberta_tokenizer_fixture.py --unicode-table FILE
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

import regex

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MAX_LENGTH = 77
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Beyond the 3 012 texts of the Gemma fixture.
EXTRA = [
    "   leading spaces",
    "trailing spaces   ",
    "multiple   spaces  between    words",
    "\ttab first",
    "newline\nin the middle\n\nand two",
    "a \t b \n c \r\n d",
    "mixed \u00a0no-break\u3000ideographic\u2028line separator",
    "it's they're we've I'm you'll he'd can't",
    "IT'S THEY'RE WE'VE I'M YOU'LL HE'D CAN'T",
    "'s 't 're 've 'm 'll 'd",
    "''s rock'n'roll o'clock dogs' toys",
    "digits 0 12 345 6789 1,000,000 3.5kHz 44100Hz 24-bit",
    "punctuation!!! ??? ... --- ,,, ;;; ::: ((())) [[]] {{}} \"\" '' ``",
    "?!?! *** ### @@@ $$$ %%% ^^^ &&& ~~~ ___ +++ === |||",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe \u0153uvre",
    "e\u0301 combining accent, a\u0308 too",
    "\u4e2d\u6587\u97f3\u4e50 \ud55c\uad6d\uc5b4 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea \u0939\u093f\u0928\u094d\u0926\u0940",
    "emoji \U0001f3b8\U0001f941\U0001f3b9 flags \U0001f1ef\U0001f1f5 skin \U0001f44b\U0001f3fd",
    "<s>",
    "</s>",
    "<mask>",
    "<pad>",
    "<unk>",
    "a <mask> b",
    "a<mask>b",
    "a   <mask>",
    "a\t\n<mask> b",
    "<mask> <mask>  <mask>",
    "<s> literal </s> specials <pad> in <unk> text",
    "<s><s></s></s>",
    "<|endoftext|> stays a normal vocabulary entry",
    "< s > </ s> <mask <mask",
    "",
    " ",
    "  ",
    "\n",
    "x",
    "A dog barks loudly while birds chirp in the background and a car passes by. " * 40,
    "supercalifragilisticexpialidocious" * 30,
    "\u00bd \u00b2 \u2163 \u0663\u0664 \u2460 \uff11\uff12",
    "math: \u2200x\u2208\u211d, x\u00b2 \u2265 0",
    "zero\u200bwidth\u200cjoiners\u200d",
    "control\x00char\x07bell\x1bescape",
    "Hello world",
    " Hello world",
]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def default_tokenizer_dir() -> str:
    d = os.environ.get("ARIA_ROBERTA_TOKENIZER_DIR")
    if d:
        return d
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "aria", "roberta-gpt2-tokenizer")


def unicode_table(path: str) -> None:
    """Writes the Rust tables of \\p{L} and \\p{N} as the `regex` module matches them."""

    def ranges(pattern: str) -> list[tuple[int, int]]:
        p = regex.compile(pattern)
        out, start = [], None
        for c in range(0x110000):
            hit = not (0xD800 <= c <= 0xDFFF) and p.match(chr(c)) is not None
            if hit and start is None:
                start = c
            elif not hit and start is not None:
                out.append((start, c - 1))
                start = None
        if start is not None:
            out.append((start, 0x10FFFF))
        return out

    def table(name: str, doc: str, rs: list[tuple[int, int]]) -> str:
        rows = []
        for i in range(0, len(rs), 4):
            rows.append("    " + " ".join(f"(0x{a:X}, 0x{b:X})," for a, b in rs[i : i + 4]))
        body = "\n".join(rows)
        return f"/// {doc}\n#[rustfmt::skip]\npub(super) const {name}: &[(u32, u32)] = &[\n{body}\n];\n"

    letters, numbers = ranges(r"\p{L}"), ranges(r"\p{N}")
    text = (
        "//! The Unicode classes of GPT-2's pre-tokenization pattern, as inclusive code point ranges\n"
        "//! sorted ascending: `\\p{L}` (letters: Lu, Ll, Lt, Lm, Lo) and `\\p{N}` (numbers: Nd, Nl, No).\n"
        f"//! Generated from the Python `regex` module {regex.__version__} (the slow reference tokenizer's\n"
        "//! pattern engine) by `scripts/ref/make_roberta_tokenizer_fixture.py --unicode-table`; do not\n"
        "//! edit by hand.\n\n"
        + table("LETTERS", "`\\p{L}`.", letters)
        + "\n"
        + table("NUMBERS", "`\\p{N}`.", numbers)
    )
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print(f"wrote {path}: {len(letters)} letter ranges, {len(numbers)} number ranges")


def bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def slow_tokenizer(vocab_file: str, merges_file: str):
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        return transformers.RobertaTokenizer(vocab_file, merges_file), f"transformers {transformers.__version__} RobertaTokenizer (slow)"

    from transformers import AddedToken
    from transformers.tokenization_python import PythonBackend

    class SlowRobertaTokenizer(PythonBackend):
        """transformers 4's slow RobertaTokenizer, on transformers 5's slow-tokenizer base."""

        def __init__(self, vocab_file, merges_file):
            with open(vocab_file, encoding="utf-8") as f:
                self.encoder = json.load(f)
            self.decoder = {v: k for k, v in self.encoder.items()}
            self.byte_encoder = bytes_to_unicode()
            with open(merges_file, encoding="utf-8") as f:
                bpe_merges = f.read().split("\n")[1:-1]
            self.bpe_ranks = {tuple(m.split()): i for i, m in enumerate(bpe_merges)}
            self.cache = {}
            self.pat = regex.compile(PATTERN)
            # The special tokens as transformers 4 declared them: <mask> takes the whitespace
            # before it (lstrip), the others strip nothing.
            added = {
                self.encoder[t]: AddedToken(t, lstrip=t == "<mask>", rstrip=False, special=True, normalized=False)
                for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
            }
            super().__init__(
                bos_token="<s>",
                eos_token="</s>",
                sep_token="</s>",
                cls_token="<s>",
                unk_token="<unk>",
                pad_token="<pad>",
                mask_token="<mask>",
                added_tokens_decoder=added,
                special_tokens_pattern="cls_sep",
                model_max_length=1_000_000,
            )

        @property
        def vocab_size(self):
            return len(self.encoder)

        def get_vocab(self):
            return dict(self.encoder, **self.added_tokens_encoder)

        def bpe(self, token):
            if token in self.cache:
                return self.cache[token]
            word = tuple(token)
            while len(word) > 1:
                pairs = set(zip(word, word[1:]))
                bigram = min(pairs, key=lambda p: self.bpe_ranks.get(p, float("inf")))
                if bigram not in self.bpe_ranks:
                    break
                first, second = bigram
                new_word, i = [], 0
                while i < len(word):
                    try:
                        j = word.index(first, i)
                    except ValueError:
                        new_word.extend(word[i:])
                        break
                    new_word.extend(word[i:j])
                    i = j
                    if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                        new_word.append(first + second)
                        i += 2
                    else:
                        new_word.append(word[i])
                        i += 1
                word = tuple(new_word)
            out = " ".join(word)
            self.cache[token] = out
            return out

        def _tokenize(self, text, **kwargs):
            tokens = []
            for piece in self.pat.findall(text):
                piece = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
                tokens.extend(self.bpe(piece).split(" "))
            return tokens

        def _convert_token_to_id(self, token):
            return self.encoder.get(token, self.encoder.get(str(self.unk_token)))

        def _convert_id_to_token(self, index):
            return self.decoder.get(index)

    return SlowRobertaTokenizer(vocab_file, merges_file), (
        f"transformers 4's slow RobertaTokenizer algorithm on transformers {transformers.__version__} PythonBackend "
        f"(regex {regex.__version__})"
    )


def fast_tokenizer(tok_dir: str, vocab_file: str, merges_file: str):
    import tokenizers
    import transformers
    from transformers import AddedToken

    version = f"tokenizers {tokenizers.__version__} via transformers {transformers.__version__}"
    if int(transformers.__version__.split(".")[0]) < 5:
        return transformers.RobertaTokenizerFast(vocab_file, merges_file), f"{version} RobertaTokenizerFast"
    # Under 5, RobertaTokenizer(vocab_file=..., merges_file=...) ignores the files (a 5-token
    # vocabulary); from_pretrained reads them, but declares <mask> without lstrip unless told.
    mask = AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False)
    tok = transformers.RobertaTokenizer.from_pretrained(tok_dir, mask_token=mask, model_max_length=1_000_000)
    return tok, f"{version} RobertaTokenizer.from_pretrained"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-dir", default=default_tokenizer_dir())
    ap.add_argument("--texts", default=os.path.join(REPO, "fixtures", "tokenizer", "gemma-audiocaps.jsonl"))
    ap.add_argument("--out", default=os.path.join(REPO, "fixtures", "tokenizer", "roberta-audiocaps.jsonl"))
    ap.add_argument("--unicode-table", metavar="PATH", help="write the Rust \\p{L}/\\p{N} tables and exit")
    args = ap.parse_args()
    if args.unicode_table:
        unicode_table(args.unicode_table)
        return

    vocab_file = os.path.join(args.tokenizer_dir, "vocab.json")
    merges_file = os.path.join(args.tokenizer_dir, "merges.txt")
    for f in (vocab_file, merges_file):
        if not os.path.isfile(f):
            sys.exit(f"{f} not found: run `bash .ci/fetch-roberta-tokenizer.sh` or pass --tokenizer-dir")

    texts = []
    with open(args.texts, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                texts.append(json.loads(line)["text"])
    seen = set(texts)
    texts += [t for t in EXTRA if t not in seen and not seen.add(t)]

    slow, slow_name = slow_tokenizer(vocab_file, merges_file)
    fast, fast_name = fast_tokenizer(args.tokenizer_dir, vocab_file, merges_file)
    for name, tok in (("slow", slow), ("fast", fast)):
        mask = tok.added_tokens_decoder[tok.mask_token_id]
        assert mask.lstrip and not mask.rstrip, f"{name}: <mask> must be lstrip=True, rstrip=False"
        assert (tok.cls_token_id, tok.pad_token_id, tok.sep_token_id, tok.unk_token_id) == (0, 1, 2, 3), name

    rows, disagreements = [], []
    for text in texts:
        got = {}
        for name, tok in (("slow", slow), ("fast", fast)):
            full = tok(text)["input_ids"]
            short = tok(text, truncation=True, max_length=MAX_LENGTH)["input_ids"]
            got[name] = (list(full), list(short))
        if got["slow"] != got["fast"]:
            disagreements.append((text, got))
            continue
        full, short = got["fast"]
        assert full[0] == 0 and full[-1] == 2, text
        assert short == (full if len(full) <= MAX_LENGTH else full[: MAX_LENGTH - 1] + [2]), text
        rows.append({"text": text, "ids": full, "full_len": len(full), f"ids_{MAX_LENGTH}": short})
    if disagreements:
        for text, got in disagreements[:20]:
            print(f"slow/fast disagree on {text!r}:\n  slow {got['slow'][0]}\n  fast {got['fast'][0]}", file=sys.stderr)
        sys.exit(f"{len(disagreements)} of {len(texts)} texts tokenized differently by the two references")

    header = {
        "header": {
            "vocab_sha256": sha256(vocab_file),
            "merges_sha256": sha256(merges_file),
            "vocab_size": len(fast),
            "max_length": MAX_LENGTH,
            "count": len(rows),
            "source": "vocab.json + merges.txt from .ci/fetch-roberta-tokenizer.sh (GPT-2's BPE, RoBERTa layout)",
            "references": [fast_name, slow_name],
            "mask_lstrip": True,
        }
    }
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(header, ensure_ascii=False) + "\n")
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    longest = max(r["full_len"] for r in rows)
    over = sum(r["full_len"] > MAX_LENGTH for r in rows)
    print(f"wrote {args.out}: {len(rows)} texts (slow and fast agree on all), longest {longest} ids, {over} truncated at {MAX_LENGTH}")


if __name__ == "__main__":
    main()
