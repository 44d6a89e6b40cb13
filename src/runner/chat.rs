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
