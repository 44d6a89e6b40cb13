"""The chat page of `libt2p serve` (`/`), in a real browser: headless Chromium driven by Selenium.

Run by test.sh (which installs Debian's chromium and chromium-driver, and sets
T2P_REQUIRE_BROWSER=1 so that a missing browser fails instead of skipping):
    T2P_LIBT2P=target/release/libt2p target/server-venv/bin/python -m unittest -v tests/server/test_webui.py

The page's answers are checked against the API's non-streamed greedy answer to the same messages
and against `libt2p chat --temp 0`; its Stop against the server's slot gauge; its rendering against
a forced answer full of markup, which must be shown as characters and never run. Screenshots of
each state go to target/webui-*.png.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import BIN, CHAT, ROOT, Server, chat_ref  # noqa: E402

CHROMIUM = os.environ.get("T2P_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("T2P_CHROMEDRIVER", "/usr/bin/chromedriver")
REQUIRED = os.environ.get("T2P_REQUIRE_BROWSER") == "1"
SHOTS = os.path.join(ROOT, "target")
WAIT = 120

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False


def browser_missing():
    """Why the browser tests cannot run here, or None."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if not HAVE_SELENIUM:
        missing.append("the selenium package")
    return "missing: " + ", ".join(missing) if missing else None


def get(url, method="GET", headers=None, data=None):
    """(status, headers, body bytes) of one request; never raises for HTTP errors."""
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


