//! Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered with minijinja, with
//! Python's string methods available as the Hugging Face templates expect.

use minijinja::{Environment, context};

use super::{GgufError, GgufFile};

/// One message of a conversation, as chat templates read it.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (empty for an assistant turn that only calls tools).
    pub content: String,
    /// The tools an assistant turn called.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a `tool` message: the function's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For an assistant turn: its reasoning, given apart from `content` (templates such as
    /// Qwen3's and Qwen3.5's render it as a think block, or drop it for older turns).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        }
    }
}

/// A function call of an assistant turn; templates see OpenAI's shape,
/// `{"id", "type": "function", "function": {"name", "arguments"}}`, with `arguments` as an
/// object when it is a JSON document (as Hugging Face's `apply_chat_template` passes it:
/// Qwen3.5's template iterates it with `|items`, Llama 3.1's and Mistral's write it with
/// `|tojson`), else as the string given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id (`tool_call_id` of the answer).
    pub id: String,
    /// The function.
    pub name: String,
    /// Its arguments: a JSON document, as text.
    pub arguments: String,
}

impl serde::Serialize for ToolCall {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Function<'a> {
            name: &'a str,
            arguments: serde_json::Value,
        }
        #[derive(serde::Serialize)]
        struct Call<'a> {
            id: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
            function: Function<'a>,
        }
        Call {
            id: &self.id,
            kind: "function",
            function: Function {
                name: &self.name,
                arguments: serde_json::from_str::<serde_json::Value>(&self.arguments)
                    .ok()
                    .filter(serde_json::Value::is_object)
                    .unwrap_or_else(|| serde_json::Value::String(self.arguments.clone())),
            },
        }
        .serialize(s)
    }
}

/// BitNet b1.58 2B-4T's chat format (the transformers model's: `<|begin_of_text|>User:
/// ...<|eot_id|>Assistant: `), for files without a template. Each turn ends with llama3's
/// `<|eot_id|>`, which ends a generation.
pub const BITNET_TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}\
{% if m.role == 'system' %}{{ 'System: ' + m.content + '<|eot_id|>' }}\
{% elif m.role == 'user' %}{{ 'User: ' + m.content + '<|eot_id|>' }}\
{% elif m.role == 'assistant' %}{{ 'Assistant: ' + m.content + '<|eot_id|>' }}{% endif %}\
{% endfor %}{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}";

