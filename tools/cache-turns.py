#!/usr/bin/env python3
"""How much of each turn of a conversation `libt2p serve` evaluates again.

    tools/cache-turns.py --url http://127.0.0.1:18090 [--turns 10] [--max-tokens 16] [--alone]

Standard library only. Runs conversation A on /v1/chat/completions for `--turns` turns; between
two of A's turns it runs one turn of a second conversation B and a one-shot request (a short
unrelated prompt, as a client's title request), so that with `--parallel 2` A's slot is wanted
by others (`--alone`: A only, the case of one user). Requests are sequential, so the delta of the server's
`t2p_prompt_tokens_evaluated_total` around a request is what that request evaluated. Prints, per
turn of A: prompt tokens, `cached_tokens`, and prompt tokens evaluated. Start the server with
`--parallel 2`; greedy decoding (`temperature` 0) makes runs comparable.
"""

import argparse
import json
import re
import urllib.request


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    m = re.search(r"^t2p_%s (\S+)$" % name, text, re.M)
    if m is None:
        raise SystemExit("the server has no t2p_%s series" % name)
    return float(m.group(1))


def chat(url, messages, max_tokens):
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        out = json.loads(r.read())
    usage = out["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return out["choices"][0]["message"].get("content") or "", usage["prompt_tokens"], cached


def measured(url, messages, max_tokens):
    """A request and the prompt tokens the server evaluated for it."""
    before = metric(url, "prompt_tokens_evaluated_total")
    answer, prompt, cached = chat(url, messages, max_tokens)
    evaluated = metric(url, "prompt_tokens_evaluated_total") - before
    return answer, prompt, cached, int(evaluated)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:18090")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--alone", action="store_true", help="conversation A only")
    args = ap.parse_args()
    a = [{"role": "system", "content": "You are a helpful assistant."}]
    b = [{"role": "system", "content": "You answer in one sentence."}]
    print("turn  prompt  cached  evaluated  new")
    total_eval = total_new = 0
    prev_len = 0
    for turn in range(args.turns):
        a.append({"role": "user", "content": "Turn %d of A: tell me more about topic number %d." % (turn, turn)})
        answer, prompt, cached, evaluated = measured(args.url, a, args.max_tokens)
        a.append({"role": "assistant", "content": answer})
        # Tokens A's prompt gained since the previous turn's prompt: the least it must evaluate
        # (the previous answer, re-rendered, and the new message).
        new = prompt - prev_len
        prev_len = prompt
        total_eval += evaluated
        total_new += new
        print("%4d  %6d  %6d  %9d  %3d" % (turn + 1, prompt, cached, evaluated, new))
        if args.alone:
            continue
        b.append({"role": "user", "content": "B asks question %d about something else entirely." % turn})
        answer_b, _, _, _ = measured(args.url, b, args.max_tokens)
        b.append({"role": "assistant", "content": answer_b})
        title = [{"role": "user", "content": "Write a 3-word title for: topic %d" % turn}]
        measured(args.url, title, args.max_tokens)
    print("A: %d prompt tokens evaluated over %d turns; %d new" % (total_eval, args.turns, total_new))


if __name__ == "__main__":
    main()
