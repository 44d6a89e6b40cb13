//! Tokenizers built from a GGUF file's `tokenizer.ggml.*` metadata, reproducing llama.cpp's
//! `llama_tokenize` (special-token partition, SentencePiece merges, byte-level BPE with the
//! pre-tokenizer named by `tokenizer.ggml.pre`) and its detokenizer.

mod bpe;
mod merge;
mod pretokenize;
mod spm;

use std::collections::{HashMap, HashSet};

pub use pretokenize::{PreTokenizer, byte_to_char_table, patterns_for};

use super::error::{GgufError, Result};
use super::gguf::GgufFile;

/// The tokenizer family (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// `llama`: SentencePiece-style with scores and `<0xNN>` byte fallback.
    Spm,
    /// `gpt2`: byte-level BPE with merge ranks.
    Bpe,
}

/// A token's type (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    /// 0, or any value outside 1..=6.
    Undefined,
    /// 1: ordinary text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: control tokens (BOS, EOS, chat markers): matched in text only with `parse_special`,
    /// rendered only when asked.
    Control,
    /// 4: user-defined tokens: always matched in text, rendered verbatim.
    UserDefined,
    /// 5: unused.
    Unused,
    /// 6: a raw byte (`<0xNN>`).
    Byte,
}

impl TokenType {
    fn from_i64(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// The token list and lookups shared by both algorithms.
#[derive(Debug, Clone)]
pub(crate) struct Vocab {
    tokens: Vec<String>,
    token_to_id: HashMap<String, u32>,
    scores: Vec<f32>,
    types: Vec<TokenType>,
    byte_tokens: Vec<Option<u32>>,
    ignore_merges: bool,
}

impl Vocab {
    pub(crate) fn token_id(&self, s: &str) -> Option<u32> {
        self.token_to_id.get(s).copied()
    }

    pub(crate) fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }

    /// The token for a raw byte: `<0xNN>`, else the byte itself as a one-character token.
    pub(crate) fn byte_token(&self, b: u8) -> Option<u32> {
        self.byte_tokens[b as usize]
    }

    fn token_type(&self, id: u32) -> TokenType {
        self.types
            .get(id as usize)
            .copied()
            .unwrap_or(TokenType::Normal)
    }
}

/// Token texts that end a generation in llama.cpp besides EOS/EOT/EOM.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// A tokenizer: text to ids and ids back to bytes.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    kind: TokenizerKind,
    pre_name: String,
    vocab: Vocab,
    merges: bpe::Merges,
    pre: Option<PreTokenizer>,
    byte_to_char: [char; 256],
    char_to_byte: HashMap<char, u8>,
    special: Vec<u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    eog: HashSet<u32>,
}

enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