/// C's `strftime` of `secs` after the Unix epoch in UTC, for the directives chat templates
/// use: `%Y %y %m %d %e %j %H %M %S %b %B %a %A %%` (any other is written as it stands).
pub(crate) fn strftime_utc(format: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = secs / 86_400;
    let tod = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's `civil_from_days`).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let before: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = before[month as usize - 1] + day + i64::from(leap && month > 2);
    let month_name = MONTHS[month as usize - 1];
    let day_name = DAYS[(days % 7) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out += &year.to_string(),
            Some('y') => out += &format!("{:02}", year.rem_euclid(100)),
            Some('m') => out += &format!("{month:02}"),
            Some('d') => out += &format!("{day:02}"),
            Some('e') => out += &format!("{day:2}"),
            Some('j') => out += &format!("{yday:03}"),
            Some('H') => out += &format!("{:02}", tod / 3600),
            Some('M') => out += &format!("{:02}", tod / 60 % 60),
            Some('S') => out += &format!("{:02}", tod % 60),
            Some('B') => out += month_name,
            Some('b') => out += &month_name[..3],
            Some('A') => out += day_name,
            Some('a') => out += &day_name[..3],
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// A compiled chat template with the model's BOS/EOS strings.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

fn template_error(e: minijinja::Error) -> GgufError {
    GgufError::Shape {
        name: "tokenizer.chat_template".into(),
        reason: e.to_string(),
    }
}

impl ChatTemplate {
    /// Compiles `source`; `bos`/`eos` are the strings templates see as `bos_token`/`eos_token`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate, GgufError> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        // As llama.cpp's template engine: today's date for templates that write it (Mistral
        // Small 3.x, Llama 3.2), from the clock in UTC.
        env.add_function("strftime_now", |format: String| {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            strftime_utc(&format, secs)
        });
        env.add_template_owned("chat", source.to_string())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            bos: bos.into(),
            eos: eos.into(),
        })
    }

    /// The template source of a GGUF file: its `tokenizer.chat_template`, else the built-in
    /// one of its architecture ([`BITNET_TEMPLATE`] for BitNet b1.58, whose published file has
    /// none), else `None`.
    pub fn source(gguf: &GgufFile) -> Result<Option<&str>, GgufError> {
        if let Some(src) = gguf.opt_str("tokenizer.chat_template")? {
            return Ok(Some(src));
        }
        Ok(match gguf.architecture() {
            Ok("bitnet-b1.58" | "bitnet-25") => Some(BITNET_TEMPLATE),
            _ => None,
        })
    }

    /// The template of a GGUF file ([`ChatTemplate::source`]), or `None` if it has none.
    pub fn from_gguf(
        gguf: &GgufFile,
        tok: &super::Tokenizer,
    ) -> Result<Option<ChatTemplate>, GgufError> {
        let Some(src) = Self::source(gguf)? else {
            return Ok(None);
        };
        let piece = |id: Option<u32>| {
            id.map(|i| String::from_utf8_lossy(&tok.token_to_piece(i, true)).into_owned())
                .unwrap_or_default()
        };
        Ok(Some(ChatTemplate::new(
            src,
            &piece(tok.bos()),
            &piece(tok.eos()),
        )?))
    }

    /// Renders `messages`, ending with the assistant's turn opener when `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, GgufError> {
        self.render_with_tools::<()>(messages, &[], add_generation_prompt)
    }

    /// As [`ChatTemplate::render_with_tools`], with more variables the template may read
    /// (`chat_template_kwargs` such as `enable_thinking`, `reasoning_effort`); they cannot
    /// replace the messages, tools, generation prompt or special tokens.
    pub fn render_with<T: serde::Serialize>(
        &self,
        messages: &[Message],
        tools: &[T],
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, GgufError> {
        let tmpl = self.env.get_template("chat").map_err(template_error)?;
        let tools = (!tools.is_empty()).then_some(tools);
        let base = context! { messages => messages, tools => tools, add_generation_prompt => add_generation_prompt, bos_token => &self.bos, eos_token => &self.eos };
        // Later contexts only fill what earlier ones leave undefined: ours come first.
        let ctx = context! { ..base, ..minijinja::Value::from_serialize(extra) };
        tmpl.render(ctx).map_err(template_error)
    }

    /// As [`ChatTemplate::render`], with the tools the model may call (OpenAI's `tools`
    /// objects, which templates such as Qwen3's list in the system turn).
    pub fn render_with_tools<T: serde::Serialize>(
        &self,
        messages: &[Message],
        tools: &[T],
        add_generation_prompt: bool,
    ) -> Result<String, GgufError> {
        let tmpl = self.env.get_template("chat").map_err(template_error)?;
        // No tools is `tools` undefined (templates test `{% if tools %}`).
        let tools = (!tools.is_empty()).then_some(tools);
        tmpl.render(context! { messages => messages, tools => tools, add_generation_prompt => add_generation_prompt, bos_token => &self.bos, eos_token => &self.eos })
            .map_err(template_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_writes_utc_dates_as_c_does() {
        // 2024-02-29 13:05:09 UTC, a Thursday (leap day: day 60 of the year).
        let t = 1_709_211_909;
        assert_eq!(strftime_utc("%Y-%m-%d %H:%M:%S", t), "2024-02-29 13:05:09");
        assert_eq!(strftime_utc("%d %b %Y", t), "29 Feb 2024");
        assert_eq!(
            strftime_utc("%A %a %B %j %y %e%%%q", t),
            "Thursday Thu February 060 24 29%%q"
        );
        assert_eq!(strftime_utc("%Y-%m-%d %A", 0), "1970-01-01 Thursday");
        assert_eq!(
            strftime_utc("%Y-%m-%d %a %j", 4_102_444_799),
            "2099-12-31 Thu 365"
        );
        // Mistral Small 3.2's template writes today's date with it.
        let t = ChatTemplate::new("{{ strftime_now('%Y') }}", "", "").unwrap();
        let year = t.render(&[], false).unwrap();
        assert!(year.len() == 4 && year.starts_with("20"), "{year}");
    }

    #[test]
    fn renders_a_chatml_template_with_python_methods() {
        let src = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content.strip() + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
        let t = ChatTemplate::new(src, "", "<|im_end|>").unwrap();
        let out = t.render(&[Message::new("user", " Hello ")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn extra_variables_reach_the_template_but_cannot_replace_the_messages() {
        let src = "{{ messages[0].content }}|{{ enable_thinking }}|{% for c in messages[0].tool_calls %}{% for k, v in c.function.arguments|items %}{{ k }}={{ v }}{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let mut m = Message::new("assistant", "hi");
        m.tool_calls.push(ToolCall {
            id: "c".into(),
            name: "f".into(),
            arguments: r#"{"x": 1}"#.into(),
        });
        let extra = serde_json::json!({"enable_thinking": false, "messages": []});
        let out = t
            .render_with::<()>(&[m], &[], false, extra.as_object().unwrap())
            .unwrap();
        // (Python spelling of booleans: the pycompat layer.)
        assert_eq!(out, "hi|False|x=1");
    }

    #[test]
    fn bitnet_template_renders_the_bitnet_chat_format() {
        let t = ChatTemplate::new(BITNET_TEMPLATE, "<|begin_of_text|>", "").unwrap();
        let msgs = [
            Message::new("user", "Hi"),
            Message::new("assistant", "Hello."),
            Message::new("user", "Again"),
        ];
        assert_eq!(
            t.render(&msgs, true).unwrap(),
            "<|begin_of_text|>User: Hi<|eot_id|>Assistant: Hello.<|eot_id|>User: \
             Again<|eot_id|>Assistant: "
        );
    }

    #[test]
    fn a_broken_template_is_an_error() {
        assert!(ChatTemplate::new("{% for %}", "", "").is_err());
    }
}
