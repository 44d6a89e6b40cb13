//! llama.cpp's GBNF grammars, translated to llguidance's Lark dialect.
//!
//! GBNF: `name ::= alternatives` one rule per line (a rule goes on past a newline only inside
//! parentheses or after `|`); literals `"..."`, character classes `[a-z]` / `[^...]`, `.`,
//! groups, `*` `+` `?` `{m}` `{m,}` `{m,n}`, `#` comments; the rule `root` is the start. The
//! escapes are llama.cpp's: `\n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH`.
//!
//! Lark keeps the structure rule for rule. Literals become JSON-quoted strings, classes and `.`
//! become regexes with every character written as `\x{HEX}` (so no character of the class can
//! end or bend the regex), and rule names become `g<index>_<name>` (Lark's rule names are
//! lower case; the index keeps `Foo` and `foo` apart). llguidance lexes literals greedily, as
//! its own GBNF converter does; grammars written for llama.cpp's character-level engine that
//! rely on a shorter match being taken can accept less here.

use std::collections::HashMap;
use std::fmt::Write;

use super::GrammarError;

/// Deepest nesting of parentheses accepted (the parser recurses on them).
const MAX_NESTING: usize = 64;

/// Largest repetition count accepted in `{m,n}` (llguidance expands repetitions).
const MAX_REPEAT: u32 = 4096;

/// One element of a sequence, with its repetition.
enum Item {
    Literal(String),
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Any,
    Rule(String),
    Group(Alternates),
    Repeat(Box<Item>, Repeat),
}

/// Alternatives: sequences of items.
type Alternates = Vec<Vec<Item>>;

/// A rule: its GBNF name and its alternatives.
type Rule = (String, Alternates);

