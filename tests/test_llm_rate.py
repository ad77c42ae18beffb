"""Calls at the server's rate limit (issue 30) and announced retries (issue 26, item 6), against the real local server:
the stand-in states its limits in OpenAI's headers and answers 429 + Retry-After beyond them; the client learns the limit,
loses and doubles no call, says every retry and wait in one line, and gives up on a server that never answers."""
import json, socket, threading, urllib.error, urllib.request

import pytest

from kgqa_nb.llm import LLMClient, LLMError, offline_reply, triples_lookup_messages
from kgqa_nb.llm_spend import read_ledger
from kgqa_nb.llm_server import OfflineChatServer

WORLD = [(f'City{i}', 'country', f'Country{i % 7}') for i in range(80)]


def q(i): return triples_lookup_messages(WORLD, (f'City{i}', 'country', '?'))


def post(url, msgs):
    body = json.dumps(dict(model='kgqa-offline', messages=msgs)).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url + '/chat/completions', body, {'Content-Type': 'application/json'}), timeout=10) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e: return e.code, dict(e.headers)


def test_server_states_its_limit_and_refuses_beyond_it():
    with OfflineChatServer(rpm=60, burst_s=1.0) as srv:   # one request a second, no burst
        (s1, h1), (s2, h2) = post(srv.url, q(1)), post(srv.url, q(2))
    assert s1 == 200 and h1['x-ratelimit-limit-requests'] == '60' and h1['x-ratelimit-remaining-requests'] == '0'
    assert s2 == 429 and h2['Retry-After'] == '1' and 0 < int(h2['retry-after-ms']) <= 1000
    assert (srv.admitted, srv.throttled) == (1, 1)


def test_token_limit_is_stated_and_enforced():
    with OfflineChatServer(tpm=600, burst_s=6.0) as srv:   # 60 tokens in the bucket: one lookup prompt fits, two do not
        (s1, h1), (s2, h2) = post(srv.url, q(1)), post(srv.url, q(2))
    assert s1 == 200 and h1['x-ratelimit-limit-tokens'] == '600'
    assert s2 == 429 and int(h2['Retry-After']) >= 1


def test_client_learns_the_stated_limit_and_loses_or_doubles_no_call(tmp_path):
    said, msgs = [], [q(i) for i in range(60)]
    with OfflineChatServer(rpm=1200, delay_s=0.2, burst_s=0.5) as srv:   # 20 a second, replies take 0.2 s
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache_dir=tmp_path / 'llm', ledger=tmp_path / 'calls.jsonl',
                      concurrency=2, max_concurrency=64, backoff_base=0.01, say=said.append)
        res = c.chat_many(msgs)
    assert [r.text for r in res] == [offline_reply(m) for m in msgs]
    st = c.rate_stats()
    assert st['rpm'] == 1200 and st['concurrency'] > 2 and st['peak_inflight'] > 2   # grew past the no-limit level
    assert srv.admitted == 60                                                         # each call reached the model once
    assert read_ledger(tmp_path / 'calls.jsonl')['calls'] == 60
    assert len({json.loads(x)['key'] for x in c.cache_path.read_text().splitlines()}) == 60
    assert said and said[-1].startswith('kgqa llm: 60 requests in ') and 'of the stated 1,200/min' in said[-1]


def test_client_paces_to_a_stated_token_limit():
    msgs = [q(i) for i in range(40)]
    with OfflineChatServer(tpm=600_000, delay_s=0.05, burst_s=1.0) as srv:   # 10,000 tokens a second, prompts of ~700 tokens
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, backoff_base=0.01, say=[].append)
        res = c.chat_many(msgs)
    assert [r.text for r in res] == [offline_reply(m) for m in msgs]
    st = c.rate_stats()
    assert st['tpm'] == 600_000 and st['rpm'] is None and srv.admitted == 40
    assert srv.throttled == st['throttled'] and len(srv.requests) == 40 + srv.throttled   # a refused request was sent again, once


def test_no_stated_limit_429s_cut_the_calls_in_flight_once_per_window():
    msgs = [q(i) for i in range(24)]
    with OfflineChatServer(faults=['429'] * 3, delay_s=0.05) as srv:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, concurrency=8, backoff_base=0.01, say=[].append)
        res = c.chat_many(msgs)
        assert srv.max_inflight <= 8          # cut from 8 to 5: 21 answers cannot grow it back past 8
    assert [r.text for r in res] == [offline_reply(m) for m in msgs]
    assert c.rate_stats()['throttled'] == 3 and c.rate_stats()['rpm'] is None
    assert c.rate_stats()['decreases'] == 1  # three 429s to calls sent together: cut once, as TCP cuts once per window
    assert len(srv.requests) == 24 + 3       # each 429 cost one retry, nothing more