impl Tokenizer {
    /// Builds the tokenizer described by `tokenizer.ggml.*` in `gguf`.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer> {
        let kind = read_kind(gguf)?;
        let spm = kind == TokenizerKind::Spm;
        // BitNet b1.58 2B-4T's file has llama3's vocabulary but no `tokenizer.ggml.pre`: its
        // architecture implies llama3's pre-tokenizer.
        let implied = match gguf.architecture() {
            Ok("bitnet-b1.58" | "bitnet-25") if kind == TokenizerKind::Bpe => "llama-bpe",
            _ => "default",
        };
        let pre_name = gguf
            .opt_str("tokenizer.ggml.pre")?
            .unwrap_or(implied)
            .to_string();
        let llama3 = matches!(pre_name.as_str(), "llama3" | "llama-v3" | "llama-bpe");
        let vocab = Vocab::from_gguf(gguf, llama3)?;
        let merges = read_merges(gguf, kind)?;
        let ids = SpecialIds::read(gguf, kind, vocab.tokens.len())?;
        let add_bos = gguf
            .opt_bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(spm || llama3);
        let add_eos = gguf
            .opt_bool("tokenizer.ggml.add_eos_token")?
            .unwrap_or(false);
        let add_space_prefix = gguf
            .opt_bool("tokenizer.ggml.add_space_prefix")?
            .unwrap_or(spm);
        let pre = pre_tokenizer(kind, &pre_name)?;
        let special = special_tokens(&vocab);
        let mut eog: HashSet<u32> = [ids.eos, ids.eot, ids.eom].into_iter().flatten().collect();
        for t in EOG_TEXTS {
            if let Some(id) = vocab.token_id(t) {
                eog.insert(id);
            }
        }
        let byte_to_char = byte_to_char_table();
        let char_to_byte = byte_to_char
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        Ok(Tokenizer {
            kind,
            pre_name,
            vocab,
            merges,
            pre,
            byte_to_char,
            char_to_byte,
            special,
            bos: ids.bos,
            eos: ids.eos,
            eot: ids.eot,
            unk: ids.unk,
            add_bos,
            add_eos,
            add_space_prefix,
            eog,
        })
    }

    /// Tokenizer family.
    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }

    /// `tokenizer.ggml.pre` (when absent: `llama-bpe` for a BitNet b1.58 BPE vocabulary,
    /// else `default`).
    pub fn pre(&self) -> &str {
        &self.pre_name
    }

    /// Vocabulary size.
    pub fn n_vocab(&self) -> usize {
        self.vocab.tokens.len()
    }

    /// Number of BPE merges (0 for SentencePiece).
    pub fn n_merges(&self) -> usize {
        self.merges.len()
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// End-of-turn token, when the file names one.
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    /// Unknown token.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether generation stops at `id` (EOS, EOT, EOM and the usual end-of-turn markers).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The token's text as stored in the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.tokens.get(id as usize).map(String::as_str)
    }

    /// The token's type.
    pub fn token_type(&self, id: u32) -> TokenType {
        self.vocab.token_type(id)
    }

    /// The token with this exact text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.token_id(text)
    }

    /// Tokenizes `text` as llama.cpp's `llama_tokenize(text, add_special, parse_special)`:
    /// `add_special` adds BOS/EOS as the vocabulary asks; `parse_special` lets control tokens
    /// written in the text (`<|im_start|>`) become those tokens (user-defined tokens always do).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        if add_special
            && self.add_bos
            && let Some(b) = self.bos
        {
            out.push(b);
        }
        let fragments = if text.is_empty() {
            Vec::new()
        } else {
            self.partition(text, parse_special)
        };
        match self.kind {
            TokenizerKind::Spm => {
                // A space is prefixed to the text at the start and after each special token.
                let mut prev_special = true;
                for f in fragments {
                    match f {
                        Fragment::Text(t) => {
                            let mut s = String::with_capacity(t.len() + 3);
                            if self.add_space_prefix && prev_special {
                                s.push('\u{2581}');
                            }
                            s.push_str(&t.replace(' ', "\u{2581}"));
                            spm::tokenize(&self.vocab, &s, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            TokenizerKind::Bpe => {
                let pre = self.pre.as_ref();
                let mut word = String::new();
                for f in fragments {
                    match f {
                        Fragment::Text(t) => {
                            for w in pre.map(|p| p.split(t)).unwrap_or_else(|| vec![t]) {
                                word.clear();
                                word.extend(w.bytes().map(|b| self.byte_to_char[b as usize]));
                                bpe::tokenize_word(&self.vocab, &self.merges, &word, &mut out);
                            }
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special
            && self.add_eos
            && let Some(e) = self.eos
        {
            out.push(e);
        }
        out
    }

    /// Splits `text` around occurrences of special tokens (longest tokens first).
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut frags = vec![Fragment::Text(text)];
        // Special tokens whose first byte does not occur in the text cannot match: this skips
        // nearly all of them without a substring search.
        let mut present = [false; 256];
        for b in text.bytes() {
            present[b as usize] = true;
        }
        for &id in &self.special {
            let ty = self.vocab.token_type(id);
            if !parse_special && matches!(ty, TokenType::Control | TokenType::Unknown) {
                continue;
            }
            let pat = self.vocab.tokens[id as usize].as_str();
            if !present[pat.as_bytes()[0] as usize] {
                continue;
            }
            // Cheap pre-check: most special tokens occur nowhere.
            if !frags
                .iter()
                .any(|f| matches!(f, Fragment::Text(t) if t.contains(pat)))
            {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(mut t) => {
                        while let Some(pos) = t.find(pat) {
                            if pos > 0 {
                                next.push(Fragment::Text(&t[..pos]));
                            }
                            next.push(Fragment::Token(id));
                            t = &t[pos + pat.len()..];
                        }
                        if !t.is_empty() {
                            next.push(Fragment::Text(t));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    /// The bytes token `id` stands for (llama.cpp's `token_to_piece`): control and unknown
    /// tokens are empty unless `render_special`; byte tokens give their byte; byte-level BPE
    /// pieces are mapped back to bytes. Unknown ids give nothing.
    pub fn token_to_piece(&self, id: u32, render_special: bool) -> Vec<u8> {
        let Some(text) = self.token_text(id) else {
            return Vec::new();
        };
        match self.vocab.token_type(id) {
            TokenType::Control | TokenType::Unknown => {
                if render_special {
                    text.as_bytes().to_vec()
                } else {
                    Vec::new()
                }
            }
            TokenType::UserDefined => text.as_bytes().to_vec(),
            TokenType::Unused => Vec::new(),
            TokenType::Byte if self.kind == TokenizerKind::Spm => {
                match text
                    .strip_prefix("<0x")
                    .and_then(|h| h.strip_suffix('>'))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => vec![b],
                    None => text.as_bytes().to_vec(),
                }
            }
            _ => match self.kind {
                TokenizerKind::Spm => text.replace('\u{2581}', " ").into_bytes(),
                TokenizerKind::Bpe => {
                    let mut out = Vec::with_capacity(text.len());
                    for c in text.chars() {
                        match self.char_to_byte.get(&c) {
                            Some(&b) => out.push(b),
                            // Not a byte-level character: keep it as UTF-8.
                            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                    out
                }
            },
        }
    }

    /// Concatenated pieces of `ids` (may be invalid UTF-8 when cut mid-character).
    pub fn decode(&self, ids: &[u32], render_special: bool) -> Vec<u8> {
        ids.iter()
            .flat_map(|&id| self.token_to_piece(id, render_special))
            .collect()
    }

    /// [`decode`](Self::decode) as a string, invalid UTF-8 replaced by U+FFFD.
    pub fn decode_lossy(&self, ids: &[u32], render_special: bool) -> String {
        String::from_utf8_lossy(&self.decode(ids, render_special)).into_owned()
    }

    /// A decoder for generated ids that only ever emits whole UTF-8 characters.
    pub fn stream_decoder(&self, render_special: bool) -> StreamDecoder<'_> {
        StreamDecoder {
            tokenizer: self,
            pending: Vec::new(),
            render_special,
        }
    }
}

/// Turns a stream of ids into text without splitting UTF-8 characters: bytes of a character
/// that spans several tokens (byte fallback, byte-level pieces) wait until it is complete.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    pending: Vec<u8>,
    render_special: bool,
}

impl StreamDecoder<'_> {
    /// Adds one token; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        let piece = self.tokenizer.token_to_piece(id, self.render_special);
        self.pending.extend_from_slice(&piece);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..good]).unwrap_or_default());
                    match e.error_len() {
                        // Bytes that can never become valid: replace them and go on.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + bad);
                        }
                        // An incomplete character at the end: keep it for the next token.
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// Flushes what is left (an unfinished character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }
}

/// The tokenizer family `tokenizer.ggml.model` names.
fn read_kind(gguf: &GgufFile) -> Result<TokenizerKind> {
    let model = gguf.get_str("tokenizer.ggml.model")?;
    Ok(match model {
        "llama" => TokenizerKind::Spm,
        "gpt2" => TokenizerKind::Bpe,
        other => {
            return Err(GgufError::Tokenizer {
                reason: format!("tokenizer.ggml.model {other:?} is not supported (llama, gpt2)"),
            });
        }
    })
}

impl Vocab {
    /// Tokens, scores and types (each list either absent or one entry per token), the reverse
    /// map, and the token of each byte (`<0xAB>`, or the ASCII character itself).
    fn from_gguf(gguf: &GgufFile, ignore_merges: bool) -> Result<Vocab> {
        let tokens = gguf.get_str_array("tokenizer.ggml.tokens")?.to_vec();
        let n = tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(GgufError::Tokenizer {
                reason: format!("{n} tokens in tokenizer.ggml.tokens"),
            });
        }
        let scores = match gguf.get("tokenizer.ggml.scores") {
            Some(_) => gguf.get_f32_array("tokenizer.ggml.scores")?,
            None => Vec::new(),
        };
        let types: Vec<TokenType> = match gguf.get("tokenizer.ggml.token_type") {
            Some(_) => gguf
                .get_i64_array("tokenizer.ggml.token_type")?
                .into_iter()
                .map(TokenType::from_i64)
                .collect(),
            None => Vec::new(),
        };
        for (key, len) in [("scores", scores.len()), ("token_type", types.len())] {
            if len != 0 && len != n {
                return Err(GgufError::Tokenizer {
                    reason: format!("tokenizer.ggml.{key} has {len} entries for {n} tokens"),
                });
            }
        }
        let mut token_to_id = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            // Later duplicates win, as in llama.cpp's map insertion.
            token_to_id.insert(t.clone(), i as u32);
        }
        let mut byte_tokens = vec![None; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            *slot = token_to_id
                .get(&format!("<0x{b:02X}>"))
                .copied()
                .or_else(|| {
                    let c = char::from_u32(b as u32).filter(|_| b < 0x80)?;
                    token_to_id.get(c.to_string().as_str()).copied()
                });
        }
        Ok(Vocab {
            tokens,
            token_to_id,
            scores,
            types,
            byte_tokens,
            ignore_merges,
        })
    }
}

/// The BPE merges (required for BPE, none for SentencePiece).
fn read_merges(gguf: &GgufFile, kind: TokenizerKind) -> Result<bpe::Merges> {
    Ok(match kind {
        TokenizerKind::Bpe => match gguf.get("tokenizer.ggml.merges") {
            Some(_) => bpe::Merges::new(gguf.get_str_array("tokenizer.ggml.merges")?),
            None => {
                return Err(GgufError::MissingKey {
                    key: "tokenizer.ggml.merges".into(),
                });
            }
        },
        TokenizerKind::Spm => bpe::Merges::default(),
    })
}

/// The special token ids the metadata names (out-of-range ids are none); SentencePiece files
/// without the keys get its defaults (unk 0, bos 1, eos 2).
struct SpecialIds {
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
}

impl SpecialIds {
    fn read(gguf: &GgufFile, kind: TokenizerKind, n: usize) -> Result<SpecialIds> {
        let id_key = |key: &str| -> Result<Option<u32>> {
            Ok(gguf
                .get(key)
                .and_then(|v| v.as_u64())
                .filter(|&id| id < n as u64)
                .map(|id| id as u32))
        };
        let spm = kind == TokenizerKind::Spm;
        let default_id = |id: u32| (spm && (id as usize) < n).then_some(id);
        let bos = if gguf.get("tokenizer.ggml.bos_token_id").is_some() {
            id_key("tokenizer.ggml.bos_token_id")?
        } else {
            default_id(1)
        };
        let eos = if gguf.get("tokenizer.ggml.eos_token_id").is_some() {
            id_key("tokenizer.ggml.eos_token_id")?
        } else {
            default_id(2)
        };
        let unk = if gguf.get("tokenizer.ggml.unknown_token_id").is_some() {
            id_key("tokenizer.ggml.unknown_token_id")?
        } else {
            default_id(0)
        };
        let eot = id_key("tokenizer.ggml.eot_token_id")?;
        let eom = id_key("tokenizer.ggml.eom_token_id")?;
        Ok(SpecialIds {
            bos,
            eos,
            unk,
            eot,
            eom,
        })
    }
}

/// The pre-tokenizer `tokenizer.ggml.pre` names (BPE only).
fn pre_tokenizer(kind: TokenizerKind, pre_name: &str) -> Result<Option<PreTokenizer>> {
    Ok(match kind {
        TokenizerKind::Bpe => {
            Some(
                PreTokenizer::new(pre_name).ok_or_else(|| GgufError::Tokenizer {
                    reason: format!(
                        "unknown pre-tokenizer tokenizer.ggml.pre = {pre_name:?} (known: gpt-2, \
                     llama-bpe/llama3, qwen2, qwen35, smollm/starcoder, default, ...)"
                    ),
                })?,
            )
        }
        TokenizerKind::Spm => None,
    })
}

/// The tokens matched in raw text before the model sees it (control, user-defined, unknown),
/// longest first.
fn special_tokens(vocab: &Vocab) -> Vec<u32> {
    let mut special: Vec<u32> = (0..vocab.tokens.len() as u32)
        .filter(|&id| {
            matches!(
                vocab.token_type(id),
                TokenType::Control | TokenType::UserDefined | TokenType::Unknown
            ) && !vocab.tokens[id as usize].is_empty()
        })
        .collect();
    special.sort_by_key(|&id| std::cmp::Reverse(vocab.tokens[id as usize].len()));
    special
}