#[derive(Clone, Copy)]
enum Repeat {
    Star,
    Plus,
    Optional,
    Range(u32, Option<u32>),
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

fn err(msg: impl Into<String>) -> GrammarError {
    GrammarError(format!("GBNF: {}", msg.into()))
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn at(&self) -> String {
        let line = self.s[..self.pos.min(self.s.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        format!("line {line}")
    }

    /// Skips blanks and comments, and newlines too when `newline_ok`.
    fn space(&mut self, newline_ok: bool) {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' => self.pos += 1,
                b'\r' | b'\n' if newline_ok => self.pos += 1,
                b'#' => {
                    while self.peek().is_some_and(|b| b != b'\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(err(format!("a rule name was expected at {}", self.at())));
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.pos]).into_owned())
    }

    fn hex(&mut self, digits: usize) -> Result<char, GrammarError> {
        let end = self.pos + digits;
        let h = self
            .s
            .get(self.pos..end)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .and_then(char::from_u32)
            .ok_or_else(|| err(format!("a bad \\x/\\u/\\U escape at {}", self.at())))?;
        self.pos = end;
        Ok(h)
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GrammarError> {
        let rest = std::str::from_utf8(&self.s[self.pos..])
            .map_err(|_| err("the grammar is not UTF-8"))?;
        let c = rest
            .chars()
            .next()
            .ok_or_else(|| err("unexpected end of the grammar"))?;
        self.pos += c.len_utf8();
        if c != '\\' {
            return Ok(c);
        }
        let e = self
            .peek()
            .ok_or_else(|| err("unexpected end of the grammar after '\\'"))?;
        self.pos += 1;
        Ok(match e {
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'x' => self.hex(2)?,
            b'u' => self.hex(4)?,
            b'U' => self.hex(8)?,
            b'\\' | b'"' | b'[' | b']' | b'/' | b'-' | b'^' => e as char,
            other => {
                return Err(err(format!(
                    "unknown escape '\\{}' at {}",
                    other as char,
                    self.at()
                )));
            }
        })
    }

    /// Calls `body` at each byte until `close`, then steps over `close`; the input ending
    /// first is an unterminated `what`.
    fn until(
        &mut self,
        close: u8,
        what: &str,
        mut body: impl FnMut(&mut Self) -> Result<(), GrammarError>,
    ) -> Result<(), GrammarError> {
        loop {
            match self.peek() {
                None => return Err(err(format!("an unterminated {what} at {}", self.at()))),
                Some(c) if c == close => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(_) => body(self)?,
            }
        }
    }

    fn literal(&mut self) -> Result<Item, GrammarError> {
        self.pos += 1; // the opening quote
        let mut text = String::new();
        self.until(b'"', "string", |p| {
            if p.peek() == Some(b'\n') {
                return Err(err(format!("a newline in a string at {}", p.at())));
            }
            text.push(p.char()?);
            Ok(())
        })?;
        Ok(Item::Literal(text))
    }

    fn class(&mut self) -> Result<Item, GrammarError> {
        self.pos += 1; // '['
        let negated = self.peek() == Some(b'^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        self.until(b']', "class", |p| {
            let lo = p.char()?;
            let hi = if p.peek() == Some(b'-') && p.s.get(p.pos + 1) != Some(&b']') {
                p.pos += 1;
                p.char()?
            } else {
                lo
            };
            if hi < lo {
                return Err(err(format!("an empty range in a class at {}", p.at())));
            }
            ranges.push((lo, hi));
            Ok(())
        })?;
        Ok(Item::Class { negated, ranges })
    }

    fn number(&mut self) -> Result<u32, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos])
            .ok()
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|&n| n <= MAX_REPEAT)
            .ok_or_else(|| {
                err(format!(
                    "a repetition count (0 to {MAX_REPEAT}) was expected at {}",
                    self.at()
                ))
            })
    }

    /// `{m}`, `{m,}` or `{m,n}`, the brace already seen.
    fn braces(&mut self) -> Result<Repeat, GrammarError> {
        self.pos += 1;
        self.space(true);
        let lo = self.number()?;
        self.space(true);
        let hi = if self.peek() == Some(b',') {
            self.pos += 1;
            self.space(true);
            if self.peek() == Some(b'}') {
                None
            } else {
                Some(self.number()?)
            }
        } else {
            Some(lo)
        };
        self.space(true);
        if self.peek() != Some(b'}') {
            return Err(err(format!("'}}' was expected at {}", self.at())));
        }
        self.pos += 1;
        if hi.is_some_and(|h| h < lo) {
            return Err(err(format!("a repetition {{{lo},n}} with n < {lo}")));
        }
        Ok(Repeat::Range(lo, hi))
    }

    fn sequence(&mut self, depth: usize) -> Result<Vec<Item>, GrammarError> {
        let nested = depth > 0;
        let mut items: Vec<Item> = Vec::new();
        loop {
            let item = match self.peek() {
                Some(b'"') => self.literal()?,
                Some(b'[') => self.class()?,
                Some(b'.') => {
                    self.pos += 1;
                    Item::Any
                }
                Some(b'(') => {
                    if depth >= MAX_NESTING {
                        return Err(err(format!("parentheses nested deeper than {MAX_NESTING}")));
                    }
                    self.pos += 1;
                    self.space(true);
                    let alts = self.alternates(depth + 1)?;
                    if self.peek() != Some(b')') {
                        return Err(err(format!("')' was expected at {}", self.at())));
                    }
                    self.pos += 1;
                    Item::Group(alts)
                }
                Some(b) if is_word(b) => Item::Rule(self.name()?),
                _ => return Ok(items),
            };
            items.push(item);
            self.space(nested);
            loop {
                let rep = match self.peek() {
                    Some(b'{') => self.braces()?,
                    Some(op @ (b'*' | b'+' | b'?')) => {
                        self.pos += 1;
                        match op {
                            b'*' => Repeat::Star,
                            b'+' => Repeat::Plus,
                            _ => Repeat::Optional,
                        }
                    }
                    _ => break,
                };
                let last = items.pop().expect("an item was just pushed");
                items.push(Item::Repeat(Box::new(last), rep));
                self.space(nested);
            }
        }
    }

    fn alternates(&mut self, depth: usize) -> Result<Alternates, GrammarError> {
        let mut alts = vec![self.sequence(depth)?];
        while self.peek() == Some(b'|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(depth)?);
        }
        Ok(alts)
    }

    fn rules(&mut self) -> Result<Vec<Rule>, GrammarError> {
        let mut rules: Vec<Rule> = Vec::new();
        loop {
            self.space(true);
            if self.peek().is_none() {
                return Ok(rules);
            }
            let name = self.name()?;
            self.space(false);
            if !self.s[self.pos..].starts_with(b"::=") {
                return Err(err(format!("'::=' was expected at {}", self.at())));
            }
            self.pos += 3;
            self.space(true);
            let alts = self.alternates(0)?;
            self.space(false);
            match self.peek() {
                None | Some(b'\n') | Some(b'\r') => {}
                Some(b) => {
                    return Err(err(format!("unexpected '{}' at {}", b as char, self.at())));
                }
            }
            if rules.iter().any(|(n, _)| *n == name) {
                return Err(err(format!("the rule '{name}' is defined twice")));
            }
            rules.push((name, alts));
        }
    }
}

/// Writes `c` for a regex: always as `\x{HEX}`.
fn rx_char(out: &mut String, c: char) {
    let _ = write!(out, "\\x{{{:X}}}", c as u32);
}

struct Emitter<'a> {
    names: &'a HashMap<&'a str, String>,
}

