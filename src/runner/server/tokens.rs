//! llama-server's small endpoints: `POST /tokenize`, `POST /detokenize` and `GET /props`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::api::ApiError;
use super::app::{AppState, object_body, off_thread};

fn flag(m: &Map<String, Value>, name: &str, default: bool) -> Result<bool, ApiError> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(
            "invalid_type",
            format!("'{name}' must be a boolean"),
        )),
    }
}

/// `{"content": text, "add_special": false, "parse_special": true, "with_pieces": false}` ->
/// `{"tokens": [ids]}` (with pieces: `[{"id", "piece"}]`), tokenized as `libt2p run` does
/// (`add_special` is its BOS).
pub async fn tokenize(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = object_body(body)?;
    let content = match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "invalid_type",
                "'content' must be a string",
            ));
        }
        None => return Err(ApiError::invalid("missing_field", "'content' is required")),
    };
    let add_special = flag(&m, "add_special", false)?;
    let parse_special = flag(&m, "parse_special", true)?;
    let with_pieces = flag(&m, "with_pieces", false)?;
    let tok = st.tokenizer.clone();
    // Off the async threads: the text can be megabytes.
    let tokens = off_thread(move || {
        let ids = tok.encode(&content, add_special, parse_special);
        if !with_pieces {
            return json!(ids);
        }
        ids.iter()
            .map(|&id| {
                let piece = tok.token_to_piece(id, true);
                let piece = match String::from_utf8(piece) {
                    Ok(s) => json!(s),
                    // As llama-server: a piece that is not UTF-8 on its own is its bytes.
                    Err(e) => json!(e.into_bytes()),
                };
                json!({"id": id, "piece": piece})
            })
            .collect::<Value>()
    })
    .await?;
    Ok(axum::Json(json!({"tokens": tokens})).into_response())
}

/// `{"tokens": [ids]}` -> `{"content": text}` (special tokens rendered, invalid UTF-8 as
/// U+FFFD).
pub async fn detokenize(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let m = object_body(body)?;
    let bad = || {
        ApiError::invalid(
            "invalid_value",
            format!(
                "'tokens' must be an array of token ids below the vocabulary size {}",
                st.n_vocab
            ),
        )
    };
    let ids = match m.get("tokens") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v.as_u64() {
                Some(id) if (id as usize) < st.n_vocab => Ok(id as u32),
                _ => Err(bad()),
            })
            .collect::<Result<Vec<u32>, _>>()?,
        Some(_) => return Err(bad()),
        None => return Err(ApiError::invalid("missing_field", "'tokens' is required")),
    };
    let tok = st.tokenizer.clone();
    let content = off_thread(move || tok.decode_lossy(&ids, true)).await?;
    Ok(axum::Json(json!({"content": content})).into_response())
}

/// The server's settings, as llama-server's `/props`: model path and name, context size, chat
/// template, number of slots and the sampling defaults.
pub async fn props(State(st): State<Arc<AppState>>) -> Response {
    axum::Json(st.props.clone()).into_response()
}
