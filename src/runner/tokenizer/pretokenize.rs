//! Pre-tokenizer regexes for byte-level BPE, chosen by `tokenizer.ggml.pre` as llama.cpp does.
//!
//! Each regex in a list splits every current fragment into matches and the text between them
//! (both kept), and the next regex works on the result. `fancy-regex` is used because several
//! patterns need the `(?!\S)` lookahead; `\p{L}`/`\p{N}`/`\p{M}` are Unicode categories.

use fancy_regex::Regex;

/// GPT-2's pattern.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's pattern (case-insensitive contractions, numbers in groups of up to three).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's pattern: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's pattern: Qwen2's with combining marks (`\p{M}`) counted as part of words.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The regex list for a `tokenizer.ggml.pre` value, or `None` when it is not known.
pub fn patterns_for(pre: &str) -> Option<Vec<&'static str>> {
    Some(match pre {
        "gpt-2" | "gpt2" | "mpt" | "olmo" | "jais" | "phi-2" => vec![GPT2],
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" => vec![LLAMA3],
        "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" | "hunyuan" => vec![QWEN2],
        "qwen35" => vec![QWEN35],
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva" => {
            vec![r"\p{N}", GPT2]
        }
        "default" | "" => vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        _ => return None,
    })
}

/// A compiled pre-tokenizer.
#[derive(Debug, Clone)]
pub struct PreTokenizer {
    regexes: Vec<Regex>,
}

impl PreTokenizer {
    /// Compiles the patterns for `pre`, or `None` for a name this crate does not know
    /// (llama.cpp refuses those too: guessing would tokenize silently wrong).
    pub fn new(pre: &str) -> Option<PreTokenizer> {
        let regexes = patterns_for(pre)?
            .into_iter()
            .map(|p| Regex::new(p).ok())
            .collect::<Option<Vec<_>>>()?;
        Some(PreTokenizer { regexes })
    }

    /// Splits `text` into pre-token words (byte ranges into `text`).
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut words: Vec<&'a str> = if text.is_empty() {
            Vec::new()
        } else {
            vec![text]
        };
        for re in &self.regexes {
            let mut next = Vec::with_capacity(words.len() * 2);
            for w in words {
                split_one(re, w, &mut next);
            }
            words = next;
        }
        words
    }
}

fn split_one<'a>(re: &Regex, text: &'a str, out: &mut Vec<&'a str>) {
    let mut last = 0;
    for m in re.find_iter(text) {
        match m {
            Ok(m) => {
                if m.start() == m.end() {
                    continue;
                }
                if m.start() > last {
                    out.push(&text[last..m.start()]);
                }
                out.push(m.as_str());
                last = m.end();
            }
            // Backtracking limit hit (pathological input): keep the rest as one word rather
            // than fail; the BPE merge still gives a valid (if unusual) tokenization.
            Err(_) => break,
        }
    }
    if last < text.len() {
        out.push(&text[last..]);
    }
}

/// GPT-2's byte-to-character table: printable bytes map to themselves, the others to
/// U+0100 upwards in byte order, so every byte is a visible character.
pub fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            let c = next;
            next += 1;
            c
        };
        table[b as usize] = char::from_u32(c).expect("below the surrogate range");
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen2_splits() {
        let p = PreTokenizer::new("qwen2").unwrap();
        assert_eq!(
            p.split("Hello  world 123"),
            ["Hello", " ", " world", " ", "1", "2", "3"]
        );
        assert_eq!(p.split("don't\n\n x"), ["don", "'t", "\n\n", " x"]);
        assert!(p.split("").is_empty());
    }

    #[test]
    fn every_known_pattern_compiles() {
        for pre in ["gpt-2", "llama-bpe", "qwen2", "qwen35", "smollm", "default"] {
            assert!(PreTokenizer::new(pre).is_some(), "{pre}");
        }
        assert!(PreTokenizer::new("no-such-pre").is_none());
    }

    #[test]
    fn byte_table_is_a_bijection() {
        let t = byte_to_char_table();
        let mut seen: Vec<char> = t.to_vec();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 256);
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
    }
}
