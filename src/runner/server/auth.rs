//! The API key (`--api-key`): where a request gives it, and the comparison.

use axum::http::header;

/// The key a request gives: `Authorization: Bearer KEY` (the scheme in any case, as HTTP
/// says) or `x-api-key: KEY` (Anthropic-style clients).
pub fn given_key(headers: &header::HeaderMap) -> Option<&[u8]> {
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.as_bytes();
        let scheme = b"bearer ";
        if v.len() > scheme.len() && v[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return Some(v[scheme.len()..].trim_ascii());
        }
    }
    headers.get("x-api-key").map(|v| v.as_bytes().trim_ascii())
}

/// Whether `a == b`, in a time that depends on their lengths only (no early exit at the
/// first difference, which would let a client find the key byte by byte from the timing).
pub fn same_key(a: &[u8], b: &[u8]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // `black_box` keeps the optimizer from turning the fold back into an early exit.
    std::hint::black_box(diff) == 0 && a.len() == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn the_key_comes_from_bearer_in_any_case_or_x_api_key() {
        assert_eq!(
            given_key(&headers(&[("authorization", "Bearer k1")])),
            Some(&b"k1"[..])
        );
        assert_eq!(
            given_key(&headers(&[("authorization", "bEaReR  k1 ")])),
            Some(&b"k1"[..])
        );
        assert_eq!(
            given_key(&headers(&[("x-api-key", "k2")])),
            Some(&b"k2"[..])
        );
        assert_eq!(given_key(&headers(&[("authorization", "Basic k1")])), None);
        assert_eq!(given_key(&headers(&[])), None);
        assert!(same_key(b"secret", b"secret"));
        assert!(!same_key(b"secret", b"secreT"));
        assert!(!same_key(b"secret", b"secret2"));
        assert!(!same_key(b"", b"secret"));
    }
}
