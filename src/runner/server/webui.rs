//! The chat page at the server's root (`--webui`, on by default): one HTML page, its script
//! modules and its style sheet, embedded in the binary (no build step, no network) and served
//! with a `Content-Security-Policy` that allows only this origin's scripts and styles (no inline
//! script, no inline handler, no other origin), so that even a rendering bug could not run text
//! the model wrote. The page is static and open: the API key guards the API it calls, and the
//! page asks for the key when the API answers 401.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};

use super::api::ApiError;

/// Every file of the page: path, `Content-Type`, contents.
const FILES: &[(&str, &str, &str)] = &[
    ("/", HTML, include_str!("webui/index.html")),
    ("/index.html", HTML, include_str!("webui/index.html")),
    ("/app.js", JS, include_str!("webui/app.js")),
    ("/markdown.js", JS, include_str!("webui/markdown.js")),
    ("/style.css", CSS, include_str!("webui/style.css")),
];

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Scripts and styles from this origin only (no inline script or handler, no `eval`), requests
/// to this origin only, nothing else loaded; the page cannot be framed (clickjacking) nor post
/// forms anywhere.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                       img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `router` with the page's routes added (outside its API-key check: the page holds no data).
pub fn with_page<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    FILES.iter().fold(router, |r, &(path, kind, body)| {
        r.route(path, file(kind, body))
    })
}

/// `router` with the page's routes when `on` (`--webui`), as it is otherwise.
pub fn maybe_with_page<S: Clone + Send + Sync + 'static>(router: Router<S>, on: bool) -> Router<S> {
    if on { with_page(router) } else { router }
}

/// GET (and HEAD) of one file; other methods are a 405 in the API's error shape.
fn file<S: Clone + Send + Sync + 'static>(
    kind: &'static str,
    body: &'static str,
) -> MethodRouter<S> {
    get(move || async move { respond(kind, body) }).fallback(|| async {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            "the page's files are read with GET",
        )
    })
}

fn respond(kind: &'static str, body: &'static str) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // Revalidated on every load: a new binary's page is never mixed with an old script.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

#[cfg(test)]
mod tests {
    /// The page must never need an inline script or handler: the CSP would block it.
    #[test]
    fn page_has_no_inline_script_or_handler() {
        let html = include_str!("webui/index.html");
        for tag in html.split("<script").skip(1) {
            let head = &tag[..tag.find('>').expect("a closed tag")];
            assert!(head.contains("src="), "inline script: <script{head}>");
        }
        let lower = html.to_ascii_lowercase();
        // An attribute `on<letters>=` after whitespace is an inline handler.
        for (i, _) in lower.match_indices("on") {
            let before = lower[..i].chars().next_back();
            let name: String = lower[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            let after = lower[i + name.len()..].trim_start().starts_with('=');
            assert!(
                !(before.is_some_and(char::is_whitespace) && after),
                "an inline handler {name}= in index.html"
            );
        }
        assert!(
            !lower.contains("style="),
            "an inline style attribute in index.html"
        );
        assert!(
            !lower.contains("<style"),
            "an inline style sheet in index.html"
        );
        assert!(
            !lower.contains("http://") && !lower.contains("https://"),
            "another origin"
        );
    }

    /// Model output, names and errors reach the DOM as text: the scripts never parse HTML.
    #[test]
    fn scripts_never_parse_html() {
        for (name, js) in [
            ("app.js", include_str!("webui/app.js")),
            ("markdown.js", include_str!("webui/markdown.js")),
        ] {
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
                "DOMParser",
                "createContextualFragment",
            ] {
                assert!(!js.contains(sink), "{name} uses {sink}");
            }
        }
    }
}
