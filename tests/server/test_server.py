"""`libt2p serve` end to end, with the real `openai` client and plain HTTP (urllib, sockets).

Run by test.sh inside a venv that has `openai`:
    T2P_LIBT2P=target/release/libt2p T2P_TESTDATA=../shared/testdata python -m unittest -v tests/server/test_server.py

Every output check compares the server with `libt2p run --json --temp 0` / `libt2p chat` on the
same prompt, or with the same request sent alone: batching, streaming, prefix reuse and queueing
must never change an output. The sampling fields (logprobs, penalties, logit_bias, n) are checked
against what they must do to the model's own greedy output; connections (stalls, the cap) and
shutdown against what the server must do to the socket and the process, with no timed assertion.
"""

import concurrent.futures
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

import openai
import pydantic

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("T2P_LIBT2P", os.path.join(ROOT, "target", "release", "libt2p"))
DATA = os.environ.get("T2P_TESTDATA", os.path.join(ROOT, "..", "shared", "testdata"))
QWEN3 = os.path.join(DATA, "qwen3-tiny", "qwen3-tiny-pq2_0.gguf")
QWEN35 = os.path.join(DATA, "qwen35-tiny", "qwen35-tiny-pq2_0.gguf")
# qwen3-tiny with the real Qwen3 chat template (tools, <tool_call> blocks); random weights, so
# only a constrained output is well-formed.
CHAT = os.path.join(DATA, "chat", "qwen3-tiny-chat.gguf")
CTX = 512
THREADS = "2"


def prompt_file(model_dir, name):
    with open(os.path.join(DATA, model_dir, "prompts", name + ".txt"), encoding="utf-8") as f:
        return f.read()