impl Emitter<'_> {
    fn item(&self, out: &mut String, item: &Item) -> Result<(), GrammarError> {
        match item {
            Item::Literal(t) => {
                out.push_str(&serde_json::to_string(t).expect("a string serializes"));
            }
            Item::Class { negated, ranges } => {
                out.push_str("/[");
                if *negated {
                    out.push('^');
                }
                for &(lo, hi) in ranges {
                    rx_char(out, lo);
                    if hi != lo {
                        out.push('-');
                        rx_char(out, hi);
                    }
                }
                out.push_str("]/");
            }
            Item::Any => out.push_str("/(?s:.)/"),
            Item::Rule(n) => {
                let lark = self
                    .names
                    .get(n.as_str())
                    .ok_or_else(|| err(format!("the rule '{n}' is used but never defined")))?;
                out.push_str(lark);
            }
            Item::Group(alts) => {
                out.push('(');
                self.alternates(out, alts)?;
                out.push(')');
            }
            Item::Repeat(inner, rep) => {
                if let Repeat::Range(_, Some(0)) = rep {
                    out.push_str("\"\"");
                    return Ok(());
                }
                if let Item::Group(_) = **inner {
                    self.item(out, inner)?;
                } else {
                    out.push('(');
                    self.item(out, inner)?;
                    out.push(')');
                }
                match rep {
                    Repeat::Star => out.push('*'),
                    Repeat::Plus => out.push('+'),
                    Repeat::Optional => out.push('?'),
                    Repeat::Range(lo, Some(hi)) => {
                        let _ = write!(out, "{{{lo},{hi}}}");
                    }
                    Repeat::Range(lo, None) => {
                        let _ = write!(out, "{{{lo},}}");
                    }
                }
            }
        }
        Ok(())
    }

    fn alternates(&self, out: &mut String, alts: &[Vec<Item>]) -> Result<(), GrammarError> {
        for (i, seq) in alts.iter().enumerate() {
            if i > 0 {
                out.push_str(" | ");
            }
            if seq.is_empty() {
                out.push_str("\"\"");
            }
            for (j, item) in seq.iter().enumerate() {
                if j > 0 {
                    out.push(' ');
                }
                self.item(out, item)?;
            }
        }
        Ok(())
    }
}

/// Translates a GBNF grammar into llguidance's Lark (see the module's documentation).
pub fn gbnf_to_lark(src: &str) -> Result<String, GrammarError> {
    let rules = Parser {
        s: src.as_bytes(),
        pos: 0,
    }
    .rules()?;
    let names: HashMap<&str, String> = rules
        .iter()
        .enumerate()
        .map(|(i, (n, _))| {
            let clean: String = n
                .chars()
                .map(|c| match c {
                    'a'..='z' | '0'..='9' => c,
                    'A'..='Z' => c.to_ascii_lowercase(),
                    _ => '_',
                })
                .collect();
            (n.as_str(), format!("g{i}_{clean}"))
        })
        .collect();
    let root = names
        .get("root")
        .ok_or_else(|| err("the grammar has no 'root' rule"))?;
    let mut out = format!("start: {root}\n");
    let em = Emitter { names: &names };
    for (n, alts) in &rules {
        out.push_str(&names[n.as_str()]);
        out.push_str(": ");
        em.alternates(&mut out, alts)?;
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_literals_classes_and_repetitions_translate() {
        let g = r#"
# a comment
root ::= greeting ("," ws Name)* [^\]a-c\n]? .{2,3}
greeting ::= "hi \"you\"" | "yo\x21"
ws ::= [ \t]+
Name ::= [A-Z] [a-z]{0,}
"#;
        let lark = gbnf_to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: g0_root\n\
             g0_root: g1_greeting (\",\" g2_ws g3_name)* (/[^\\x{5D}\\x{61}-\\x{63}\\x{A}]/)? (/(?s:.)/){2,3}\n\
             g1_greeting: \"hi \\\"you\\\"\" | \"yo!\"\n\
             g2_ws: (/[\\x{20}\\x{9}]/)+\n\
             g3_name: /[\\x{41}-\\x{5A}]/ (/[\\x{61}-\\x{7A}]/){0,}\n"
        );
    }

    #[test]
    fn bad_grammars_name_the_problem() {
        for (g, want) in [
            ("root ::= foo", "never defined"),
            ("start ::= \"a\"", "no 'root'"),
            ("root ::= \"a", "unterminated string"),
            ("root ::= [a-", "unexpected end"),
            ("root ::= [ab", "unterminated class"),
            ("root ::= [z-a]", "empty range"),
            ("root ::= (\"a\"", "')'"),
            ("root = \"a\"", "'::='"),
            ("root ::= \"a\"{3,1}", "n < 3"),
            ("root ::= \"a\"{99999}", "repetition count"),
            ("root ::= \"\\q\"", "unknown escape"),
            ("root ::= \"a\" )", "unexpected ')'"),
            ("root ::= \"a\"\nroot ::= \"b\"", "defined twice"),
        ] {
            let e = gbnf_to_lark(g).unwrap_err();
            assert!(e.0.contains(want), "{g:?}: {e}");
        }
        let deep = format!("root ::= {}\"a\"{}", "(".repeat(100), ")".repeat(100));
        assert!(gbnf_to_lark(&deep).unwrap_err().0.contains("nested"));
    }
}