def test_every_retry_is_announced_with_its_wait():
    said = []
    with OfflineChatServer(faults=['500', '429:1', 'ok']) as srv:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, backoff_base=0.01, say=said.append)
        assert c.chat(q(1)).text == offline_reply(q(1))
    assert len(said) == 2
    assert 'HTTP 500' in said[0] and 'retry 1 of 5 in 0.0 s' in said[0]
    assert 'HTTP 429' in said[1] and "retry 2 of 5 in 1.0 s (the server's Retry-After)" in said[1]


class Silent:
    "A server that accepts connections and never answers (a stuck proxy, a server still loading a model)."
    def __init__(self):
        self.sock = socket.socket(); self.sock.bind(('127.0.0.1', 0)); self.sock.listen(16)
        self.accepted, self.conns, self.stop = 0, [], threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try: conn, _ = self.sock.accept()
            except OSError: continue
            self.accepted += 1; self.conns.append(conn)

    @property
    def url(self): return f'http://127.0.0.1:{self.sock.getsockname()[1]}/v1'

    def close(self):
        self.stop.set()
        for c in self.conns: c.close()
        self.sock.close()


def test_a_server_that_never_answers_fails_after_one_timeout_in_one_line():
    srv = Silent()
    try:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, timeout=1.0, max_retries=5, concurrency=1,
                      probe_timeout=0, say=(said := []).append)   # no first-contact probe: the request's own timeout finds it
        with pytest.raises(LLMError) as e: c.chat(q(1))
        out = c.chat_many([q(i) for i in range(8)], return_exceptions=True)   # a batch: one knock, then all fail with it
    finally: srv.close()
    assert 'accepted the connection but sent no answer within timeout=1s' in str(e.value) and '\n' not in str(e.value)
    assert said == [] and c.usage_summary()['retries'] == 0
    assert all(isinstance(r, LLMError) for r in out) and srv.accepted == 2


def test_the_first_contact_probe_finds_a_server_that_never_answers_before_any_request():
    "Issue 42: not one 60 s request timeout but `probe_timeout` seconds of a GET /models, once for the whole batch."
    srv = Silent()
    try:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, probe_timeout=0.5, concurrency=8, say=(said := []).append)
        out = c.chat_many([q(i) for i in range(16)], return_exceptions=True)
    finally: srv.close()
    assert all(isinstance(r, LLMError) and 'accepted the connection but sent nothing back within probe_timeout=0.5s' in str(r) for r in out)
    assert '\n' not in str(out[0]) and said == [] and srv.accepted == 1 and c.usage_summary()['api_calls'] == 0


def test_a_slow_server_that_answers_the_probe_is_waited_for():
    "Alive but slow: the probe is answered at once, and a reply slower than `probe_timeout` still arrives (only `timeout` bounds it)."
    with OfflineChatServer(delay_s=1.0) as srv:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, probe_timeout=0.2, timeout=30)
        assert c.chat(q(3)).text == offline_reply(q(3)) and c._probed and c.usage_summary()['retries'] == 0
    with pytest.raises(ValueError, match='probe_timeout must be a number of seconds >= 0'): LLMClient('offline', probe_timeout=float('nan'))


def test_without_rate_limit_headers_the_gate_grows_until_429s_and_falls_after(tmp_path):
    "AIMD against a limited server that states nothing (issue 41, item 6), followed by its steps, not by a clock."
    msgs = [q(i) for i in range(300)]
    with OfflineChatServer(rpm=3000, burst_s=0.5, rate_headers=False, delay_s=0.1) as srv:   # 50 calls/s: ~5 in flight fill it
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, concurrency=2, say=[].append)
        res = c.chat_many(msgs)
    g, steps = c.rate_stats(), c._gate.changes
    assert [r.text for r in res] == [offline_reply(m) for m in msgs] and srv.admitted == 300    # nothing lost, nothing doubled
    assert g['rpm'] is None and g['increases'] > 0 and srv.max_inflight > 2                   # it rose above the start value
    assert g['throttled'] > 0 and g['decreases'] > 0                                          # until the server said 429
    first_down = next(i for i, (k, _) in enumerate(steps) if k == 'down')
    assert steps[first_down][1] < max(n for _, n in steps[:first_down])                       # and fell after it


def test_a_queueing_server_without_headers_or_429s_is_driven_to_its_capacity():
    """A llama.cpp/vLLM-like server works on 4 answers at once and queues the rest, stating nothing and refusing nothing:
    the gate grows from 2 until every slot is busy, and stops growing once the replies queue (counts, not a clock)."""
    with OfflineChatServer(slots=4, delay_s=0.1, rate_headers=False) as srv:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, concurrency=2, say=[].append)
        c.chat_many([q(i % 80) for i in range(400)])
    g = c.rate_stats()
    assert srv.max_busy == 4 and srv.admitted == 400 and g['throttled'] == 0   # every slot busy at once; nothing refused
    assert g['increases'] >= 2 and g['peak_inflight'] <= 16                    # grown past the slots, held once replies queue