class PageHttp(unittest.TestCase):
    """The page's files and headers, and what --api-key and --no-webui do to them (no browser)."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(CHAT, "--api-key", "sekrit")

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def test_files_types_and_headers(self):
        files = {"/": "text/html", "/index.html": "text/html", "/app.js": "text/javascript",
                 "/markdown.js": "text/javascript", "/style.css": "text/css"}
        page = None
        for path, kind in files.items():
            status, h, body = get(self.srv.url + path)
            self.assertEqual(status, 200, path)
            self.assertEqual(h["Content-Type"], kind + "; charset=utf-8", path)
            self.assertEqual(h["Cache-Control"], "no-cache", path)
            self.assertEqual(h["X-Content-Type-Options"], "nosniff", path)
            csp = h["Content-Security-Policy"]
            directives = dict((d.split(" ", 1) + [""])[:2] for d in (x.strip() for x in csp.split(";")) if d)
            self.assertEqual(directives["default-src"], "'none'", csp)
            self.assertEqual(directives["script-src"], "'self'", csp)
            self.assertEqual(directives["connect-src"], "'self'", csp)
            self.assertEqual(directives["frame-ancestors"], "'none'", csp)
            self.assertNotIn("unsafe", csp)
            self.assertGreater(len(body), 500, path)
            if path == "/":
                page = body.decode()
        self.assertEqual(get(self.srv.url + "/index.html")[2].decode(), page)
        self.assertIn('<script type="module" src="/app.js"></script>', page)
        # HEAD answers the headers alone; other methods are the API's 405.
        status, h, body = get(self.srv.url + "/", method="HEAD")
        self.assertEqual((status, body), (200, b""))
        status, _, body = get(self.srv.url + "/", method="POST", data=b"{}")
        self.assertEqual(status, 405)
        self.assertEqual(json.loads(body)["error"]["code"], "method_not_allowed")
        # Nothing else is served from the page's directory.
        for path in ("/webui/app.js", "/../Cargo.toml", "/index.htm", "/app.js/", "/style.css?x=1/../"):
            status = get(self.srv.url + path)[0]
            self.assertIn(status, (404, 200) if "?" in path else (404,), path)

    def test_key_guards_the_api_not_the_page(self):
        self.assertEqual(get(self.srv.url + "/")[0], 200)
        self.assertEqual(get(self.srv.url + "/app.js")[0], 200)
        self.assertEqual(get(self.srv.url + "/v1/models")[0], 401)
        self.assertEqual(get(self.srv.url + "/v1/models", headers={"Authorization": "Bearer sekrit"})[0], 200)

    def test_no_webui_turns_it_off(self):
        srv = Server(CHAT, "--no-webui")
        try:
            for path in ("/", "/index.html", "/app.js", "/style.css"):
                status, h, body = get(srv.url + path)
                self.assertEqual(status, 404, path)
                self.assertEqual(json.loads(body)["error"]["code"], "not_found")
            self.assertEqual(get(srv.url + "/v1/models")[0], 200)
        finally:
            srv.close()
        # The last of --webui / --no-webui wins.
        srv = Server(CHAT, "--no-webui", "--webui")
        try:
            self.assertEqual(get(srv.url + "/")[0], 200)
        finally:
            srv.close()


class BrowserCase:
    """A headless Chromium on a fresh profile, pointed at a server started by the subclass."""

    SERVER_ARGS = ()
    CTX = 512

    @classmethod
    def setUpClass(cls):
        why = browser_missing()
        if why:
            if REQUIRED:
                raise RuntimeError("the browser tests need Chromium, chromedriver and selenium: " + why)
            raise unittest.SkipTest("no browser (" + why + "); test.sh installs it and requires it")
        cls.srv = Server(CHAT, *cls.SERVER_ARGS, ctx=cls.CTX)
        cls.profile = tempfile.mkdtemp(prefix="t2p-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", "--window-size=1280,900", "--user-data-dir=" + cls.profile):
            opts.add_argument(flag)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        try:
            cls.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        except Exception:
            cls.srv.close()
            shutil.rmtree(cls.profile, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.srv.close()
        shutil.rmtree(cls.profile, ignore_errors=True)

    def setUp(self):
        # Each test starts from an empty browser storage.
        self.driver.set_window_size(1280, 900)
        self.driver.get(self.srv.url + "/")
        self.driver.execute_script("localStorage.clear()")
        self.driver.get(self.srv.url + "/")
        self.driver.get_log("browser")

    def tearDown(self):
        # The page must run without a script error or a CSP violation (the favicon's 404 aside).
        bad = [e["message"] for e in self.driver.get_log("browser")
               if e["level"] == "SEVERE" and "favicon" not in e["message"]
               and "the server responded with a status of" not in e["message"]]
        self.assertEqual(bad, [], "browser console errors")

    # ---- helpers ----

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def el(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def els(self, css):
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def shot(self, name):
        path = os.path.join(SHOTS, "webui-%s.png" % name)
        self.driver.save_screenshot(path)
        return path

    def settings(self, **values):
        """Sets the settings through their inputs (the events the page listens to)."""
        self.js("document.getElementById('settings').open = true")
        for name, value in values.items():
            box = self.el("#set-" + name)
            self.js("arguments[0].value = ''", box)
            box.send_keys(str(value))
        self.js("document.getElementById('settings').open = false")

    def say(self, text):
        """Types `text` in the message box and presses Enter."""
        box = self.el("#input")
        box.send_keys(text)
        box.send_keys(Keys.ENTER)

    def wait_idle(self):
        WebDriverWait(self.driver, WAIT).until(
            lambda d: d.execute_script("return document.body.dataset.busy") == "0")

    def stored(self):
        """The conversations as the page keeps them in localStorage."""
        return json.loads(self.js("return localStorage.getItem('t2p.conversations')") or "[]")

    def current(self):
        cur = json.loads(self.js("return localStorage.getItem('t2p.current')"))
        return next(c for c in self.stored() if c["id"] == cur)

    def api(self, body, key=None):
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        status, _, data = get(self.srv.url + "/v1/chat/completions", "POST", headers, json.dumps(body).encode())
        self.assertEqual(status, 200, data)
        return json.loads(data)


class Page(BrowserCase, unittest.TestCase):
    # The whole context of the tiny model: an answer long enough to stop in the middle.
    CTX = 4096
    SERVER_ARGS = ("--parallel", "2")

    def test_answer_is_streamed_and_equals_the_greedy_one(self):
        # The request the page sends, seen from inside the page.
        self.js("""window.__bodies = []; const f = window.fetch;
                   window.fetch = (u, o) => { if (o && o.body) window.__bodies.push(JSON.parse(o.body)); return f(u, o); };""")
        self.settings(temperature=0, max_tokens=24, system="")
        # Shift+Enter is a new line, not a send.
        box = self.el("#input")
        box.send_keys("x")
        ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
        self.assertEqual(box.get_property("value"), "x\n")
        self.assertEqual(self.els("#messages .msg"), [])
        self.js("arguments[0].value = ''", box)
        self.say("Hello there")
        self.wait_idle()
        bodies = self.js("return window.__bodies")
        self.assertEqual(len(bodies), 1)
        sent = bodies[0]
        self.assertIs(sent["stream"], True)
        self.assertEqual(sent["stream_options"], {"include_usage": True})
        self.assertEqual(sent["messages"], [{"role": "user", "content": "Hello there"}])
        self.assertEqual((sent["temperature"], sent["max_tokens"]), (0, 24))
        want = self.api({"messages": sent["messages"], "max_tokens": 24, "temperature": 0})
        msg = want["choices"][0]["message"]
        answer = self.current()["messages"][1]
        self.assertEqual(answer["content"], msg["content"])
        self.assertEqual(answer.get("reasoning", ""), msg.get("reasoning_content") or "")
        if not msg.get("reasoning_content"):
            self.assertEqual(answer["content"], chat_ref(CHAT, "Hello there", 24))
        view = self.els("#messages .msg")[-1]
        self.assertEqual(view.get_attribute("data-state"), "done")
        usage = want["usage"]
        stats = view.find_element(By.CSS_SELECTOR, ".stats").text
        self.assertIn("prompt %d tokens" % usage["prompt_tokens"], stats)
        self.assertIn("generated %d" % usage["completion_tokens"], stats)
        self.assertIn("tok/s", stats)
        # The source view shows the text exactly as it came.
        self.js("arguments[0].click()", view.find_element(By.CSS_SELECTOR, "button.source"))
        src = view.find_element(By.CSS_SELECTOR, ".content .source")
        self.assertEqual(src.get_property("textContent"), msg["content"])
        self.shot("answer")

    def test_stop_aborts_and_frees_the_slot(self):
        # A long greedy answer: the end-of-turn tokens banned, so it runs to max_tokens.
        _, _, data = get(self.srv.url + "/tokenize", "POST", {}, json.dumps(
            {"content": "<|im_end|><|endoftext|>", "parse_special": True}).encode())
        ban = {str(t): -100 for t in json.loads(data)["tokens"]}
        self.assertEqual(len(ban), 2)
        self.settings(temperature=0, max_tokens=4000, extra=json.dumps({"logit_bias": ban}))
        before = self.srv.metrics()
        self.say("Tell me a long story")
        WebDriverWait(self.driver, WAIT).until(lambda d: d.execute_script(
            "const m = document.querySelector('#messages .msg.assistant .content');"
            "return m && m.textContent.length > 20"))
        self.assertEqual(self.srv.metrics()["slots_busy"], 1, "the answer is still running")
        self.el("#stop").click()
        self.wait_idle()
        view = self.els("#messages .msg")[-1]
        self.assertEqual(view.get_attribute("data-state"), "stopped")
        self.assertIn("stopped", view.find_element(By.CSS_SELECTOR, ".stats").text)
        self.assertTrue(self.srv.wait_metric("slots_busy", 0), "the slot is freed")
        after = self.srv.metrics()
        self.assertEqual(after["requests_cancelled_total"], before["requests_cancelled_total"] + 1)
        self.assertLess(after["completion_tokens_total"] - before["completion_tokens_total"], 4000)
        # What was shown is kept, and is the start of the greedy answer.
        partial = self.current()["messages"][1]["content"]
        self.assertGreater(len(partial), 20)
        made = int(after["completion_tokens_total"] - before["completion_tokens_total"])
        whole = self.api({"messages": [{"role": "user", "content": "Tell me a long story"}],
                          "max_tokens": made + 1, "temperature": 0, "logit_bias": ban})
        self.assertTrue(whole["choices"][0]["message"]["content"].startswith(partial))
        self.assertTrue(self.el("#send").is_displayed())
        self.shot("stopped")

    def test_conversations_survive_a_reload(self):
        self.settings(temperature=0, max_tokens=8)
        self.say("first question")
        self.wait_idle()
        first = self.current()
        self.el("#new-chat").click()
        self.say("second question")
        self.wait_idle()
        self.assertEqual(len(self.els("#conversations li")), 2)
        # Switch back to the first one.
        self.els("#conversations li")[1].find_element(By.CSS_SELECTOR, ".open").click()
        self.assertEqual(self.el("#messages .msg.user").text.split("\n")[-1], "first question")
        # Rename it (a name is text: markup in it stays characters).
        li = self.els("#conversations li")[1]
        self.js("arguments[0].click()", li.find_element(By.CSS_SELECTOR, ".rename"))
        box = self.el("#conversations .rename-input")
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys("Renamed <b>x</b>", Keys.ENTER)
        self.driver.refresh()
        titles = [e.get_property("textContent") for e in self.els("#conversations .open")]
        self.assertEqual(titles, ["second question", "Renamed <b>x</b>"])
        self.assertEqual(self.el("#title").get_property("textContent"), "Renamed <b>x</b>")
        self.assertEqual(self.els("#conversations b"), [])
        msgs = self.els("#messages .msg")
        self.assertEqual(len(msgs), 2)
        self.assertEqual(self.current()["messages"], first["messages"])
        self.shot("reloaded")
        # Delete the second: one click arms, the second deletes.
        li = self.els("#conversations li")[0]
        delete = li.find_element(By.CSS_SELECTOR, ".delete")
        self.js("arguments[0].click()", delete)
        self.assertEqual(len(self.els("#conversations li")), 2)
        self.js("arguments[0].click()", delete)
        self.driver.refresh()
        titles = [e.get_property("textContent") for e in self.els("#conversations .open")]
        self.assertEqual(titles, ["Renamed <b>x</b>"])

    def test_markup_in_answers_and_messages_is_shown_not_run(self):
        forced = ("<img src=x onerror=window.__xss=1> <script>window.__xss=2</script>\n\n"
                  "**<b>bold</b>** and `<i>x</i>`\n\n- <a href=javascript:window.__xss=5>link</a>\n\n"
                  "```html\n<svg onload=window.__xss=3>\n```\n")
        grammar = "root ::= " + json.dumps(forced)
        self.settings(temperature=0, max_tokens=200, extra=json.dumps({"grammar": grammar}))
        self.say("<img src=y onerror=window.__xss=4>")
        self.wait_idle()
        answer = self.current()["messages"][1]
        self.assertEqual(answer["content"], forced, "the grammar forced the answer")
        time.sleep(0.5)  # an image's error handler would have fired by now
        self.assertIsNone(self.js("return window.__xss"))
        for tag in ("img", "script", "svg", "b", "i", "a"):
            self.assertEqual(self.els("#messages %s, #conversations %s, #title %s" % (tag, tag, tag)), [], tag)
        view = self.els("#messages .msg.assistant")[-1]
        text = view.find_element(By.CSS_SELECTOR, ".content").get_property("textContent")
        for piece in ("<img src=x onerror=window.__xss=1>", "<script>window.__xss=2</script>",
                      "<a href=javascript:window.__xss=5>link</a>", "<svg onload=window.__xss=3>"):
            self.assertIn(piece, text)
        self.assertEqual(view.find_element(By.CSS_SELECTOR, "strong").get_property("textContent"), "<b>bold</b>")
        self.assertEqual(view.find_element(By.CSS_SELECTOR, "p code").get_property("textContent"), "<i>x</i>")
        self.assertEqual(view.find_element(By.CSS_SELECTOR, "li").get_property("textContent"),
                         "<a href=javascript:window.__xss=5>link</a>")
        self.assertEqual(view.find_element(By.CSS_SELECTOR, ".code pre code").get_property("textContent"),
                         "<svg onload=window.__xss=3>")
        self.assertEqual(view.find_element(By.CSS_SELECTOR, ".code button.copy").text, "Copy")
        user = self.el("#messages .msg.user .content").get_property("textContent")
        self.assertEqual(user, "<img src=y onerror=window.__xss=4>")
        self.assertEqual(self.el("#title").get_property("textContent"), "<img src=y onerror=window.__xss=4>")
        self.shot("markup")

    def stub_chat(self, replies):
        """Replaces the page's fetch of /v1/chat/completions by canned replies, one per request:
        {"status", "json"} or {"events": [payloads]} (server-sent events). For what this server
        cannot be made to send on demand: a 413, a 503, another branch's `reasoning_content`."""
        self.js("""
            window.__replies = arguments[0];
            window.__sent = [];
            const real = window.fetch;
            window.fetch = async (url, opts) => {
              if (url !== "/v1/chat/completions") return real(url, opts);
              window.__sent.push(JSON.parse(opts.body));
              const r = window.__replies.shift();
              if (r.events) {
                const enc = new TextEncoder();
                const body = new ReadableStream({ start(c) {
                  for (const e of r.events) c.enqueue(enc.encode("data: " + (typeof e === "string" ? e : JSON.stringify(e)) + "\\n\\n"));
                  c.close();
                } });
                return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
              }
              return new Response(JSON.stringify(r.json), { status: r.status, headers: { "Content-Type": "application/json" } });
            };""", replies)

    def test_reasoning_is_folded_and_errors_are_shown_in_place(self):
        def err(code, message):
            return {"error": {"message": message, "type": "server_error", "code": code}}

        def delta(**d):
            return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}

        usage = {"object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}}
        self.stub_chat([
            {"status": 503, "json": err("server_busy", "the server is busy <b>now</b>")},
            {"events": [delta(role="assistant", content=""), delta(reasoning_content="Think <i>first</i>,"),
                        delta(reasoning_content=" then answer."), delta(content="The **answer**."), usage, "[DONE]"]},
            {"status": 413, "json": err("body_too_large", "the request body is larger than 16777216 bytes")},
            {"events": [delta(content="half"), err("model_error", "the model thread stopped")]},
        ])
        self.say("question")
        self.wait_idle()
        view = self.els("#messages .msg")[-1]
        self.assertEqual(view.get_attribute("data-state"), "error")
        box = view.find_element(By.CSS_SELECTOR, ".error")
        self.assertIn("busy", box.text)
        self.assertIn("(503) the server is busy <b>now</b>", box.get_property("textContent"))
        self.assertEqual(box.find_elements(By.CSS_SELECTOR, "b"), [])
        self.shot("busy")
        box.find_element(By.CSS_SELECTOR, "button.retry").click()
        self.wait_idle()
        msgs = self.current()["messages"]
        self.assertEqual([m["role"] for m in msgs], ["user", "assistant"], "the retry replaced the error")
        self.assertEqual((msgs[1]["content"], msgs[1]["reasoning"]), ("The **answer**.", "Think <i>first</i>, then answer."))
        view = self.els("#messages .msg")[-1]
        details = view.find_element(By.CSS_SELECTOR, "details.reasoning")
        self.assertIsNone(details.get_attribute("open"), "folded")
        self.assertEqual(details.find_element(By.CSS_SELECTOR, ".reasoning-text").get_property("textContent"),
                         "Think <i>first</i>, then answer.")
        self.assertEqual(view.find_element(By.CSS_SELECTOR, ".content").get_property("textContent"), "The answer.")
        self.assertIn("prompt 7 tokens · generated 5", view.find_element(By.CSS_SELECTOR, ".stats").text)
        details.find_element(By.CSS_SELECTOR, "summary").click()
        self.shot("reasoning")
        self.say("more")
        self.wait_idle()
        # The answer goes back with the conversation, its reasoning does not.
        self.assertEqual(self.js("return window.__sent")[-1]["messages"], [
            {"role": "user", "content": "question"}, {"role": "assistant", "content": "The **answer**."},
            {"role": "user", "content": "more"}])
        self.assertIn("too large", self.els("#messages .msg")[-1].find_element(By.CSS_SELECTOR, ".error").text)
        self.els("#messages .msg")[-1].find_element(By.CSS_SELECTOR, "button.retry").click()
        self.wait_idle()
        last = self.current()["messages"][-1]
        self.assertEqual(last["content"], "half")
        self.assertEqual(last["error"]["message"], "the model thread stopped")

    def test_narrow_window_keeps_the_message_box_usable(self):
        self.driver.set_window_size(390, 800)
        self.driver.refresh()
        width = self.js("return window.innerWidth")
        self.assertLess(width, 700)
        for css in ("#input", "#send"):
            rect = self.js("return arguments[0].getBoundingClientRect().toJSON()", self.el(css))
            self.assertTrue(self.el(css).is_displayed(), css)
            self.assertGreaterEqual(rect["left"], 0, css)
            self.assertLessEqual(rect["right"], width, css)
            self.assertLessEqual(rect["bottom"], self.js("return window.innerHeight"), css)
        self.assertGreater(self.js("return arguments[0].getBoundingClientRect().width", self.el("#input")), width / 2)
        # The side panel is folded away, and the menu button opens it.
        side = lambda: self.js("return document.getElementById('sidebar').getBoundingClientRect().right")  # noqa: E731
        self.assertLessEqual(side(), 0)
        self.el("#menu").click()
        WebDriverWait(self.driver, 5).until(lambda d: side() > 100)
        self.shot("narrow-menu")
        self.el("#close-side").click()
        WebDriverWait(self.driver, 5).until(lambda d: side() <= 0)
        self.settings(temperature=0, max_tokens=12)
        self.say("Hi from a phone")
        self.wait_idle()
        self.assertEqual(self.els("#messages .msg")[-1].get_attribute("data-state"), "done")
        self.shot("narrow")


class PageWithKey(BrowserCase, unittest.TestCase):
    SERVER_ARGS = ("--api-key", "sekrit")

    def test_401_asks_for_the_key_in_place(self):
        self.settings(temperature=0, max_tokens=8)
        self.say("Hello there")
        self.wait_idle()
        view = self.els("#messages .msg")[-1]
        self.assertEqual(view.get_attribute("data-state"), "error")
        self.assertIn("(401)", view.find_element(By.CSS_SELECTOR, ".error").text)
        self.shot("key-asked")
        view.find_element(By.CSS_SELECTOR, ".key-input").send_keys("sekrit")
        view.find_element(By.CSS_SELECTOR, ".error button.retry").click()
        self.wait_idle()
        msgs = self.current()["messages"]
        self.assertEqual([m["role"] for m in msgs], ["user", "assistant"])
        want = self.api({"messages": [{"role": "user", "content": "Hello there"}],
                         "max_tokens": 8, "temperature": 0}, key="sekrit")
        self.assertEqual(msgs[1]["content"], want["choices"][0]["message"]["content"])
        self.assertEqual(json.loads(self.js("return localStorage.getItem('t2p.apiKey')")), "sekrit")
        # Kept over a reload.
        self.driver.refresh()
        self.say("again")
        self.wait_idle()
        self.assertEqual(self.els("#messages .msg")[-1].get_attribute("data-state"), "done")


if __name__ == "__main__":
    unittest.main(verbosity=2)
