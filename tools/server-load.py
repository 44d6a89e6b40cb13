#!/usr/bin/env python3
"""Aggregate decode throughput of `libt2p serve` at 1, 2, 4 and 8 concurrent streams.

    tools/server-load.py --url http://127.0.0.1:8080 [--streams 1,2,4,8] [--tokens 64] [--rounds 2]

Standard library only. Each stream is a streaming /v1/completions request at temperature 0 with
`max_tokens` tokens; a level's aggregate tok/s is (tokens received after each stream's first
token) / (wall time from the first first-token to the last token), so prompt evaluation and the
first token's latency are left out, as in `libt2p bench -m`'s tg figure. Also printed: the
median time to first token, and the server's own step counters (/metrics) over the level:
mean sequences per forward pass.
"""

import argparse
import json
import re
import statistics
import threading
import time
import urllib.request


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return {k: float(v) for k, v in re.findall(r"^t2p_(\w+) (\S+)$", text, re.M)}


def one_stream(url, prompt, tokens, out, i, start):
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    start.wait()
    t0 = time.time()
    first = last = None
    n = 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and first is None:
                first = time.time()
            last = time.time()
    out[i] = (t0, first, last, n)


def level(url, k, prompt, tokens):
    out = [None] * k
    start = threading.Event()
    ths = [threading.Thread(target=one_stream, args=(url, prompt + " " * i, tokens, out, i, start))
           for i in range(k)]
    for t in ths:
        t.start()
    m0 = metrics(url)
    start.set()
    for t in ths:
        t.join()
    m1 = metrics(url)
    t_first = min(o[1] for o in out)
    t_end = max(o[2] for o in out)
    gen = sum(o[3] - 1 for o in out)  # the first token of each stream comes from the prompt pass
    steps = m1["steps_total"] - m0["steps_total"]
    cols = m1["step_tokens_total"] - m0["step_tokens_total"]
    return {
        "streams": k,
        "tok_s": gen / max(t_end - t_first, 1e-9),
        "ttft_s": statistics.median(o[1] - o[0] for o in out),
        "tokens": sum(o[3] for o in out),
        "cols_per_step": cols / max(steps, 1),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2, help="runs per level; the best is reported")
    ap.add_argument("--prompt", default="Once upon a time, in a land far away,")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    level(a.url, 1, a.prompt, 4)  # warm-up
    for k in map(int, a.streams.split(",")):
        best = max((level(a.url, k, a.prompt, a.tokens) for _ in range(a.rounds)), key=lambda r: r["tok_s"])
        rows.append(best)
        if not a.json:
            print("streams %2d: %8.2f tok/s aggregate (%6.2f per stream) | ttft %.2f s | %.2f columns per step"
                  % (k, best["tok_s"], best["tok_s"] / k, best["ttft_s"], best["cols_per_step"]), flush=True)
    if a.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
