//! `libt2p chat`: a multi-turn conversation rendered with the model's own chat template.
//!
//! Each turn re-renders the whole conversation with `tokenizer.chat_template`, keeps the part of
//! the KV cache that still matches the new tokens and evaluates only the rest.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use minijinja::{Environment, context};
use t2p::runner::generate::generate;
use t2p::runner::model::Exec;

use crate::run::{ModelArgs, SampleArgs};

/// Options of `libt2p chat`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// A system message to start the conversation with.
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per answer.
    #[arg(short = 'n', long = "n-predict", default_value_t = 512)]
    n_predict: usize,
}

#[derive(serde::Serialize)]
struct Message {
    role: &'static str,
    content: String,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (loaded, _) = args.model.load(false)?;
    let template = loaded
        .gguf
        .opt_str("tokenizer.chat_template")?
        .ok_or("the model has no tokenizer.chat_template")?
        .to_string();
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_template("chat", &template)?;
    let tmpl = env.get_template("chat")?;
    let tok = &loaded.tokenizer;
    let piece = |id: Option<u32>| id.map(|i| String::from_utf8_lossy(&tok.token_to_piece(i, true)).into_owned()).unwrap_or_default();
    let (bos, eos) = (piece(tok.bos()), piece(tok.eos()));
    let exec = Exec::new(args.model.threads());
    let n_ctx = args.model.n_ctx(&loaded);
    let mut session = loaded.model.new_session(n_ctx);
    let mut in_cache: Vec<u32> = Vec::new();
    let mut sampler = args.sample.sampler();
    let mut messages: Vec<Message> = args.system.iter().map(|s| Message { role: "system", content: s.clone() }).collect();
    let stdin = std::io::stdin();
    eprintln!("chat: type a message and press enter; an empty line or end of input ends the chat");
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        messages.push(Message { role: "user", content: line.trim_end().to_string() });
        let prompt = tmpl.render(context! { messages => &messages, add_generation_prompt => true, bos_token => &bos, eos_token => &eos })?;
        let ids = tok.encode(&prompt, false, true);
        // Keep the cached prefix that still matches; evaluate the rest.
        let keep = in_cache.iter().zip(&ids).take_while(|(a, b)| a == b).count().min(ids.len().saturating_sub(1));
        if keep < in_cache.len() {
            session.truncate(keep);
            in_cache.truncate(keep);
        }
        if ids.len() + args.n_predict > n_ctx {
            return Err(format!("the conversation ({} tokens) no longer fits in the context of {n_ctx}", ids.len()).into());
        }
        let mut answer_ids = Vec::new();
        let mut stream = tok.stream_decoder(false);
        let stdout = std::io::stdout();
        let stats = generate(
            &loaded.model,
            &exec,
            &mut session,
            &ids[keep..],
            args.n_predict,
            args.model.batch,
            &mut sampler,
            |id| tok.is_eog(id),
            |id| {
                if !tok.is_eog(id) {
                    answer_ids.push(id);
                    let mut out = stdout.lock();
                    let _ = out.write_all(stream.push(id).as_bytes());
                    let _ = out.flush();
                }
                true
            },
        )?;
        println!("{}", stream.finish());
        in_cache = ids;
        // The last sampled token was not evaluated; everything before it is in the cache.
        in_cache.extend(&answer_ids[..answer_ids.len().saturating_sub(1)]);
        if in_cache.len() != session.len() {
            session.truncate(0);
            in_cache.clear();
        }
        eprintln!("[{:.1} tok/s]", stats.gen_tps());
        messages.push(Message { role: "assistant", content: tok.decode_lossy(&answer_ids, false) });
    }
    Ok(ExitCode::SUCCESS)
}
