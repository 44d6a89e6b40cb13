//! CORS (`--cors-origin`): lets a web page of the given origin (or any, with `*`) call the
//! server. Preflight `OPTIONS` requests are answered here, before the API key check and the
//! body read (browsers send them without credentials); every other answer to an allowed origin
//! carries `Access-Control-Allow-Origin`. Without `--cors-origin` nothing changes: browsers
//! refuse cross-origin calls, as they should for a server that did not ask for them.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::app::AppState;

/// The request headers a page may send (what the OpenAI clients send).
const ALLOW_HEADERS: &str = "authorization, content-type, x-api-key, x-stainless-arch, x-stainless-lang, x-stainless-os, x-stainless-package-version, x-stainless-retry-count, x-stainless-runtime, x-stainless-runtime-version, x-stainless-timeout, openai-organization, openai-project";

/// The `Access-Control-Allow-Origin` value for a request from `origin`, if it is allowed.
pub fn allowed(configured: Option<&str>, origin: Option<&HeaderValue>) -> Option<HeaderValue> {
    let configured = configured?;
    let origin = origin?;
    if configured == "*" {
        Some(HeaderValue::from_static("*"))
    } else if origin.as_bytes() == configured.trim_end_matches('/').as_bytes() {
        Some(origin.clone())
    } else {
        None
    }
}

/// The middleware: answers preflights of allowed origins, marks the other answers.
pub async fn cors(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let allow = allowed(st.cors_origin.as_deref(), req.headers().get(header::ORIGIN));
    let Some(allow) = allow else {
        let mut resp = next.run(req).await;
        // The answer depends on the origin whenever one origin is configured: a shared cache
        // must not hand this header-less answer to the allowed origin.
        if st.cors_origin.as_deref().is_some_and(|o| o != "*") {
            resp.headers_mut()
                .append(header::VARY, HeaderValue::from_static("Origin"));
        }
        return resp;
    };
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        // Echo what the page asks for when it is a well-formed list; the fixed list else.
        let asked = req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .filter(|v| {
                v.to_str().is_ok_and(|s| {
                    s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_, ".contains(&b))
                })
            })
            .cloned();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            asked.unwrap_or(HeaderValue::from_static(ALLOW_HEADERS)),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("86400"),
        );
        r
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_configured_origin_is_allowed() {
        let o = HeaderValue::from_static("https://app.example");
        assert_eq!(allowed(None, Some(&o)), None);
        assert_eq!(allowed(Some("*"), Some(&o)).unwrap(), "*");
        assert_eq!(allowed(Some("https://app.example/"), Some(&o)).unwrap(), o);
        assert_eq!(allowed(Some("https://other.example"), Some(&o)), None);
        assert_eq!(allowed(Some("*"), None), None);
    }
}
