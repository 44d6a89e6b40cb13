//! `libt2p chat`: a multi-turn conversation rendered with the model's own chat template.
//!
//! Each turn re-renders the whole conversation, keeps the part of the KV cache that still
//! matches the new tokens and evaluates only the rest.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use t2p::runner::chat::{ChatTemplate, Message};
use t2p::runner::generate::Decoder;
use t2p::runner::model::Session;

use crate::run::GenerateArgs;
use t2p::runner::constrain::Constraint;

/// Options of `libt2p chat`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    generate: GenerateArgs,
    /// A system message to start the conversation with.
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per answer.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    n_predict: usize,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (loaded, _) = args.generate.model.load(false)?;
    let tok = &loaded.tokenizer;
    let template = ChatTemplate::from_gguf(&loaded.gguf, tok)?
        .ok_or("the model has no tokenizer.chat_template")?;
    let exec = args.generate.model.exec();
    let n_ctx = args.generate.model.n_ctx(&loaded);
    let mut session = loaded.model.new_session(n_ctx);
    let mut in_cache: Vec<u32> = Vec::new();
    let mut sampler = args.generate.sample.sampler();
    let grammar = args.generate.sample.constraint(&loaded.tokenizer)?;
    let mut messages: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::new("system", s))
        .collect();
    let stdin = std::io::stdin();
    eprintln!("chat: type a message and press enter; an empty line or end of input ends the chat");
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        messages.push(Message::new("user", line.trim_end()));
        let ids = tok.encode(&template.render(&messages, true)?, false, true);
        let keep = keep_cached_prefix(&mut session, &mut in_cache, &ids);
        if ids.len() + args.n_predict > n_ctx {
            return Err(format!(
                "the conversation ({} tokens) no longer fits in the context of {n_ctx}",
                ids.len()
            )
            .into());
        }
        let mut answer = Vec::new();
        let mut stream = tok.stream_decoder(false);
        let stdout = std::io::stdout();
        let eog = |id| tok.is_eog(id);
        let mut decoder = Decoder::new(
            &loaded.model,
            &exec,
            &mut session,
            args.generate.model.batch,
        );
        let on_token = |id| {
            if !tok.is_eog(id) {
                answer.push(id);
                let mut out = stdout.lock();
                let _ = out.write_all(stream.push(id).as_bytes());
                let _ = out.flush();
            }
            true
        };
        let prompt = &ids[keep..];
        // Each answer follows the grammar from its start.
        let stats = match grammar.as_ref().map(Constraint::fork) {
            Some(mut c) => decoder.generate_masked(
                prompt,
                args.n_predict,
                &mut sampler,
                &mut c,
                eog,
                on_token,
            )?,
            None => decoder.generate(prompt, args.n_predict, &mut sampler, eog, on_token)?,
        };
        println!("{}", stream.finish());
        // Everything but the last sampled token was evaluated; a hybrid model's state cannot
        // be cut back, so a mismatch starts the next turn from scratch.
        in_cache = ids;
        in_cache.extend(&answer[..answer.len().saturating_sub(1)]);
        if in_cache.len() != session.len() {
            session.truncate(0);
            in_cache.clear();
        }
        eprintln!("[{:.1} tok/s]", stats.gen_tps());
        messages.push(Message::new("assistant", &tok.decode_lossy(&answer, false)));
    }
    Ok(ExitCode::SUCCESS)
}

/// Cuts the session (and `in_cache`, the tokens it holds) back to the longest prefix it shares
/// with `ids`, leaving at least the last token of `ids` to evaluate; returns that prefix length.
/// A recurrent state cannot be cut back to an arbitrary position, so a hybrid model starts over
/// on any mismatch.
fn keep_cached_prefix(session: &mut Session, in_cache: &mut Vec<u32>, ids: &[u32]) -> usize {
    let mut keep = in_cache
        .iter()
        .zip(ids)
        .take_while(|(a, b)| a == b)
        .count()
        .min(ids.len().saturating_sub(1));
    if keep < in_cache.len() {
        if session.recurrent.is_some() {
            keep = 0;
        }
        session.truncate(keep);
        in_cache.truncate(keep);
    }
    keep
}