class Server:
    """A `libt2p serve` process on a free port; stopped by `close`. `env`: variables set for
    this process only (the test hooks), on top of the test's own environment."""

    def __init__(self, model, *extra, ctx=CTX, env=None):
        cmd = [BIN, "serve", "-m", model, "--port", "0", "-t", THREADS, "-c", str(ctx), *extra]
        env = None if env is None else {**os.environ, **env}
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env=env)
        self.log = []
        ready = threading.Event()
        self.port = None

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://[^\s]*:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or self.port is None:
            self.close()
            raise RuntimeError("server did not start: " + "".join(self.log))
        self.url = "http://127.0.0.1:%d" % self.port

    def client(self, key="none", retries=0):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=retries, timeout=120)

    def alive(self):
        return self.proc.poll() is None

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()

    def http(self, method, path, body=None, headers=None, raw=None):
        """(status, parsed JSON or text) of one request; never raises for HTTP errors."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def metrics(self):
        _, text = self.http("GET", "/metrics")
        return {k: float(v) for k, v in re.findall(r"^t2p_(\w+) (\S+)$", text, re.M)}

    def sse(self, path, body):
        """The `data:` payloads of a streamed request, in order (`[DONE]` included)."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            self.assert_sse = r.headers.get("content-type", "")
            return [line[len("data: "):] for line in r.read().decode().split("\n") if line.startswith("data: ")]

    def wait_metric(self, name, want, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            if self.metrics().get(name) == want:
                return True
            time.sleep(0.02)
        return False


def run_ref(model, prompt, n, extra=()):
    """`libt2p run --json` on `prompt`: (text, generated ids, prompt ids)."""
    out = subprocess.run(
        [BIN, "run", "-m", model, "-p", prompt, "-n", str(n), "-c", str(CTX), "-t", THREADS,
         "--json", "--no-ceiling", *extra],
        check=True, capture_output=True, text=True,
    ).stdout
    d = json.loads(out)
    return d["text"], d["ids"], d["prompt_ids"]


def chat_ref(model, message, n):
    """What `libt2p chat --temp 0` answers to one user message (its stdout ends with a newline)."""
    out = subprocess.run(
        [BIN, "chat", "-m", model, "--temp", "0", "-n", str(n), "-c", str(CTX), "-t", THREADS],
        input=message + "\n", check=True, capture_output=True, text=True, errors="replace",
    ).stdout
    assert out.endswith("\n"), out
    return out[:-1]


def complete(client, prompt, n, **kw):
    r = client.completions.create(model="x", prompt=prompt, max_tokens=n, **kw)
    return r.choices[0].text, r.choices[0].finish_reason, r.usage


def complete_stream(client, prompt, n, **kw):
    pieces, finish = [], None
    for ch in client.completions.create(model="x", prompt=prompt, max_tokens=n, stream=True, **kw):
        if ch.choices:
            pieces.append(ch.choices[0].text)
            finish = ch.choices[0].finish_reason or finish
    return "".join(pieces), finish, pieces


def chat(client, messages, n, stream=False, **kw):
    if not stream:
        r = client.chat.completions.create(model="x", messages=messages, max_tokens=n, **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason
    text, finish = "", None
    for ch in client.chat.completions.create(model="x", messages=messages, max_tokens=n, stream=True, **kw):
        if ch.choices:
            text += ch.choices[0].delta.content or ""
            finish = ch.choices[0].finish_reason or finish
    return text, finish


class ModelCase:
    """Checks run on both tiny models (subclasses set MODEL and DIR)."""

    MODEL = None
    DIR = None
    N = 24

    @classmethod
    def setUpClass(cls):
        # Small prefill chunks: every prompt is fed over several steps, between the others'
        # decode steps, and must still give what `libt2p run` gives from one pass.
        cls.prompts = [prompt_file(cls.DIR, p) for p in cls.PROMPTS]
        cls.srv = Server(cls.MODEL, "--parallel", "4", "-b", "8")
        cls.client = cls.srv.client()

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def test_greedy_equals_libt2p_run_streamed_or_not(self):
        for p in self.prompts:
            text, ids, prompt_ids = run_ref(self.MODEL, p, self.N, ["--temp", "0"])
            got, finish, usage = complete(self.client, p, self.N, temperature=0)
            self.assertEqual(got, text, p)
            self.assertEqual(usage.prompt_tokens, len(prompt_ids))
            self.assertEqual(usage.completion_tokens, len(ids))
            self.assertEqual(usage.total_tokens, len(prompt_ids) + len(ids))
            self.assertEqual(finish, "length" if len(ids) == self.N else "stop")
            s_text, s_finish, pieces = complete_stream(self.client, p, self.N, temperature=0)
            self.assertEqual(s_text, text)
            self.assertEqual(s_finish, finish)
            self.assertGreater(len(pieces), 1, "one chunk per piece")
            # The token ids too (llama-server's `return_tokens`), and a prompt given as ids.
            _, body = self.srv.http("POST", "/v1/completions", {
                "prompt": prompt_ids, "max_tokens": self.N, "temperature": 0, "return_tokens": True})
            self.assertEqual(body["choices"][0]["tokens"], ids)
            self.assertEqual(body["choices"][0]["text"], text)

    def test_raw_sse_ends_with_done_and_carries_usage(self):
        p = self.prompts[2]
        want, _, _ = complete(self.client, p, 16, temperature=0)
        data = self.srv.sse("/v1/completions", {
            "prompt": p, "max_tokens": 16, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}})
        self.assertIn("text/event-stream", self.srv.assert_sse)
        self.assertEqual(data[-1], "[DONE]")
        chunks = [json.loads(d) for d in data[:-1]]
        self.assertEqual("".join(c["choices"][0]["text"] for c in chunks if c["choices"]), want)
        self.assertEqual(chunks[-1]["choices"], [])
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 16)
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], "length")
        for c in chunks:
            self.assertEqual(c["object"], "text_completion")
            self.assertTrue(c["id"].startswith("cmpl-"))

    def test_seeded_sampling_equals_libt2p_run(self):
        p = self.prompts[0]
        text, _, _ = run_ref(self.MODEL, p, self.N, ["--temp", "0.9", "--seed", "7"])
        got, _, _ = complete(self.client, p, self.N, temperature=0.9, seed=7)
        self.assertEqual(got, text)
        streamed, _, _ = complete_stream(self.client, p, self.N, temperature=0.9, seed=7)
        self.assertEqual(streamed, text)
        other, _, _ = complete(self.client, p, self.N, temperature=0.9, seed=8)
        self.assertNotEqual(other, text, "another seed, another text")
        # top_k 1 is greedy whatever the temperature.
        greedy, _, _ = run_ref(self.MODEL, p, self.N, ["--temp", "0"])
        self.assertEqual(complete(self.client, p, self.N, temperature=1.5, extra_body={"top_k": 1})[0], greedy)

    def test_chat_equals_libt2p_chat(self):
        for msg in ("Hello there", "Wie geht's? Grüße"):
            want = chat_ref(self.MODEL, msg, self.N)
            got, finish = chat(self.client, [{"role": "user", "content": msg}], self.N, temperature=0)
            self.assertEqual(got, want)
            self.assertIn(finish, ("stop", "length"))
            self.assertEqual(chat(self.client, [{"role": "user", "content": msg}], self.N,
                                  stream=True, temperature=0), (got, finish))
        # A multi-turn conversation with a system message renders and streams identically.
        conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": [
                    {"type": "text", "text": "Tell me "}, {"type": "text", "text": "more."}]}]
        self.assertEqual(chat(self.client, conv, 12, temperature=0),
                         chat(self.client, conv, 12, stream=True, temperature=0))

    def test_stop_strings_cut_the_text_streamed_or_not(self):
        p = self.prompts[0]
        text, _, _ = run_ref(self.MODEL, p, self.N, ["--temp", "0"])
        stop = text[len(text) // 2: len(text) // 2 + 3]
        cut = text[: text.index(stop)]
        got, finish, _ = complete(self.client, p, self.N, temperature=0, stop=stop)
        self.assertEqual((got, finish), (cut, "stop"))
        s_text, s_finish, _ = complete_stream(self.client, p, self.N, temperature=0, stop=[stop, "\x00never"])
        self.assertEqual((s_text, s_finish), (cut, "stop"))
        got, finish, _ = complete(self.client, p, self.N, temperature=0, stop=["\x00never"])
        self.assertEqual((got, finish), (text, "length"))

    def test_prefix_reuse_gives_the_same_tokens(self):
        p = self.prompts[1]
        n, m = 6, 6
        _, long_ids, prompt_ids = run_ref(self.MODEL, p, n + m, ["--temp", "0"])

        def ids_req(prompt, k):
            st, body = self.srv.http("POST", "/v1/completions", {
                "prompt": prompt, "max_tokens": k, "temperature": 0, "return_tokens": True})
            self.assertEqual(st, 200, body)
            return body["choices"][0]["tokens"], body["usage"]["prompt_tokens_details"]["cached_tokens"]

        first, _ = ids_req(prompt_ids, n)
        self.assertEqual(first, long_ids[:n])
        # The prompt extends exactly what a slot holds (prompt + all but the last token).
        ext = prompt_ids + long_ids[:n]
        toks, cached = ids_req(ext, m)
        self.assertEqual(cached, len(prompt_ids) + n - 1)
        self.assertEqual(toks, long_ids[n:n + m])
        # The same prompt again: attention-only slots keep all but its last token; a hybrid
        # slot holds more than the prompt and cannot rewind, so it starts over. Same tokens.
        toks, cached = ids_req(ext, m)
        self.assertEqual(toks, long_ids[n:n + m])
        self.assertEqual(cached, 0 if self.MODEL == QWEN35 else len(ext) - 1)
        m0 = self.srv.metrics()
        self.assertGreater(m0["prompt_tokens_cached_total"], 0)

    def test_n_choices_share_one_prompt_evaluation(self):
        p = self.prompts[1]
        single, _ = ids_of(self.srv, p, 8)
        before = self.srv.metrics()
        _, body = ids_of(self.srv, p, 8, n=3)
        after = self.srv.metrics()
        choices = body["choices"]
        self.assertEqual([c["index"] for c in choices], [0, 1, 2])
        self.assertEqual([c["tokens"] for c in choices], [single] * 3, "temperature 0: all the single answer")
        # The prompt was evaluated once (past what the slot held), then each choice decoded:
        # every forward-pass column is accounted for.
        u = body["usage"]
        cols = after["step_tokens_total"] - before["step_tokens_total"]
        evaluated = u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]
        self.assertEqual(cols, evaluated + sum(len(c["tokens"]) - 1 for c in choices))
        # Sampled, choice i is what seed + i gives alone, streamed or not.
        sampled = [ids_of(self.srv, p, 8, temperature=0.9, seed=7 + i)[0] for i in range(3)]
        _, body = ids_of(self.srv, p, 8, temperature=0.9, seed=7, n=3)
        self.assertEqual([c["tokens"] for c in body["choices"]], sampled)

    def test_concurrent_clients_get_their_single_client_outputs(self):
        reqs = []
        for i in range(8):
            p = self.prompts[i % 3] + " " * (i // 3)
            kind = ["text", "chat", "text_stream", "chat_stream"][i % 4]
            temp = 0 if i % 2 == 0 else 0.8
            reqs.append((kind, p, temp, 100 + i, 8 + 3 * i))

        def one(r, client):
            kind, p, temp, seed, n = r
            if kind.startswith("text"):
                f = complete_stream if kind.endswith("stream") else complete
                out = f(client, p, n, temperature=temp, seed=seed)
                return out[0], out[1]
            return chat(client, [{"role": "user", "content": p}], n, stream=kind.endswith("stream"),
                        temperature=temp, seed=seed)

        alone = [one(r, self.client) for r in reqs]
        before = self.srv.metrics()
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            together = list(ex.map(lambda r: one(r, self.srv.client()), reqs))
        after = self.srv.metrics()
        self.assertEqual(together, alone)
        steps = after["steps_total"] - before["steps_total"]
        sampled = after["completion_tokens_total"] - before["completion_tokens_total"]
        self.assertLess(steps, sampled, "requests must have shared forward passes")
        self.assertEqual(after["requests_finished_total"] - before["requests_finished_total"], 8)


class Qwen3Tiny(ModelCase, unittest.TestCase):
    MODEL = QWEN3
    DIR = "qwen3-tiny"
    PROMPTS = ("english", "code-rust", "unicode-de")


class Qwen35Tiny(ModelCase, unittest.TestCase):
    MODEL = QWEN35
    DIR = "qwen35-tiny"
    PROMPTS = ("english", "code-python", "unicode-el")


class BadInput(unittest.TestCase):
    """Every bad request gets an OpenAI-style 4xx error and the server keeps serving."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(QWEN3, "--parallel", "2")

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def assert_error(self, status, body, want_status, code=None):
        self.assertEqual(status, want_status, body)
        self.assertIsInstance(body, dict, body)
        err = body["error"]
        self.assertIsInstance(err["message"], str)
        self.assertTrue(err["message"])
        self.assertIsInstance(err["type"], str)
        self.assertIn("code", err)
        if code:
            self.assertEqual(err["code"], code)

    def test_bad_requests(self):
        s = self.srv
        cases = [
            ("/v1/completions", b"{not json", 400),
            ("/v1/completions", b"[1, 2]", 400),
            ("/v1/completions", b"", 400),
            ("/v1/completions", b'{"prompt": 5}', 400),
            ("/v1/completions", b'{"max_tokens": 4}', 400),
            ("/v1/completions", b'{"prompt": "a", "max_tokens": "ten"}', 400),
            ("/v1/completions", b'{"prompt": "a", "max_tokens": -3}', 400),
            ("/v1/completions", b'{"prompt": "a", "max_tokens": 0}', 400),
            ("/v1/completions", b'{"prompt": "a", "max_tokens": 2.5}', 400),
            ("/v1/completions", b'{"prompt": "a", "temperature": "hot"}', 400),
            ("/v1/completions", b'{"prompt": "a", "temperature": -1}', 400),
            ("/v1/completions", b'{"prompt": "a", "top_p": 0}', 400),
            ("/v1/completions", b'{"prompt": "a", "top_k": -1}', 400),
            ("/v1/completions", b'{"prompt": "a", "stop": 7}', 400),
            ("/v1/completions", b'{"prompt": "a", "stop": ["x", 1]}', 400),
            ("/v1/completions", b'{"prompt": "a", "stream": "yes"}', 400),
            ("/v1/completions", b'{"prompt": "a", "n": 9}', 400),
            ("/v1/completions", b'{"prompt": [1, 99999999]}', 400),
            ("/v1/completions", b'{"prompt": ["a", "b"]}', 400),
            ("/v1/chat/completions", b'{"messages": "hi"}', 400),
            ("/v1/chat/completions", b'{"messages": []}', 400),
            ("/v1/chat/completions", b'{"messages": ["hi"]}', 400),
            ("/v1/chat/completions", b'{"messages": [{"content": "hi"}]}', 400),
            ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 5}]}', 400),
            ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "image"}]}]}', 400),
            ("/v1/chat/completions", b'{"prompt": "a"}', 400),
        ]
        for path, raw, want in cases:
            st, body = s.http("POST", path, raw=raw, headers={"Content-Type": "application/json"})
            with self.subTest(raw=raw):
                self.assert_error(st, body, want)
        st, body = s.http("POST", "/v1/completions", {"prompt": "word " * (CTX + 10)})
        self.assert_error(st, body, 400, "context_length_exceeded")
        st, body = s.http("GET", "/v1/nothing")
        self.assert_error(st, body, 404, "not_found")
        st, body = s.http("POST", "/v1/models", {})
        self.assert_error(st, body, 405)
        st, body = s.http("GET", "/v1/completions")
        self.assert_error(st, body, 405)
        # Through the client: a typed error, not a crash.
        c = s.client()
        with self.assertRaises(openai.BadRequestError) as e:
            c.completions.create(model="x", prompt="a", max_tokens=-1)
        self.assertEqual(e.exception.status_code, 400)
        # max_tokens past the context is clamped to what the prompt leaves.
        st, tok = s.http("POST", "/tokenize", {"content": "word " * (CTX - 8)})
        n_prompt = len(tok["tokens"])
        self.assertLess(n_prompt, CTX)
        r = c.completions.create(model="x", prompt="word " * (CTX - 8), max_tokens=10**12, temperature=0)
        self.assertEqual(r.usage.prompt_tokens, n_prompt)
        self.assertEqual(r.usage.completion_tokens, CTX - n_prompt)
        self.assertEqual(r.choices[0].finish_reason, "length")
        st, body = s.http("POST", "/v1/completions", {"prompt": "word " * (CTX + 10)})
        self.assertIn("the context holds %d" % CTX, body["error"]["message"])
        # Unknown fields are ignored; `model` is accepted whatever it says.
        st, body = s.http("POST", "/v1/completions", {
            "prompt": "a", "max_tokens": 2, "model": "gpt-4", "frobnicate": [1, {"x": None}],
            "logit_bias": {}, "user": "me", "presence_penalty": 0})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["usage"]["completion_tokens"], 2)
        self.assertTrue(s.alive())
        m = s.metrics()
        self.assertGreaterEqual(m["requests_invalid_total"], len(cases) + 4)

    def oversized(self, expect_continue):
        """Sends a body one byte over 16 MiB on a raw socket; returns the status line and body."""
        size = (16 << 20) + 1
        head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n%s\r\n" % (size, "Expect: 100-continue\r\n" if expect_continue else ""))
        sock = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        sock.sendall(head.encode())
        if not expect_continue:
            def send_body():
                try:
                    chunk = b" " * (1 << 20)
                    for _ in range(16):
                        sock.sendall(chunk)
                    sock.sendall(b" ")
                except OSError:
                    pass
            threading.Thread(target=send_body, daemon=True).start()
        data = b""
        try:
            while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < 20:
                got = sock.recv(65536)
                if not got:
                    break
                data += got
        except OSError:
            pass
        sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return head.split(b"\r\n")[0].decode(), body

    def test_oversized_body_is_413(self):
        status, body = self.oversized(True)
        self.assertIn(" 413 ", status)
        self.assertIn(b'"body_too_large"', body)
        status, _ = self.oversized(False)
        self.assertIn(" 413 ", status)
        # Streamed without a length (chunked): read up to the limit, then 413.
        def chunks():
            for _ in range(17):
                yield b" " * (1 << 20)
        req = urllib.request.Request(self.srv.url + "/v1/completions", data=chunks(), method="POST",
                                     headers={"Transfer-Encoding": "chunked"})
        try:
            urllib.request.urlopen(req, timeout=60)
            code = 200
        except urllib.error.HTTPError as e:
            code = e.code
            self.assertEqual(json.loads(e.read())["error"]["code"], "body_too_large")
        except OSError:
            code = None  # the server may close before the client finished sending
        self.assertIn(code, (413, None))
        self.assertEqual(self.srv.http("GET", "/health")[0], 200)
        self.assertEqual(self.srv.http("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1})[0], 200)

    def test_api_key(self):
        srv = Server(QWEN3, "--api-key", "sekrit")
        try:
            with self.assertRaises(openai.AuthenticationError):
                srv.client("wrong").completions.create(model="x", prompt="a", max_tokens=1)
            st, body = srv.http("POST", "/v1/completions", {"prompt": "a", "max_tokens": 1})
            self.assert_error(st, body, 401, "invalid_api_key")
            st, body = srv.http("GET", "/v1/models")
            self.assert_error(st, body, 401, "invalid_api_key")
            ok = srv.client("sekrit").completions.create(model="x", prompt="a", max_tokens=2)
            self.assertEqual(ok.usage.completion_tokens, 2)
            self.assertEqual([m.id for m in srv.client("sekrit").models.list()], ["qwen3-tiny-pq2_0"])
            self.assertEqual(srv.http("GET", "/health")[0], 200)
        finally:
            srv.close()


class Endpoints(unittest.TestCase):
    def test_models_health_metrics(self):
        srv = Server(QWEN35, "--parallel", "3")
        try:
            models = srv.client().models.list()
            self.assertEqual([m.id for m in models], ["qwen35-tiny-pq2_0"])
            self.assertEqual(srv.http("GET", "/health"), (200, {"status": "ok"}))
            srv.client().completions.create(model="x", prompt="Hi", max_tokens=3)
            m = srv.metrics()
            for k in ("requests_total", "completion_tokens_total", "prompt_tokens_total", "queue_depth",
                      "tokens_per_second", "slots_busy", "requests_rejected_total"):
                self.assertIn(k, m)
            self.assertEqual(m["slots"], 3)
            self.assertEqual(m["requests_total"], 1)
            self.assertEqual(m["completion_tokens_total"], 3)
            self.assertGreater(m["tokens_per_second"], 0)
            _, text = srv.http("GET", "/metrics")
            self.assertIn("# TYPE t2p_requests_total counter", text)
        finally:
            srv.close()


class Queue(unittest.TestCase):
    """One slot, a queue of two: a long stream holds the slot, two wait, the next gets 503; when
    the stream's client disconnects its slot frees at once and the queued requests complete."""

    def test_queue_overflow_and_disconnect(self):
        long_ctx = 4096
        srv = Server(QWEN3, "--parallel", "1", "--queue", "2", ctx=long_ctx)
        try:
            p = prompt_file("qwen3-tiny", "english")
            short = {"prompt": p, "max_tokens": 5, "temperature": 0}
            st, alone = srv.http("POST", "/v1/completions", short)
            self.assertEqual(st, 200)
            # The long request: a raw streaming connection we can drop.
            sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            body = json.dumps({"prompt": p, "max_tokens": long_ctx - 100, "temperature": 0, "stream": True}).encode()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            got = b""
            while got.count(b"data: ") < 3:
                got += sock.recv(4096)
            self.assertTrue(srv.wait_metric("slots_busy", 1))
            with concurrent.futures.ThreadPoolExecutor(2) as ex:
                waiting = [ex.submit(srv.http, "POST", "/v1/completions", short) for _ in range(2)]
                self.assertTrue(srv.wait_metric("queue_depth", 2), srv.metrics())
                st, err = srv.http("POST", "/v1/completions", short)
                self.assertEqual(st, 503, err)
                self.assertEqual(err["error"]["code"], "server_busy")
                with self.assertRaises(openai.APIStatusError) as e:
                    srv.client().completions.create(model="x", prompt="a", max_tokens=1)
                self.assertEqual(e.exception.status_code, 503)
                self.assertEqual(srv.metrics()["requests_rejected_total"], 2)
                # Nothing moves while the stream holds the slot ...
                time.sleep(0.3)
                self.assertFalse(any(w.done() for w in waiting))
                t0 = time.time()
                sock.close()
                results = [w.result(timeout=30) for w in waiting]
            freed = time.time() - t0
            for st, r in results:
                self.assertEqual(st, 200)
                self.assertEqual(r["choices"][0]["text"], alone["choices"][0]["text"])
            m = srv.metrics()
            self.assertEqual(m["requests_cancelled_total"], 1)
            self.assertEqual(m["slots_busy"], 0)
            self.assertEqual(m["queue_depth"], 0)
            # The long stream alone would run for its ~4000 tokens (tens of seconds); its slot
            # was freed at once.
            self.assertLess(m["completion_tokens_total"], 5 * 3 + (long_ctx - 100) / 2)
            self.assertLess(freed, 5.0)
            # A non-streamed request whose client gives up is dropped as well.
            before = m["completion_tokens_total"]
            req = urllib.request.Request(srv.url + "/v1/completions", method="POST", data=json.dumps(
                {"prompt": p, "max_tokens": long_ctx - 100, "temperature": 0}).encode())
            # Half a second: well under the time the whole request takes even on a fast CPU.
            with self.assertRaises(OSError):
                urllib.request.urlopen(req, timeout=0.5)
            self.assertTrue(srv.wait_metric("requests_cancelled_total", 2, timeout=5), srv.metrics())
            self.assertEqual(srv.metrics()["slots_busy"], 0)
            self.assertLess(srv.metrics()["completion_tokens_total"] - before, (long_ctx - 100) / 2)
        finally:
            srv.close()


def ids_of(srv, prompt, max_tokens, **fields):
    """(generated ids, body) of a non-streamed completion with `return_tokens`."""
    st, body = srv.http("POST", "/v1/completions", dict(
        {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "return_tokens": True}, **fields))
    assert st == 200, body
    return body["choices"][0]["tokens"], body


REPETITIVE = "The the the the the the the the"


class Sampling(unittest.TestCase):
    """logprobs, penalties, logit_bias and n: each checked against what it must do to the
    model's own greedy output, not against stored results."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(QWEN3, "--parallel", "4", "-b", "8")
        cls.client = cls.srv.client()
        cls.prompt = prompt_file("qwen3-tiny", "english")

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def check_entry(self, e, k, greedy):
        """One chat `logprobs.content` entry: valid, sorted, consistent with its token."""
        self.assertLessEqual(e.logprob, 0.0)
        self.assertEqual(len(e.top_logprobs), k)
        lps = [t.logprob for t in e.top_logprobs]
        self.assertEqual(lps, sorted(lps, reverse=True))
        self.assertTrue(all(lp <= 0.0 for lp in lps))
        self.assertLessEqual(sum(math.exp(lp) for lp in lps), 1.0 + 1e-6)
        self.assertEqual(bytes(e.bytes).decode("utf-8", "replace"), e.token)
        if k:
            self.assertLessEqual(e.logprob, lps[0])
            for t in e.top_logprobs:
                if t.token == e.token:
                    self.assertAlmostEqual(t.logprob, e.logprob, places=6)
            if greedy:
                # The argmax of the raw logits is the most likely token.
                self.assertEqual(e.top_logprobs[0].token, e.token)
                self.assertEqual(e.top_logprobs[0].logprob, e.logprob)

    def test_chat_logprobs(self):
        msgs = [{"role": "user", "content": "Tell me a story"}]
        plain = self.client.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0)
        self.assertIsNone(plain.choices[0].logprobs)
        r = self.client.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0,
                                                logprobs=True, top_logprobs=5)
        c = r.choices[0]
        self.assertEqual(c.message.content, plain.choices[0].message.content, "logprobs change nothing")
        content = c.logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens - (c.finish_reason == "stop"))
        for e in content:
            self.check_entry(e, 5, greedy=True)
        if "\ufffd" not in c.message.content:
            self.assertEqual("".join(e.token for e in content), c.message.content)
        # Streamed: the same entries, spread over the deltas.
        streamed = []
        for ch in self.client.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0,
                                                      logprobs=True, top_logprobs=5, stream=True):
            if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
                streamed += ch.choices[0].logprobs.content
        self.assertEqual([(e.token, e.logprob) for e in streamed], [(e.token, e.logprob) for e in content])
        # Sampled: the chosen token is any of them, its logprob still that of the raw logits.
        r = self.client.chat.completions.create(model="x", messages=msgs, max_tokens=16, temperature=1.5,
                                                seed=3, logprobs=True, top_logprobs=3)
        for e in r.choices[0].logprobs.content:
            self.check_entry(e, 3, greedy=False)
        # logprobs without alternatives.
        r = self.client.chat.completions.create(model="x", messages=msgs, max_tokens=4, temperature=0, logprobs=True)
        for e in r.choices[0].logprobs.content:
            self.check_entry(e, 0, greedy=True)

    def test_completion_logprobs_legacy_shape(self):
        r = self.client.completions.create(model="x", prompt=self.prompt, max_tokens=16, temperature=0, logprobs=3)
        c = r.choices[0]
        lp = c.logprobs
        n = len(lp.tokens)
        self.assertEqual(n, r.usage.completion_tokens - (c.finish_reason == "stop"))
        self.assertEqual((len(lp.token_logprobs), len(lp.top_logprobs), len(lp.text_offset)), (n, n, n))
        self.assertEqual(lp.text_offset[0], 0)
        for j in range(n):
            self.assertLessEqual(lp.token_logprobs[j], 0.0)
            top = lp.top_logprobs[j]
            self.assertLessEqual(len(top), 3)  # two ids may share a text
            self.assertLessEqual(sum(math.exp(v) for v in top.values()), 1.0 + 1e-6)
            self.assertEqual(max(top.values()), lp.token_logprobs[j], "greedy: the most likely token")
            self.assertEqual(top[lp.tokens[j]], lp.token_logprobs[j])
            if j + 1 < n and "\ufffd" not in lp.tokens[j]:
                self.assertEqual(lp.text_offset[j + 1] - lp.text_offset[j], len(lp.tokens[j]))
            if "\ufffd" not in lp.tokens[j]:
                self.assertEqual(c.text[lp.text_offset[j]:lp.text_offset[j] + len(lp.tokens[j])], lp.tokens[j])
        # Streamed, the legacy lists concatenate to the same.
        toks, lps = [], []
        for ch in self.client.completions.create(model="x", prompt=self.prompt, max_tokens=16, temperature=0,
                                                 logprobs=3, stream=True):
            if ch.choices and ch.choices[0].logprobs:
                toks += ch.choices[0].logprobs.tokens
                lps += ch.choices[0].logprobs.token_logprobs
        self.assertEqual((toks, lps), (lp.tokens, lp.token_logprobs))

    def test_penalties_change_a_repetitive_greedy_output_where_they_must(self):
        greedy, _ = ids_of(self.srv, REPETITIVE, 24)
        repeats = [j for j in range(len(greedy)) if greedy[j] in greedy[:j]]
        self.assertTrue(repeats, "the reference output must repeat itself for this test to mean anything")
        _, _, prompt_ids = run_ref(QWEN3, REPETITIVE, 1, ["--temp", "0"])
        # The same generation resumed right before its first repeat, from token ids: its next
        # token is one the prompt holds (and the repetition penalty sees), yet not generated.
        ext = prompt_ids + greedy[:repeats[0]]
        resumed, _ = ids_of(self.srv, ext, 12)
        self.assertEqual(resumed, greedy[repeats[0]:repeats[0] + 12])
        self.assertIn(resumed[0], ext)

        def first_divergence(a, b):
            return next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)

        for prompt, plain in ((REPETITIVE, greedy), (ext, resumed)):
            n = len(plain)
            history = prompt_ids if prompt is REPETITIVE else ext
            for fields in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0},
                           {"presence_penalty": 1.0, "frequency_penalty": 1.0}):
                with self.subTest(prompt=prompt is REPETITIVE, **fields):
                    got, _ = ids_of(self.srv, prompt, n, **fields)
                    j = first_divergence(plain, got)
                    self.assertIsNotNone(j, "the penalty changed nothing")
                    # Positive penalties lower generated tokens only (not the prompt's): the
                    # output diverges at a token that greedy decoding had already generated.
                    self.assertIn(plain[j], plain[:j])
            # repeat_penalty (llama.cpp): the last n tokens of prompt and output count.
            got, _ = ids_of(self.srv, prompt, n, repeat_penalty=1.5, repeat_last_n=64)
            j = first_divergence(plain, got)
            self.assertIsNotNone(j)
            self.assertIn(plain[j], (history + plain[:j])[-64:])
            # Switched off, each is the plain greedy output.
            for fields in ({"repeat_penalty": 1.5, "repeat_last_n": 0}, {"presence_penalty": 0, "frequency_penalty": 0},
                           {"repeat_penalty": 1.0}):
                self.assertEqual(ids_of(self.srv, prompt, n, **fields)[0], plain)
        # The repetition penalty does see the prompt: resumed, it changes the very first token.
        got, _ = ids_of(self.srv, ext, 12, repeat_penalty=1.5, repeat_last_n=64)
        self.assertNotEqual(got[0], resumed[0])

    def test_logit_bias_bans_and_forces(self):
        greedy, _ = ids_of(self.srv, self.prompt, 12)
        banned = greedy[0]
        got, _ = ids_of(self.srv, self.prompt, 12, logit_bias={str(banned): -100})
        self.assertNotIn(banned, got)
        self.assertNotEqual(got[0], greedy[0])
        # Through the client, and a +100 bias makes one token win every step.
        forced = 1000
        r = self.client.completions.create(model="x", prompt=self.prompt, max_tokens=5, temperature=0,
                                           logit_bias={str(forced): 100}, extra_body={"return_tokens": True})
        self.assertEqual(r.choices[0].model_extra["tokens"], [forced] * 5)
        # logprobs describe the model, not the bias: the first step's most likely token is still
        # greedy's, with the logprob it has without any bias.
        plain = self.client.completions.create(model="x", prompt=self.prompt, max_tokens=1, temperature=0, logprobs=2)
        biased = self.client.completions.create(model="x", prompt=self.prompt, max_tokens=1, temperature=0, logprobs=2,
                                                logit_bias={str(forced): 100})
        want, got = plain.choices[0].logprobs, biased.choices[0].logprobs
        self.assertNotEqual(got.tokens, want.tokens)
        self.assertEqual(got.top_logprobs[0], want.top_logprobs[0])
        self.assertLess(got.token_logprobs[0], want.token_logprobs[0])
        # A ban holds when sampling too.
        got, _ = ids_of(self.srv, self.prompt, 12, temperature=1.0, seed=5, logit_bias={str(banned): -100})
        self.assertNotIn(banned, got)

    def test_n_choices(self):
        single = self.client.completions.create(model="x", prompt=self.prompt, max_tokens=10, temperature=0)
        r = self.client.completions.create(model="x", prompt=self.prompt, max_tokens=10, temperature=0, n=3)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        self.assertEqual([c.text for c in r.choices], [single.choices[0].text] * 3)
        self.assertEqual(r.usage.prompt_tokens, single.usage.prompt_tokens)
        self.assertEqual(r.usage.completion_tokens, 3 * single.usage.completion_tokens)
        # Streamed: each index's pieces concatenate to its text.
        texts, finishes = {}, {}
        for ch in self.client.completions.create(model="x", prompt=self.prompt, max_tokens=10, temperature=0,
                                                 n=3, stream=True):
            for c in ch.choices:
                texts[c.index] = texts.get(c.index, "") + c.text
                if c.finish_reason:
                    finishes[c.index] = c.finish_reason
        self.assertEqual(texts, {i: single.choices[0].text for i in range(3)})
        self.assertEqual(set(finishes), {0, 1, 2})
        # Chat, sampled: choice i draws with seed + i.
        msgs = [{"role": "user", "content": "Hello"}]
        r = self.client.chat.completions.create(model="x", messages=msgs, max_tokens=10, temperature=1.0, seed=7, n=2)
        self.assertEqual([c.index for c in r.choices], [0, 1])
        for i, c in enumerate(r.choices):
            alone = self.client.chat.completions.create(model="x", messages=msgs, max_tokens=10, temperature=1.0,
                                                        seed=7 + i)
            self.assertEqual(c.message.content, alone.choices[0].message.content)
        texts = {}
        for ch in self.client.chat.completions.create(model="x", messages=msgs, max_tokens=10, temperature=1.0,
                                                      seed=7, n=2, stream=True):
            for c in ch.choices:
                texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
        self.assertEqual(texts, {i: c.message.content for i, c in enumerate(r.choices)})

    def test_bad_sampling_fields_name_the_field(self):
        cases = [
            ({"n": 0}, "'n'"), ({"n": 9}, "'n'"),
            ({"presence_penalty": 3}, "presence_penalty"), ({"frequency_penalty": -2.5}, "frequency_penalty"),
            ({"repeat_penalty": 0}, "repeat_penalty"), ({"repeat_penalty": "x"}, "repeat_penalty"),
            ({"repeat_last_n": -5}, "repeat_last_n"),
            ({"logit_bias": {"abc": 1}}, "logit_bias"), ({"logit_bias": {"99999999": 1}}, "logit_bias"),
            ({"logit_bias": {"5": 150}}, "logit_bias"), ({"logit_bias": {"5": None}}, "logit_bias"),
            ({"logit_bias": [5]}, "logit_bias"),
            ({"logprobs": 21}, "logprobs"), ({"logprobs": -1}, "logprobs"), ({"logprobs": "yes"}, "logprobs"),
        ]
        for fields, name in cases:
            st, body = self.srv.http("POST", "/v1/completions", dict({"prompt": "a", "max_tokens": 2}, **fields))
            with self.subTest(fields=fields):
                self.assertEqual(st, 400, body)
                self.assertIn(name, body["error"]["message"])
        chat_cases = [({"top_logprobs": 3}, "top_logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                      ({"logprobs": 2}, "logprobs")]
        for fields, name in chat_cases:
            st, body = self.srv.http("POST", "/v1/chat/completions", dict(
                {"messages": [{"role": "user", "content": "a"}], "max_tokens": 2}, **fields))
            with self.subTest(fields=fields):
                self.assertEqual(st, 400, body)
                self.assertIn(name, body["error"]["message"])
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="x", prompt="a", max_tokens=2, n=20)
        self.assertTrue(self.srv.alive())


class TokenizeEndpoints(unittest.TestCase):
    def test_tokenize_detokenize_round_trip_and_props(self):
        srv = Server(QWEN3, "--parallel", "3")
        try:
            for name in ("english", "code-rust", "unicode-de"):
                text = prompt_file("qwen3-tiny", name)
                _, _, prompt_ids = run_ref(QWEN3, text, 1, ["--temp", "0"])
                st, body = srv.http("POST", "/tokenize", {"content": text, "add_special": True})
                self.assertEqual(st, 200, body)
                self.assertEqual(body["tokens"], prompt_ids, "as `libt2p run` tokenizes")
                _, plain = srv.http("POST", "/tokenize", {"content": text})
                st, back = srv.http("POST", "/detokenize", {"tokens": plain["tokens"]})
                self.assertEqual((st, back["content"]), (200, text))
                _, pieces = srv.http("POST", "/tokenize", {"content": text, "with_pieces": True})
                self.assertEqual([p["id"] for p in pieces["tokens"]], plain["tokens"])
                if all(isinstance(p["piece"], str) for p in pieces["tokens"]):
                    self.assertEqual("".join(p["piece"] for p in pieces["tokens"]), text)
            # Special tokens: parsed unless asked not to, rendered by detokenize.
            _, sp = srv.http("POST", "/tokenize", {"content": "<|im_start|>"})
            self.assertEqual(len(sp["tokens"]), 1)
            _, lit = srv.http("POST", "/tokenize", {"content": "<|im_start|>", "parse_special": False})
            self.assertGreater(len(lit["tokens"]), 1)
            self.assertEqual(srv.http("POST", "/detokenize", {"tokens": sp["tokens"]})[1]["content"], "<|im_start|>")
            for path, body in [("/tokenize", {}), ("/tokenize", {"content": 5}), ("/tokenize", {"content": "a", "add_special": 1}),
                               ("/detokenize", {}), ("/detokenize", {"tokens": [-1]}),
                               ("/detokenize", {"tokens": [10**9]}), ("/detokenize", {"tokens": "a"})]:
                st, err = srv.http("POST", path, body)
                with self.subTest(path=path, body=body):
                    self.assertEqual(st, 400, err)
                    self.assertIn("error", err)
            st, props = srv.http("GET", "/props")
            self.assertEqual(st, 200)
            self.assertEqual(props["n_ctx"], CTX)
            self.assertEqual(props["total_slots"], 3)
            self.assertEqual(props["model_path"], QWEN3)
            self.assertIn("im_start", props["chat_template"])
        finally:
            srv.close()


def recv_all(sock):
    """Everything the server sends until it closes the connection (b"" if it only closes)."""
    data = b""
    while True:
        try:
            got = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not got:
            return data
        data += got


class Connections(unittest.TestCase):
    def test_stalled_clients_are_dropped_while_others_are_served(self):
        srv = Server(QWEN3, "--timeout-header", "1s", "--timeout-body", "1s", "--keep-alive", "1s")
        try:
            def conn():
                return socket.create_connection(("127.0.0.1", srv.port), timeout=60)
            half_head = conn()
            half_head.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            nothing = conn()
            half_body = conn()
            half_body.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
            # A head trickled a byte at a time is dropped as well: the clock runs from its first
            # byte, not from the last one (100 bytes over 20 s; the limit is 1 s).
            trickle = conn()
            sent = 0

            def drip():
                nonlocal sent
                try:
                    for b in b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 100:
                        trickle.sendall(bytes([b]))
                        sent += 1
                        time.sleep(0.2)
                except OSError:
                    pass
            dripper = threading.Thread(target=drip)
            dripper.start()
            # Others are served meanwhile.
            r = srv.client().completions.create(model="x", prompt="Hi", max_tokens=3)
            self.assertEqual(r.usage.completion_tokens, 3)
            # Each stalled socket is closed by the server (a socket timeout here would fail).
            self.assertEqual(recv_all(half_head), b"")
            self.assertEqual(recv_all(nothing), b"")
            self.assertEqual(recv_all(trickle), b"")
            dripper.join()
            self.assertLess(sent, 100, "the trickled head was cut off")
            trickle.close()
            resp = recv_all(half_body)
            self.assertTrue(resp.startswith(b"HTTP/1.1 408 "), resp)
            self.assertIn(b'"body_timeout"', resp)
            # An idle keep-alive connection is closed after its response.
            idle = conn()
            idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            resp = recv_all(idle)
            self.assertTrue(resp.startswith(b"HTTP/1.1 200 "), resp)
            self.assertTrue(resp.endswith(b'{"status":"ok"}'), resp)
            for sock in (half_head, nothing, half_body, idle):
                sock.close()
            m = srv.metrics()
            self.assertEqual(m["timeouts_total"], 4, "three heads (one never begun), one body; idle closes are none")
            self.assertTrue(srv.alive())
            self.assertEqual(srv.http("GET", "/health")[0], 200)
        finally:
            srv.close()

    def test_connection_cap(self):
        srv = Server(QWEN3, "--max-connections", "2", "--keep-alive", "60s")
        try:
            held = [socket.create_connection(("127.0.0.1", srv.port), timeout=60) for _ in range(2)]
            # Both held connections are accepted before the third arrives: each gets an answer.
            for h in held:
                h.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertTrue(h.recv(65536).startswith(b"HTTP/1.1 200 "))
            st, body = srv.http("GET", "/health")
            self.assertEqual(st, 503, body)
            self.assertEqual(body["error"]["code"], "too_many_connections")
            held[0].sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            text = ""
            while "t2p_tokens_per_second " not in text:
                text += held[0].recv(65536).decode()
            self.assertIn("t2p_connections 2\n", text)
            self.assertIn("t2p_connections_refused_total 1\n", text)
            for h in held:
                h.close()
            for _ in range(200):  # the server notices the closes shortly
                if srv.http("GET", "/health")[0] == 200:
                    break
                time.sleep(0.05)
            self.assertEqual(srv.http("GET", "/health")[0], 200)
        finally:
            srv.close()


class Shutdown(unittest.TestCase):
    def stream_then_term(self, *extra):
        """Starts a long stream, sends SIGTERM once it runs: (finish reason, chunks, exit code)."""
        srv = Server(QWEN3, "--parallel", "1", *extra)
        try:
            finish, n, done = None, 0, False
            started = threading.Event()
            result = {}

            def read():
                nonlocal finish, n, done
                try:
                    for ch in srv.client().completions.create(model="x", prompt="Once upon a time", max_tokens=CTX - 20,
                                                              temperature=0, stream=True):
                        n += 1
                        if n == 3:
                            started.set()
                        if ch.choices and ch.choices[0].finish_reason:
                            finish = ch.choices[0].finish_reason
                    done = True
                except Exception as e:  # noqa: BLE001 - reported below
                    result["error"] = e
                started.set()

            t = threading.Thread(target=read)
            t.start()
            self.assertTrue(started.wait(60))
            srv.proc.terminate()
            t.join(120)
            code = srv.proc.wait(120)
            self.assertNotIn("error", result)
            self.assertTrue(done, "the stream ended with [DONE]")
            return finish, n, code
        finally:
            srv.close()

    def test_sigterm_lets_the_request_finish_and_exits_0(self):
        finish, n, code = self.stream_then_term()
        self.assertEqual(code, 0)
        self.assertEqual(finish, "length")
        self.assertGreater(n, 3)

    def test_sigterm_past_the_grace_period_cuts_the_request_with_a_finish_reason(self):
        finish, _, code = self.stream_then_term("--shutdown-timeout", "0")
        self.assertEqual(code, 0)
        self.assertEqual(finish, "length")

    def test_sigterm_completes_a_non_streamed_request(self):
        srv = Server(QWEN3, "--parallel", "1")
        try:
            # Long enough that the request is still running when the poll below sees it.
            body = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0}
            alone = srv.http("POST", "/v1/completions", body)
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                fut = ex.submit(srv.http, "POST", "/v1/completions", body)
                self.assertTrue(srv.wait_metric("slots_busy", 1, timeout=60))
                srv.proc.terminate()
                st, got = fut.result(timeout=120)
            self.assertEqual(srv.proc.wait(120), 0)
            self.assertEqual(st, 200, got)
            self.assertEqual(got["choices"][0]["text"], alone[1]["choices"][0]["text"])
            self.assertEqual(got["usage"]["completion_tokens"], 400)
        finally:
            srv.close()


class Person(pydantic.BaseModel):
    """What `chat.completions.parse` asks for in the structured-output tests."""
    name: str = pydantic.Field(max_length=12)
    age: int = pydantic.Field(ge=0, le=150)
    pets: list[pydantic.constr(max_length=8)] = pydantic.Field(max_length=3)
    kind: str = pydantic.Field(pattern="^(cat|dog)$")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 16},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
BRAVE = {"type": "function", "function": {
    "name": "brave_search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "maxLength": 24}}, "required": ["query"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "integer", "minimum": -12, "maximum": 14}}, "required": ["zone"]}}}


class StructuredOutput(unittest.TestCase):
    """response_format, json_schema, grammar and tool calls on a model with random weights:
    whatever it prefers, the mask makes the output valid."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(CHAT, "--parallel", "4")
        cls.client = cls.srv.client()

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    msgs = [{"role": "user", "content": "Describe a person as JSON."}]

    def check_person(self, p):
        self.assertLessEqual(len(p.name), 12)
        self.assertTrue(0 <= p.age <= 150)
        self.assertLessEqual(len(p.pets), 3)
        self.assertTrue(all(len(x) <= 8 for x in p.pets))
        self.assertIn(p.kind, ("cat", "dog"))

    def test_parse_with_a_pydantic_model(self):
        for temp, seed in [(0, 0), (1.0, 1), (1.5, 2)]:
            r = self.client.chat.completions.parse(model="x", messages=self.msgs, response_format=Person,
                                                   max_tokens=400, temperature=temp, seed=seed)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "stop", c.message.content)
            self.check_person(c.message.parsed)
        # n choices each follow the schema; streamed, the deltas join into the same document.
        r = self.client.chat.completions.parse(model="x", messages=self.msgs, response_format=Person,
                                               max_tokens=400, temperature=1.0, seed=5, n=3)
        for c in r.choices:
            self.check_person(c.message.parsed)
        fmt = {"type": "json_schema", "json_schema": {"name": "Person", "schema": Person.model_json_schema()}}
        whole = self.client.chat.completions.create(model="x", messages=self.msgs, response_format=fmt,
                                                    max_tokens=400, temperature=0)
        parts = [ch.choices[0].delta.content or "" for ch in self.client.chat.completions.create(
            model="x", messages=self.msgs, response_format=fmt, max_tokens=400, temperature=0, stream=True)
            if ch.choices]
        self.assertEqual("".join(parts), whole.choices[0].message.content)
        self.check_person(Person.model_validate_json(whole.choices[0].message.content))
        m = self.srv.metrics()
        self.assertGreater(m["grammar_masks_total"], 0)
        self.assertGreater(m["grammar_mask_seconds_total"], 0)

    def test_json_mode_and_llama_server_fields(self):
        # JSON mode bounds nothing: a random model writes strings of ~200 tokens. A bias towards
        # the tokens that close strings and objects (which the mask still filters) ends it.
        closers = {}
        for text in ['"', '":', '",', '"}', '}']:
            st, tok = self.srv.http("POST", "/tokenize", {"content": text})
            self.assertEqual(len(tok["tokens"]), 1, (text, tok))
            closers[str(tok["tokens"][0])] = 20
        r = self.client.chat.completions.create(model="x", messages=self.msgs, max_tokens=400, temperature=0,
                                                response_format={"type": "json_object"}, logit_bias=closers)
        c = r.choices[0]
        self.assertEqual(c.finish_reason, "stop", c.message.content)
        self.assertIsInstance(json.loads(c.message.content), dict)
        # llama-server's fields on /v1/completions: a schema, and a GBNF grammar.
        st, body = self.srv.http("POST", "/v1/completions", {
            "prompt": "The answer is", "max_tokens": 8, "temperature": 1.0, "seed": 4,
            "json_schema": {"type": "integer", "minimum": 1, "maximum": 9}})
        self.assertEqual(st, 200, body)
        self.assertIn(json.loads(body["choices"][0]["text"]), range(1, 10))
        gbnf = 'root ::= answer " " [0-9]{2}\nanswer ::= "yes" | "no"'
        for seed in range(3):
            st, body = self.srv.http("POST", "/v1/completions", {
                "prompt": "Well,", "max_tokens": 10, "temperature": 1.0, "seed": seed, "grammar": gbnf})
            self.assertEqual(st, 200, body)
            self.assertRegex(body["choices"][0]["text"], r"^(yes|no) [0-9]{2}$")
            self.assertEqual(body["choices"][0]["finish_reason"], "stop")

    def test_libt2p_run_takes_the_same_grammars(self):
        """`libt2p run --json-schema / --grammar`, as llama-cli's flags: the same engine."""
        def run(*extra):
            out = subprocess.run([BIN, "run", "-m", CHAT, "-p", "Q:", "-n", "200", "-t", THREADS, "--json",
                                  "--no-ceiling", "--temp", "1", *extra], capture_output=True, text=True)
            return out.returncode, out.stdout, out.stderr
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                                   "age": {"type": "integer", "minimum": 0, "maximum": 99}},
                  "required": ["name", "age"]}
        for seed in range(3):
            rc, out, err = run("-s", str(seed), "--json-schema", json.dumps(schema))
            self.assertEqual(rc, 0, err)
            v = json.loads(json.loads(out)["text"])
            self.assertLessEqual(len(v["name"]), 10)
            self.assertTrue(0 <= v["age"] <= 99)
            rc, out, err = run("-s", str(seed), "--grammar", 'root ::= ("yes" | "no") "!"')
            self.assertEqual(rc, 0, err)
            self.assertIn(json.loads(out)["text"], ("yes!", "no!"))
        rc, _, err = run("--grammar", "root ::= x")
        self.assertNotEqual(rc, 0)
        self.assertIn("never defined", err)

    def test_bad_grammars_are_400_naming_the_problem(self):
        deep = {"type": "integer"}
        for _ in range(60):
            deep = {"type": "array", "items": deep}
        for extra, want in [
            ({"response_format": {"type": "json_schema", "json_schema": {"schema": deep}}}, "nested"),
            ({"response_format": {"type": "json_schema", "json_schema": {
                "schema": {"type": "integer", "minimum": 5, "maximum": 3}}}}, "grammar"),
            ({"response_format": {"type": "yaml"}}, "response_format.type"),
            ({"response_format": {"type": "json_schema"}}, "json_schema"),
            ({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}, "only one"),
            ({"grammar": "root ::= undefined-rule"}, "never defined"),
            ({"grammar": 7}, "grammar"),
            ({"json_schema": {"enum": ["v%d-%d" % (i, i * i) for i in range(200000)]}}, "grammar"),
            ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
            ({"tools": [{"type": "function"}]}, "tools[0]"),
            ({"tool_choice": "required"}, "tools"),
            ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
             "cannot be combined"),
        ]:
            st, body = self.srv.http("POST", "/v1/chat/completions", dict(
                {"messages": self.msgs, "max_tokens": 4}, **extra))
            self.assertEqual(st, 400, (extra if len(str(extra)) < 300 else want, body))
            self.assertIn(want, body["error"]["message"])
        self.assertTrue(self.srv.alive())

    def tool_request(self, **kw):
        return self.client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[WEATHER, CLOCK], max_tokens=200, temperature=0, **kw)

    def check_weather(self, call):
        self.assertEqual(call.type, "function")
        self.assertTrue(call.id)
        args = json.loads(call.function.arguments)
        if call.function.name == "get_weather":
            self.assertLessEqual(len(args["city"]), 16)
            self.assertIn(args["unit"], ("celsius", "fahrenheit"))
        else:
            self.assertEqual(call.function.name, "get_time")
            self.assertTrue(-12 <= args["zone"] <= 14)

    def test_tool_call_round_trip(self):
        r = self.tool_request(tool_choice="required")
        c = r.choices[0]
        self.assertEqual(c.finish_reason, "tool_calls")
        self.assertTrue(c.message.tool_calls)
        for call in c.message.tool_calls:
            self.check_weather(call)
        self.assertIsNone(c.message.content)
        named = self.tool_request(tool_choice={"type": "function", "function": {"name": "get_time"}})
        calls = named.choices[0].message.tool_calls
        self.assertEqual([x.function.name for x in calls], ["get_time"])
        self.check_weather(calls[0])
        # Streamed: the deltas carry the same calls.
        got = {}
        for ch in self.tool_request(tool_choice="required", stream=True):
            if not ch.choices:
                continue
            for d in ch.choices[0].delta.tool_calls or []:
                e = got.setdefault(d.index, {"id": d.id, "name": "", "args": ""})
                e["name"] += d.function.name or ""
                e["args"] += d.function.arguments or ""
            if ch.choices[0].finish_reason:
                self.assertEqual(ch.choices[0].finish_reason, "tool_calls")
        self.assertEqual([(g["name"], g["args"]) for _, g in sorted(got.items())],
                         [(x.function.name, x.function.arguments) for x in c.message.tool_calls])
        # The call and its result go back through the template: the prompt grows by the turn.
        call = c.message.tool_calls[0]
        history = [{"role": "user", "content": "What is the weather in Paris?"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": call.id, "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                   {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}]
        back = self.client.chat.completions.create(model="x", messages=history, tools=[WEATHER, CLOCK],
                                                   max_tokens=4, temperature=0)
        st, tok = self.srv.http("POST", "/tokenize", {"content": "<tool_response>\n18 degrees and sunny\n</tool_response>"})
        self.assertEqual(st, 200, tok)
        self.assertGreaterEqual(back.usage.prompt_tokens, r.usage.prompt_tokens + len(tok["tokens"]))
        self.assertIsInstance(back.choices[0].message.content, str)
        # tool_choice none: the answer is text, however it looks.
        none = self.client.chat.completions.create(model="x", messages=history, tools=[WEATHER],
                                                   tool_choice="none", max_tokens=8, temperature=0)
        self.assertIsNone(none.choices[0].message.tool_calls)


class KvBudget(unittest.TestCase):
    def test_requests_wait_for_kv_room_and_keep_their_outputs(self):
        """--kv-budget 512 with 4 slots: requests reaching 210 positions run two at a time; the
        others wait (not fail), every output is its single-stream output, and the KV memory
        never passes the budget."""
        prompts = ["Once upon a time", "The weather today", "In a small village", "My favourite food"]
        srv = Server(QWEN3, "--parallel", "4", ctx=256)
        try:
            alone = [complete(srv.client(), p, 200, temperature=0)[0] for p in prompts]
        finally:
            srv.close()
        srv = Server(QWEN3, "--parallel", "4", "--kv-budget", "512", ctx=256)
        try:
            _, props = srv.http("GET", "/props")
            self.assertEqual(props["kv_budget"], 512)
            limit = 512 * props["kv_bytes_per_position"]
            peak, done = [0], threading.Event()

            def watch():
                while not done.is_set():
                    peak[0] = max(peak[0], srv.metrics()["kv_cache_bytes"])
                    time.sleep(0.01)

            w = threading.Thread(target=watch)
            w.start()
            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                got = list(ex.map(lambda p: complete(srv.client(), p, 200, temperature=0)[0], prompts))
            done.set()
            w.join()
            self.assertEqual(got, alone)
            m = srv.metrics()
            self.assertGreater(m["kv_waits_total"], 0, "some request waited for room")
            self.assertGreater(peak[0], 0)
            self.assertLessEqual(peak[0], limit)
            self.assertLessEqual(m["kv_cache_bytes"], limit)
        finally:
            srv.close()


class Drafting(unittest.TestCase):
    def test_lookup_drafts_verified_in_the_batch_leave_every_output_unchanged(self):
        """--draft lookup: greedy and seeded sampling, four streams at once, give what the
        server gives without drafting (itself equal to `libt2p run`), and drafts are kept."""
        prompts = [prompt_file("qwen3-tiny", "english"), "one two one two one two", "a b c a b c a b", "Hello"]
        cases = [(p, kw) for p in prompts for kw in ({"temperature": 0}, {"temperature": 0.9, "seed": 7})]

        def outputs(srv):
            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                return list(ex.map(lambda c: complete(srv.client(), c[0], 48, **c[1])[0], cases))

        plain = Server(QWEN3, "--parallel", "4")
        try:
            want = outputs(plain)
        finally:
            plain.close()
        srv = Server(QWEN3, "--parallel", "4", "--draft", "lookup")
        try:
            self.assertEqual(outputs(srv), want)
            m = srv.metrics()
            self.assertGreater(m["draft_tokens_total"], 0)
            self.assertGreater(m["draft_accepted_total"], 0, "some drafts were kept")
        finally:
            srv.close()


class Interleave(unittest.TestCase):
    def test_a_long_prompt_is_fed_between_the_others_decode_steps(self):
        """While a 400-token prompt is evaluated 8 tokens a step, a running stream keeps
        getting tokens (without chunking it would wait for the whole prompt)."""
        srv = Server(QWEN3, "--parallel", "2", "-b", "8", ctx=1024)
        try:
            def stream(body, times, started=None):
                req = urllib.request.Request(srv.url + "/v1/completions", method="POST",
                                             data=json.dumps(dict(body, stream=True)).encode())
                with urllib.request.urlopen(req, timeout=120) as r:
                    for line in r:
                        if line.startswith(b"data: {"):
                            times.append(time.time())
                            if started is not None and len(times) == 3:
                                started.set()

            a_times, b_times, started = [], [], threading.Event()
            ta = threading.Thread(target=stream, args=(
                {"prompt": "Once upon a time", "max_tokens": 600, "temperature": 0}, a_times, started))
            ta.start()
            self.assertTrue(started.wait(30))
            t_b = time.time()
            long_prompt = "one two three four " * 100
            stream({"prompt": long_prompt, "max_tokens": 2, "temperature": 0}, b_times)
            during = [t for t in a_times if t_b < t < b_times[0]]
            ta.join()
            self.assertGreaterEqual(len(during), 20, "tokens of the running stream during the long prefill")
            self.assertGreater(len(a_times), 500, "about one chunk per token")
        finally:
            srv.close()


TEMPLATES = os.path.join(DATA, "chat", "templates")


def model_with_template(tmp, template, shape="qwen3-test"):
    """qwen3-tiny-chat's vocabulary in a synthetic test shape (`qwen35-test`: the hybrid), with
    one of the real chat templates as its `tokenizer.chat_template` (`libt2p synth
    --chat-template`)."""
    out = os.path.join(tmp, "%s-%s.gguf" % (template, shape))
    subprocess.run([BIN, "synth", "--shape", shape, "--vocab", CHAT, "-o", out,
                    "--chat-template", os.path.join(TEMPLATES, template + ".jinja")],
                   check=True, capture_output=True)
    return out


def streamed_calls(client, **kw):
    """The (name, arguments) of the tool calls a streamed chat answer delivers as deltas."""
    got = []
    for ch in client.chat.completions.create(model="x", stream=True, **kw):
        if ch.choices:
            got += [(d.function.name, d.function.arguments) for d in ch.choices[0].delta.tool_calls or []]
    return got


class ToolFormats(unittest.TestCase):
    """Each template's own call syntax, on random weights: the grammar of a required call is
    the template's syntax, the call is parsed, rendered back (arguments as an object, which
    Qwen3.5's and Llama 3.1's templates need) and the conversation goes on to an answer."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.tmp = tempfile.TemporaryDirectory()
        cls.models = {"qwen3": CHAT}
        for name, t in [("qwen35", "Qwen3.5-4B"), ("llama31", "meta-llama-Llama-3.1-8B-Instruct"),
                        ("coder", "Qwen3-Coder"), ("mistral", "Mistral-Small-3.2-24B-Instruct-2506")]:
            cls.models[name] = model_with_template(cls.tmp.name, t)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def conversation(self, name, syntax):
        srv = Server(self.models[name], ctx=1024)
        try:
            st, props = srv.http("GET", "/props")
            self.assertEqual(props["tool_call_format"], syntax)
            client = srv.client()
            msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
            r = client.chat.completions.create(model="x", messages=msgs, tools=[WEATHER, CLOCK],
                                               tool_choice="required", parallel_tool_calls=False,
                                               max_tokens=300, temperature=0)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            self.assertEqual(len(c.message.tool_calls), 1)
            call = c.message.tool_calls[0]
            StructuredOutput.check_weather(self, call)
            # Streamed: the same call as a delta.
            got = streamed_calls(client, messages=msgs, tools=[WEATHER, CLOCK], tool_choice="required",
                                 parallel_tool_calls=False, max_tokens=300, temperature=0)
            self.assertEqual(got, [(call.function.name, call.function.arguments)])
            msgs += [{"role": "assistant", "content": None, "tool_calls": [
                        {"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                     {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}]
            back = client.chat.completions.create(model="x", messages=msgs, tools=[WEATHER, CLOCK],
                                                  max_tokens=6, temperature=0,
                                                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
            self.assertGreater(back.usage.prompt_tokens, r.usage.prompt_tokens)
            self.assertIsInstance(back.choices[0].message.content, str)
            # The call went back into the prompt in the template's syntax, its result after it.
            st, tok = srv.http("POST", "/tokenize", {"content": "18 degrees and sunny"})
            self.assertGreaterEqual(back.usage.prompt_tokens - r.usage.prompt_tokens, len(tok["tokens"]))
            msgs += [{"role": "assistant", "content": back.choices[0].message.content or "ok"},
                     {"role": "user", "content": "Thanks."}]
            last = client.chat.completions.create(model="x", messages=msgs, tools=[WEATHER, CLOCK],
                                                  max_tokens=4, temperature=0)
            self.assertGreater(last.usage.prompt_tokens, back.usage.prompt_tokens)
        finally:
            srv.close()

    def test_qwen35_xml_calls(self):
        self.conversation("qwen35", "qwen-xml")

    def test_qwen3_json_calls(self):
        self.conversation("qwen3", "hermes")

    def test_llama31_calls(self):
        self.conversation("llama31", "llama3")

    def test_qwen3_coder_xml_calls(self):
        self.conversation("coder", "qwen-xml")

    def test_mistral_calls(self):
        self.conversation("mistral", "mistral")

    def test_llama31_builtin_calls(self):
        """Llama 3.1's built-in tools: announced in the system turn, called as
        `<|python_tag|>brave_search.call(query="...")`, rendered back in that syntax."""
        srv = Server(self.models["llama31"], ctx=1024)
        try:
            client = srv.client()
            tools = [BRAVE, WEATHER]
            msgs = [{"role": "user", "content": "Search the weather in Paris."}]
            st, applied = srv.http("POST", "/apply-template", {"messages": msgs, "tools": tools})
            self.assertEqual(st, 200, applied)
            self.assertIn("Environment: ipython\nTools: brave_search\n\n", applied["prompt"])
            named = {"type": "function", "function": {"name": "brave_search"}}
            r = client.chat.completions.create(model="x", messages=msgs, tools=tools, tool_choice=named,
                                               max_tokens=100, temperature=0)
            c = r.choices[0]
            self.assertEqual(c.finish_reason, "tool_calls", c.message)
            self.assertEqual(len(c.message.tool_calls), 1)
            call = c.message.tool_calls[0]
            self.assertEqual(call.function.name, "brave_search")
            query = json.loads(call.function.arguments)["query"]
            self.assertIsInstance(query, str)
            self.assertLessEqual(len(query), 24)
            got = streamed_calls(client, messages=msgs, tools=tools, tool_choice=named, max_tokens=100,
                                 temperature=0)
            self.assertEqual(got, [(call.function.name, call.function.arguments)])
            msgs += [{"role": "assistant", "content": None, "tool_calls": [
                        {"id": call.id, "type": "function",
                         "function": {"name": "brave_search", "arguments": call.function.arguments}}]},
                     {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}]
            st, applied = srv.http("POST", "/apply-template", {"messages": msgs, "tools": tools})
            self.assertEqual(st, 200, applied)
            self.assertIn('<|python_tag|>brave_search.call(query="%s")<|eom_id|>' % query, applied["prompt"])
            back = client.chat.completions.create(model="x", messages=msgs, tools=tools, max_tokens=4,
                                                  temperature=0)
            self.assertIsInstance(back.choices[0].message.content, str)
        finally:
            srv.close()


class Reasoning(unittest.TestCase):
    """<think> blocks go to reasoning_content, whole and streamed; enable_thinking: false
    removes them. A grammar makes the random model write a block and an answer."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.tmp = tempfile.TemporaryDirectory()
        cls.qwen35 = model_with_template(cls.tmp.name, "Qwen3.5-4B")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def both(self, client, **kw):
        """(reasoning, content) whole, and the same joined from the stream's deltas."""
        msgs = [{"role": "user", "content": "Hi"}]
        r = client.chat.completions.create(model="x", messages=msgs, temperature=0, **kw)
        m = r.choices[0].message
        whole = (getattr(m, "reasoning_content", None), m.content)
        rs, cs = None, ""
        for ch in client.chat.completions.create(model="x", messages=msgs, temperature=0, stream=True, **kw):
            if ch.choices:
                d = ch.choices[0].delta
                piece = getattr(d, "reasoning_content", None)
                if piece:
                    rs = (rs or "") + piece
                cs += d.content or ""
        self.assertEqual((rs, cs), whole)
        return whole

    def test_reasoning_is_split_off(self):
        think = {"grammar": '%llguidance {}\nstart: /[a-z]{2,8}( [a-z]{2,8}){1,3}/ "\\n</think>\\n\\n" /[a-z]{2,8}/'}
        for model, prefix in [(self.qwen35, ""), (CHAT, '"<think>\\n" ')]:
            srv = Server(model)
            try:
                client = srv.client()
                g = dict(think)
                g["grammar"] = g["grammar"].replace("start: ", "start: " + prefix)
                reasoning, content = self.both(client, max_tokens=40, extra_body=g)
                self.assertRegex(reasoning or "", r"^[a-z]+( [a-z]+)+$")
                self.assertRegex(content, r"^[a-z]+$")
                # --reasoning-format none is a server flag; enable_thinking: false renders an
                # empty block in the prompt, so nothing the model writes is reasoning.
                reasoning, content = self.both(client, max_tokens=8,
                                               extra_body={"chat_template_kwargs": {"enable_thinking": False}})
                self.assertIsNone(reasoning)
                self.assertIsInstance(content, str)
            finally:
                srv.close()
        # Qwen3.5's prompt opens the block: unconstrained, the random model never closes it.
        srv = Server(self.qwen35, "--reasoning-format", "none")
        try:
            reasoning, content = self.both(srv.client(), max_tokens=8)
            self.assertIsNone(reasoning)
            self.assertTrue(content)
        finally:
            srv.close()
        srv = Server(self.qwen35)
        try:
            reasoning, content = self.both(srv.client(), max_tokens=8)
            self.assertTrue(reasoning)
            self.assertEqual(content, "")
        finally:
            srv.close()


class BrowserAndKeys(unittest.TestCase):
    """A page on another origin can call the server when --cors-origin allows it; the API key
    is taken from `Authorization: bearer` in any case or `x-api-key`; a request without a
    seed gets a fresh one, reported so that it can be repeated."""

    def raw(self, srv, method, path, headers, body=None):
        req = urllib.request.Request(srv.url + path, method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def test_preflight_cors_and_keys(self):
        page = "https://chat.example"
        srv = Server(QWEN3, "--api-key", "sekrit", "--cors-origin", page)
        try:
            st, h, _ = self.raw(srv, "OPTIONS", "/v1/chat/completions", {
                "Origin": page, "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"})
            self.assertEqual(st, 204)
            self.assertEqual(h.get("access-control-allow-origin"), page)
            self.assertIn("POST", h.get("access-control-allow-methods", ""))
            self.assertIn("authorization", h.get("access-control-allow-headers", ""))
            body = {"prompt": "a", "max_tokens": 1}
            st, h, _ = self.raw(srv, "POST", "/v1/completions",
                                {"Origin": page, "Authorization": "bearer sekrit"}, body)
            self.assertEqual(st, 200)
            self.assertEqual(h.get("access-control-allow-origin"), page)
            # Another origin gets no CORS headers (the browser then refuses the answer).
            st, h, _ = self.raw(srv, "OPTIONS", "/v1/completions", {
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
            self.assertNotIn("access-control-allow-origin", {k.lower() for k in h})
            st, _, _ = self.raw(srv, "POST", "/v1/completions", {"x-api-key": "sekrit"}, body)
            self.assertEqual(st, 200)
            for bad in [{"Authorization": "Bearer sekri"}, {"Authorization": "Bearer sekrit2"},
                        {"x-api-key": "nope"}, {"Authorization": "Basic sekrit"}, {}]:
                st, _, _ = self.raw(srv, "POST", "/v1/completions", bad, body)
                self.assertEqual(st, 401, bad)
        finally:
            srv.close()
        # Without --cors-origin a preflight is not answered.
        srv = Server(QWEN3)
        try:
            st, h, _ = self.raw(srv, "OPTIONS", "/v1/completions", {
                "Origin": page, "Access-Control-Request-Method": "POST"})
            self.assertEqual(st, 405)
            self.assertNotIn("access-control-allow-origin", {k.lower() for k in h})
        finally:
            srv.close()

    def test_unseeded_requests_get_a_seed_that_repeats_them(self):
        srv = Server(QWEN3)
        try:
            client = srv.client()
            runs = [client.completions.create(model="x", prompt="Once", max_tokens=12, temperature=1.0)
                    for _ in range(3)]
            seeds = [r.model_extra["seed"] for r in runs]
            self.assertEqual(len(set(seeds)), 3, seeds)
            self.assertIn(str(seeds[0]), runs[0].system_fingerprint)
            again = client.completions.create(model="x", prompt="Once", max_tokens=12, temperature=1.0,
                                              seed=seeds[0])
            self.assertEqual(again.choices[0].text, runs[0].choices[0].text)
        finally:
            srv.close()


class Pings(unittest.TestCase):
    def test_a_silent_stream_gets_ping_comments(self):
        """A stream that waits (here for the one slot, busy with a long answer) gets SSE comment
        lines while nothing else is sent, so proxies with idle timeouts keep it; its answer is
        unchanged. The interval is 100 ms through the test hook (5 s otherwise)."""
        srv = Server(QWEN3, "--parallel", "1", ctx=2048, env={"T2P_SERVE_TEST_PING_MS": "100"})
        try:
            alone = complete(srv.client(), "Once upon a time", 8, temperature=0)[0]
            # Its end-of-generation tokens banned, the busy answer runs its 2000 tokens.
            _, tok = srv.http("POST", "/tokenize", {"content": "<|im_end|><|endoftext|>", "parse_special": True})
            eog = {str(t): -100 for t in tok["tokens"]}
            done = []
            busy = threading.Thread(target=lambda: done.append(complete(
                srv.client(), "The weather", 2000, temperature=0, logit_bias=eog)))
            busy.start()
            time.sleep(0.1)
            req = urllib.request.Request(srv.url + "/v1/completions", method="POST", data=json.dumps(
                {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stream": True}).encode())
            lines = []
            with urllib.request.urlopen(req, timeout=120) as r:
                for line in r:
                    lines.append(line.rstrip(b"\n"))
            busy.join()
            self.assertEqual(done[0][2].completion_tokens, 2000)
            first_data = next(i for i, l in enumerate(lines) if l.startswith(b"data: {"))
            pings = [l for l in lines[:first_data] if l.startswith(b":")]
            self.assertGreater(len(pings), 0, lines[:first_data + 1])
            text = "".join(json.loads(l[6:])["choices"][0]["text"] for l in lines
                           if l.startswith(b"data: {"))
            self.assertEqual(text, alone)
        finally:
            srv.close()


class Faults(unittest.TestCase):
    """A panic in a scheduler step (injected by the test hook) fails that step's requests with
    a 500 (a stream with an error event and [DONE]); the next request is served."""

    def test_a_panic_fails_its_request_and_the_server_goes_on(self):
        srv = Server(QWEN3, env={"T2P_SERVE_TEST_PANIC": "1"})
        try:
            client = srv.client()
            with self.assertRaises(openai.InternalServerError) as e:
                client.completions.create(model="x", prompt="Once", max_tokens=4,
                                          extra_body={"t2p_test_panic": True})
            self.assertIn("the server goes on", str(e.exception))
            events = srv.sse("/v1/completions", {"prompt": "Once", "max_tokens": 4, "stream": True,
                                                 "t2p_test_panic": True})
            self.assertEqual(events[-1], "[DONE]")
            self.assertIn("error", json.loads(events[-2]))
            text, finish, _ = complete(client, "Once", 4, temperature=0)
            self.assertEqual(finish, "length")
            self.assertEqual(srv.http("GET", "/health")[0], 200)
            self.assertEqual(srv.metrics()["step_panics_total"], 2)
            self.assertEqual(srv.metrics()["model_down"], 0)
        finally:
            srv.close()
    def test_a_thread_that_keeps_panicking_stops_and_health_says_so(self):
        srv = Server(QWEN3, env={"T2P_SERVE_TEST_PANIC": "1"})
        try:
            for _ in range(8):
                st, body = srv.http("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2,
                                                               "t2p_test_panic": True})
                self.assertEqual(st, 500, body)
            self.assertTrue(srv.wait_metric("model_down", 1))
            st, body = srv.http("GET", "/health")
            self.assertEqual(st, 503, body)
            st, body = srv.http("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2})
            self.assertEqual(st, 503, body)
            self.assertTrue(srv.alive())
        finally:
            srv.close()

    def test_without_the_hook_the_field_is_ignored(self):
        srv = Server(QWEN3)
        try:
            st, body = srv.http("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2,
                                                           "t2p_test_panic": True})
            self.assertEqual(st, 200, body)
            self.assertEqual(srv.metrics()["step_panics_total"], 0)
        finally:
            srv.close()


class SlotChoice(unittest.TestCase):
    """--slot-prompt-similarity: a request that shares only its first tokens with a slot's
    conversation goes to another slot, so the conversation's next turn finds its cache."""

    def test_a_one_shot_request_does_not_evict_a_conversation(self):
        for similarity, evicted in [("0.5", False), ("0", True)]:
            # (without the RAM cache, which would give the evicted conversation back)
            srv = Server(QWEN3, "--parallel", "2", "--slot-prompt-similarity", similarity,
                         "--cache-ram", "0")
            try:
                c = srv.client()
                turn1 = "Once upon a time " * 20
                r1 = c.completions.create(model="x", prompt=turn1, max_tokens=4, temperature=0)
                # Shares "Once upon a time" with the conversation, nothing more.
                c.completions.create(model="x", prompt="Once upon a time there", max_tokens=4, temperature=0)
                r2 = c.completions.create(model="x", prompt=turn1 + r1.choices[0].text + " And then",
                                          max_tokens=4, temperature=0)
                cached = r2.usage.prompt_tokens_details.cached_tokens
                if evicted:
                    self.assertLess(cached, r1.usage.prompt_tokens // 2, similarity)
                else:
                    # (the last prompt token may tokenize differently once text follows it)
                    self.assertGreaterEqual(cached, r1.usage.prompt_tokens - 2, similarity)
            finally:
                srv.close()


class CacheRam(unittest.TestCase):
    """--cache-ram: a conversation whose slot a third one took gets its cache back from RAM."""

    def test_an_evicted_conversation_comes_back(self):
        for models in [QWEN3]:
            for ram, kept in [("8192", True), ("0", False)]:
                srv = Server(models, "--parallel", "2", "--cache-ram", ram)
                try:
                    c = srv.client()
                    ask = lambda p: c.completions.create(model="x", prompt=p, max_tokens=4, temperature=0)
                    first = "Once upon a time " * 20
                    r1 = ask(first)
                    ask("fn main() { println!(" * 10)
                    ask("Grüße aus Köln und " * 10)  # takes the least recently used slot: first's
                    r2 = ask(first + r1.choices[0].text + " And then")
                    cached = r2.usage.prompt_tokens_details.cached_tokens
                    if kept:
                        # (the last tokens may tokenize differently once text follows them)
                        self.assertGreaterEqual(cached, r1.usage.prompt_tokens - 2, (models, ram))
                        self.assertEqual(srv.metrics()["prompt_cache_hits_total"], 1, (models, ram))
                    else:
                        self.assertEqual(cached, 0, (models, ram))
                finally:
                    srv.close()


class CacheTakeover(unittest.TestCase):
    def test_a_request_sharing_a_prefix_keeps_it_and_the_conversation_comes_back(self):
        """One slot: a one-shot request that shares the conversation's first tokens takes the
        slot, keeps those tokens (a copy of them only: the conversation's session moved to the
        RAM cache) and evaluates the rest; the conversation's next turn gets its whole session
        back from RAM."""
        srv = Server(QWEN3, "--parallel", "1")
        try:
            c = srv.client()
            ask = lambda p: c.completions.create(model="x", prompt=p, max_tokens=4, temperature=0)
            first = "Once upon a time " * 20
            r1 = ask(first)
            shared = ask("Once upon a time there was")
            kept = shared.usage.prompt_tokens_details.cached_tokens
            self.assertGreaterEqual(kept, 3)
            self.assertLess(kept, shared.usage.prompt_tokens)
            r2 = ask(first + r1.choices[0].text + " And then")
            # (the last tokens may tokenize differently once text follows them)
            self.assertGreaterEqual(r2.usage.prompt_tokens_details.cached_tokens, r1.usage.prompt_tokens - 2)
            self.assertEqual(srv.metrics()["prompt_cache_hits_total"], 1)
        finally:
            srv.close()


class Qwen35Turns(unittest.TestCase):
    """A qwen35 slot keeps a copy of its session at the last message boundary of a chat prompt:
    the next turn resumes there (its recurrent state cannot rewind), also after another
    conversation took the slot (the copy went to the RAM cache)."""

    def test_the_next_turn_resumes_at_the_boundary(self):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            model = model_with_template(tmp, "Qwen3.5-4B", "qwen35-test")
            # Two slots: the conversation must pick its own (the copy holds fewer tokens than
            # the live session, which the similarity test must not count against it).
            for parallel in ["1", "2"]:
                srv = Server(model, "--parallel", parallel, ctx=1024)
                try:
                    c = srv.client()
                    ask = lambda m: c.chat.completions.create(model="x", messages=m, max_tokens=8, temperature=0)
                    a = [{"role": "user", "content": "Tell me about Paris."}]
                    r1 = ask(a)
                    a += [{"role": "assistant", "content": r1.choices[0].message.content or "ok"},
                          {"role": "user", "content": "And about Rome?"}]
                    r2 = ask(a)
                    cached = r2.usage.prompt_tokens_details.cached_tokens
                    # Everything before the first turn's generation prompt ("assistant\n...") is kept.
                    self.assertGreaterEqual(cached, r1.usage.prompt_tokens - 8)
                    self.assertGreater(cached, 0)
                    ask([{"role": "user", "content": "Something else entirely, please."}])
                    a += [{"role": "assistant", "content": r2.choices[0].message.content or "ok"},
                          {"role": "user", "content": "And Berlin?"}]
                    r3 = ask(a)
                    self.assertGreaterEqual(r3.usage.prompt_tokens_details.cached_tokens,
                                            r2.usage.prompt_tokens - 8)
                    # One slot: the one-shot request took it, the copy came back from RAM.
                    hits = srv.metrics()["prompt_cache_hits_total"]
                    self.assertGreaterEqual(hits, 1 if parallel == "1" else 0)
                finally:
                    srv.close()

    def test_the_boundary_copy_counts_against_the_kv_budget(self):
        """The copy is KV memory too: counted in --kv-budget and kv_cache_bytes, and not taken
        when it does not fit beside the request (which is served all the same)."""
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            model = model_with_template(tmp, "Qwen3.5-4B", "qwen35-test")
            first = [{"role": "user", "content": "Tell me about Paris. " * 70}]
            for budget, marked in [("4096", True), ("512", False)]:
                srv = Server(model, "--parallel", "1", "--kv-budget", budget, ctx=512)
                try:
                    c = srv.client()
                    ask = lambda m: c.chat.completions.create(model="x", messages=m, max_tokens=8, temperature=0)
                    r1 = ask(first)
                    # Prompt + max_tokens + the copy's positions pass 512 only with the copy.
                    self.assertGreater(2 * r1.usage.prompt_tokens, 512 + 8 + 16)
                    _, props = srv.http("GET", "/props")
                    held = srv.metrics()["kv_cache_bytes"] // props["kv_bytes_per_position"]
                    self.assertLessEqual(held, int(budget))
                    # The live session, plus the copy when it was taken.
                    if marked:
                        self.assertGreater(held, r1.usage.prompt_tokens + 100, budget)
                    else:
                        self.assertLessEqual(held, r1.usage.prompt_tokens + 8, budget)
                    a = first + [{"role": "assistant", "content": r1.choices[0].message.content or "ok"},
                                 {"role": "user", "content": "And about Rome?"}]
                    r2 = ask(a)
                    cached = r2.usage.prompt_tokens_details.cached_tokens
                    if marked:
                        self.assertGreaterEqual(cached, r1.usage.prompt_tokens - 8, budget)
                    else:
                        self.assertEqual(cached, 0, budget)
                finally:
                    srv.close()


class CacheChoices(unittest.TestCase):
    def test_a_request_with_several_choices_keeps_what_it_displaces(self):
        """n = 2 takes both slots; the conversation one of them held goes to the RAM cache and
        its next turn evaluates only the new tokens."""
        srv = Server(QWEN3, "--parallel", "2")
        try:
            c = srv.client()
            ask = lambda p, **k: c.completions.create(model="x", prompt=p, max_tokens=4, temperature=0, **k)
            first = "Once upon a time " * 20
            r1 = ask(first)
            many = ask("fn main() { println!(" * 10, n=2, seed=1)
            self.assertEqual(len(many.choices), 2)
            r2 = ask(first + r1.choices[0].text + " And then")
            # (the last tokens may tokenize differently once text follows them)
            self.assertGreaterEqual(r2.usage.prompt_tokens_details.cached_tokens, r1.usage.prompt_tokens - 2)
            self.assertEqual(srv.metrics()["prompt_cache_hits_total"], 1)
        finally:
            srv.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
