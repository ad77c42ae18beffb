"""The LLM client against a real local OpenAI-compatible server (OfflineChatServer): retries, record/replay, secrets, concurrency."""
import json, os, signal, socket, subprocess, sys, textwrap

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from kgqa_nb.core import CacheMissError, write_table
from kgqa_nb.llm import (ChatResult, LLMClient, LLMError, OfflineModelError, ResponseCache, offline_reply, register_offline_model,
                         request_key, triples_lookup_messages)
from kgqa_nb.llm_spend import read_ledger
from kgqa_nb.llm_server import OfflineChatServer
from kgqa_nb.sparql import ServerStartError

SECRET = 'sk-test-SECRET123'
WORLD = [(f'City{i}', 'country', f'Country{i % 7}') for i in range(60)] + [(f'City{i}', 'mayor', f'Person{i}') for i in range(60)]


def q(i, rel='country'):
    return triples_lookup_messages(WORLD, (f'City{i}', rel, '?'))


def online(srv, tmp_path=None, **kw):
    kw.setdefault('backoff_base', 0.01)
    if tmp_path is None: kw.setdefault('cache', False)
    else: kw.setdefault('cache_dir', tmp_path / 'llm')
    return LLMClient('openai', model='kgqa-offline', base_url=srv.url, **kw)


def test_openai_path_equals_offline_path():
    msgs = [q(i) for i in range(10)] + [q(i, 'mayor') for i in range(10)]
    off = LLMClient(cache=False).chat_many(msgs)
    with OfflineChatServer() as srv:
        on = online(srv).chat_many(msgs)
    assert [r.text for r in on] == [r.text for r in off] == [offline_reply(m) for m in msgs]
    assert [r.usage['prompt_tokens'] for r in on] == [r.usage['prompt_tokens'] for r in off]
    assert [r.usage['completion_tokens'] for r in on] == [r.usage['completion_tokens'] for r in off]
    assert off[0].text == 'Country0' and on[11].text == 'Person1'
    assert all(isinstance(r, ChatResult) and not r.cached for r in on)


def test_survives_faults_with_exact_request_count():
    faults = ['429', '500', 'timeout', 'garbage', 'nochoices', 'drop', '503', 'ok']
    with OfflineChatServer(faults=faults, hang_s=2.5) as srv:
        c = online(srv, timeout=1.0, max_retries=7)
        r = c.chat(q(3))
        assert r.text == 'Country3' and r.attempts == 8
        assert [x['fault'] for x in srv.requests] == faults
        s = c.usage_summary()
        assert (s['api_calls'], s['retries'], s['calls']) == (8, 7, 1)
        # the fault script is used up: the next call takes one request
        c.chat(q(4)); assert len(srv.requests) == 9


def test_llmerror_after_max_retries():
    for fault in ['500', '429', 'garbage', 'timeout']:
        warm = ['ok'] if fault == 'timeout' else []  # timeouts are retried only once the server has answered something
        with OfflineChatServer(faults=warm + [fault] * 10, hang_s=1.5) as srv:
            c = online(srv, max_retries=3, timeout=0.5)
            if warm: c.chat(q(0))
            with pytest.raises(LLMError, match='gave up after 4 attempts'):
                c.chat(q(1))
            assert len(srv.requests) == 4 + len(warm), fault


def test_4xx_fails_at_once():
    for fault in ['400', '404', '422']:
        with OfflineChatServer(faults=[fault]) as srv:
            with pytest.raises(LLMError, match=f'HTTP {fault}'):
                online(srv).chat(q(1))
            assert len(srv.requests) == 1
    with OfflineChatServer(api_key=SECRET) as srv:   # wrong key -> 401, not retried
        with pytest.raises(LLMError, match='HTTP 401'):
            online(srv, api_key='sk-wrong-key').chat(q(1))
        assert len(srv.requests) == 1
        assert online(srv, api_key=SECRET).chat(q(1)).text == 'Country1'   # the right key is sent as a Bearer token


def test_no_offline_model_is_a_400_not_retried():
    with OfflineChatServer() as srv:
        with pytest.raises(LLMError, match='no offline model matches'):
            online(srv).chat([dict(role='user', content='hello there')])
        assert len(srv.requests) == 1


def test_retry_after_is_respected_and_bounded():
    slept = []
    with OfflineChatServer(faults=['429:7', '429:1000', '500']) as srv:
        c = online(srv, max_retry_after=60.0, backoff_base=0.5, backoff_max=4.0)
        c._sleep = slept.append
        assert c.chat(q(2)).text == 'Country2'
    assert slept[:2] == [7.0, 60.0]
    assert 1.0 <= slept[2] <= 2.0   # no Retry-After: the third failure backs off b = min(4, 0.5 * 2**2) = 2, jittered into [b/2, b]


def test_backoff_is_exponential_capped_and_jittered():
    slept = []
    with OfflineChatServer(faults=['500'] * 5) as srv:
        c = online(srv, backoff_base=1.0, backoff_max=3.0)
        c._sleep = slept.append
        c.chat(q(2))
    bounds = [(0.5, 1), (1, 2), (1.5, 3), (1.5, 3), (1.5, 3)]
    assert len(slept) == 5 and all(lo <= d <= hi for d, (lo, hi) in zip(slept, bounds)), slept
    assert len(set(slept)) == 5   # jitter: no two waits alike


def test_record_then_replay_with_server_stopped(tmp_path):
    msgs = [q(i) for i in range(6)]
    with OfflineChatServer() as srv:
        rec = online(srv, tmp_path).chat_many(msgs)
        url = srv.url
    assert not any(r.cached for r in rec)
    # the server is gone: readwrite and replay both answer from the cache, identically
    for mode in ['readwrite', 'replay']:
        c = LLMClient('openai', model='kgqa-offline', base_url=url, cache_dir=tmp_path / 'llm', cache_mode=mode, max_retries=0)
        rep = c.chat_many(msgs)
        assert [r.text for r in rep] == [r.text for r in rec]
        assert [r.key for r in rep] == [r.key for r in rec]
        assert all(r.cached for r in rep)
        s = c.usage_summary()
        assert (s['calls'], s['cache_hits'], s['api_calls'], s['prompt_tokens'], s['cost_usd']) == (6, 6, 0, 0, None)
    # a request that was never recorded: replay refuses clearly, readwrite tries the (dead) server and gives up
    c = LLMClient('openai', model='kgqa-offline', base_url=url, cache_dir=tmp_path / 'llm', cache_mode='replay')
    with pytest.raises(CacheMissError, match="not in .*kgqa-offline.jsonl; cache mode 'replay' never calls"):
        c.chat(q(50))
    c = LLMClient('openai', model='kgqa-offline', base_url=url, cache_dir=tmp_path / 'llm', max_retries=1, backoff_base=0.01)
    with pytest.raises(LLMError, match=f'cannot reach the LLM server at {url} .connection refused'):
        c.chat(q(50))
    assert c.usage_summary()['api_calls'] == 1


def test_key_excludes_base_url_and_api_key(tmp_path):
    with OfflineChatServer() as a, OfflineChatServer() as b:
        ra = online(a, tmp_path, api_key='sk-one-aaaaaaaa').chat(q(1))
        rb = online(b, tmp_path, api_key='sk-two-bbbbbbbb').chat(q(1))
    assert ra.key == rb.key and rb.cached and len(b.requests) == 0
    # but every generation parameter is part of the key
    c = LLMClient(cache=False)
    base = request_key(c.build_request(q(1)))
    for kw in [dict(temperature=0.7), dict(max_tokens=5), dict(seed=1), dict(top_p=0.5), dict(frequency_penalty=0.14)]:
        assert request_key(c.build_request(q(1), **kw)) != base, kw


def test_api_key_never_written(tmp_path, monkeypatch):
    monkeypatch.setenv('KGQA_LLM_API_KEY', SECRET)
    run = tmp_path / 'run'
    with OfflineChatServer(api_key=SECRET, faults=['429', 'ok']) as srv:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache_dir=tmp_path / 'cache', backoff_base=0.01)
        res = c.chat_many([q(i) for i in range(5)])
        write_table(pd.DataFrame(dict(answer=[r.text for r in res])), run / 'results' / 'answers.csv',
                    params=dict(api_key=SECRET, model=c.model), llm_backend=c.describe(), llm_usage=c.usage_summary())
        (run / 'client.txt').write_text(repr(c) + '\n' + c.describe() + '\n' + json.dumps(c.usage_summary()))
    assert all(x['authorized'] for x in srv.requests)   # the key was used ...
    files = [p for d in (tmp_path / 'cache', run) for p in d.rglob('*') if p.is_file()]
    assert len(files) >= 3
    for p in files:                                      # ... and is in no file
        assert SECRET not in p.read_text(), p
        assert 'SECRET123' not in p.read_text(), p


def test_refuses_to_cache_a_prompt_holding_the_key(tmp_path):
    with OfflineChatServer() as srv:
        c = online(srv, tmp_path, api_key=SECRET)
        msgs = q(1); msgs[1]['content'] += f'\n(key {SECRET})'
        with pytest.raises(LLMError, match='refusing to cache'):
            c.chat(msgs)
    f = tmp_path / 'llm' / 'kgqa-offline.jsonl'
    assert not f.exists() or SECRET not in f.read_text()


def test_reasoning_models_and_extra_parameters():
    with OfflineChatServer() as srv:
        c = LLMClient('openai', model='gpt-5-mini', base_url=srv.url, cache=False, max_tokens=300,
                      generation=dict(frequency_penalty=0.14, repetition_penalty=1.1))   # the last one is a vLLM extension
        r = c.chat(q(5))
        p = srv.requests[0]['params']
        s = c.usage_summary()
    assert r.text == 'Country5' and r.model == 'gpt-5-mini'
    assert p['max_completion_tokens'] == 300 and 'max_tokens' not in p and 'temperature' not in p
    assert (p['frequency_penalty'], p['repetition_penalty'], p['seed']) == (0.14, 1.1, 0)
    assert s['cost_usd'] == round((s['prompt_tokens'] * 0.25 + s['completion_tokens'] * 2.0) / 1e6, 6) > 0
    with OfflineChatServer() as srv:
        LLMClient('openai', model='llama-3.1-8b', base_url=srv.url, cache=False, temperature=None).chat(q(5))
        p = srv.requests[0]['params']
    assert p['max_tokens'] == 1024 and 'temperature' not in p


def test_concurrency_keeps_order_and_counts():
    msgs = [q(i) for i in range(40)]
    with OfflineChatServer(delay_s=0.05) as srv:
        c = online(srv, concurrency=8)
        res = c.chat_many(msgs, desc='test')
        assert srv.max_inflight > 1            # requests really overlapped
        assert srv.max_inflight <= 8 + c.rate_stats()['increases']  # never more than the gate allowed: 8, one more per AIMD step
    assert [r.text for r in res] == [offline_reply(m) for m in msgs]
    s = c.usage_summary()
    assert (s['calls'], s['api_calls']) == (40, 40)
    assert s['prompt_tokens'] == sum(r.usage['prompt_tokens'] for r in res)


def test_identical_concurrent_requests_call_once(tmp_path):
    with OfflineChatServer(delay_s=0.05) as srv:
        c = online(srv, tmp_path, concurrency=8)
        res = c.chat_many([q(1)] * 16 + [q(2)] * 16)
    assert len(srv.requests) == 2
    assert [r.text for r in res] == ['Country1'] * 16 + ['Country2'] * 16
    assert sum(not r.cached for r in res) == 2 and c.usage_summary()['cache_hits'] == 30


def test_chat_many_errors():
    with OfflineChatServer() as srv:
        c = online(srv)
        batch = [q(1), [dict(role='user', content='no model for me')], q(2)]
        with pytest.raises(LLMError, match='no offline model'):
            c.chat_many(batch)
        out = c.chat_many(batch, return_exceptions=True)
    assert out[0].text == 'Country1' and isinstance(out[1], LLMError) and out[2].text == 'Country2'


def test_offline_model_version_enters_key(tmp_path):
    marker = '[test-kind:upper]'
    msgs = [dict(role='system', content=marker), dict(role='user', content='abc')]
    register_offline_model('test-upper', matches=lambda ms: marker in ms[0]['content'])(lambda ms: ms[-1]['content'].upper())
    try:
        c = LLMClient(cache_dir=tmp_path)
        assert c.chat(msgs).text == 'ABC' and c.chat(msgs).cached
        register_offline_model('test-upper', matches=lambda ms: marker in ms[0]['content'], version='2')(lambda ms: ms[-1]['content'] * 2)
        r = c.chat(msgs)
        assert (r.text, r.cached) == ('abcabc', False)   # a new version is a new request, never a stale replay
    finally:
        from kgqa_nb.llm import _OFFLINE_MODELS
        _OFFLINE_MODELS.pop('test-upper', None)
    with pytest.raises(OfflineModelError, match='no offline model matches'):
        LLMClient(cache=False).chat(msgs)


def test_cache_appends_are_safe_across_processes(tmp_path):
    path = tmp_path / 'shared.jsonl'
    code = textwrap.dedent(f'''
        import sys
        from kgqa_nb.llm import ResponseCache
        c = ResponseCache({str(path)!r}); w = sys.argv[1]
        for i in range(200): c.put(dict(key=f'{{w}}-{{i}}', response=dict(text='x' * (i * 37 % 5000))))
    ''')
    procs = [subprocess.Popen([sys.executable, '-c', code, str(w)]) for w in range(4)]
    assert all(p.wait(120) == 0 for p in procs)
    lines = path.read_bytes().split(b'\n')
    assert lines[-1] == b'' and len(lines) == 801
    c = ResponseCache(path)
    assert len(c) == 800 and c.bad_lines == 0
    assert c.get('3-199')['response']['text'] == 'x' * (199 * 37 % 5000)


def test_cache_tolerates_truncated_last_line(tmp_path):
    path = tmp_path / 'm.jsonl'
    c = LLMClient(cache_dir=tmp_path, model='m')
    c.chat(q(1))
    with open(c.cache_path, 'ab') as f: f.write(b'{"key": "dead", "req')
    c2 = LLMClient(cache_dir=tmp_path, model='m', cache_mode='replay')
    assert c2.chat(q(1)).text == 'Country1'
    c3 = LLMClient(cache_dir=tmp_path, model='m')
    assert c3.chat(q(2)).text == 'Country2'
    c4 = LLMClient(cache_dir=tmp_path, model='m', cache_mode='replay')
    assert [c4.chat(m).text for m in (q(1), q(2))] == ['Country1', 'Country2'] and c4._cache.bad_lines == 1


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from(['temperature', 'top_p', 'seed', 'max_tokens', 'stop', 'presence_penalty']),
                       st.one_of(st.integers(0, 5), st.floats(0, 2, allow_nan=False), st.text(max_size=5)), max_size=4))
def test_request_key_ignores_dict_order(params):
    req = dict(model='m', messages=[dict(role='user', content='x')], **params)
    assert request_key(req) == request_key(dict(reversed(list(req.items()))))


# --- transient or not (issue 10, item 7) -------------------------------------------------------------------------------

def closed_port_url():
    "The URL of a port on 127.0.0.1 that nobody listens on (connection refused)."
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    return f'http://127.0.0.1:{port}/v1'


@pytest.mark.parametrize('fault', ['400', '401', '403', '404', '422', '501', '505'])
def test_not_transient_statuses_take_one_request(fault):
    with OfflineChatServer(faults=[fault] * 10) as srv:
        c = online(srv, max_retries=5)
        with pytest.raises(LLMError, match=f'LLM server at {srv.url} .model kgqa-offline. rejected the request with HTTP {fault} .*not retried'):
            c.chat(q(1))
        assert len(srv.requests) == 1 and c.usage_summary()['retries'] == 0


@pytest.mark.parametrize('fault', ['408', '429', '500', '502', '503', '504', 'timeout'])
def test_transient_failures_take_max_retries_plus_one(fault):
    warm = ['ok'] if fault == 'timeout' else []  # a server that never answered is not waited for again (test below)
    with OfflineChatServer(faults=warm + [fault] * 10, hang_s=1.0) as srv:
        c = online(srv, max_retries=3, timeout=0.3)
        if warm: c.chat(q(0))
        with pytest.raises(LLMError, match='gave up after 4 attempts'):
            c.chat(q(1))
        assert len(srv.requests) == 4 + len(warm) and c.usage_summary()['retries'] == 3


def test_refused_connection_fails_at_once_with_one_message():
    url = closed_port_url()
    c = LLMClient('openai', model='kgqa-offline', base_url=url, cache=False, max_retries=5, backoff_base=0.01)
    with pytest.raises(LLMError) as e:
        c.chat(q(1))
    assert str(e.value) == (f'cannot reach the LLM server at {url} (connection refused: no server is listening there): '
                            f'start it (a local GGUF model: `kgqa serve-llm`, after `make llm-local` once; the offline stand-in: '
                            f'`kgqa serve-offline --port N`) or fix base_url / $KGQA_LLM_BASE_URL; not retried')
    assert (c.usage_summary()['api_calls'], c.usage_summary()['retries']) == (1, 0)


def test_dead_server_with_32_concurrent_calls_stops_the_batch():
    url = closed_port_url()
    c = LLMClient('openai', model='kgqa-offline', base_url=url, cache=False, max_retries=5, backoff_base=0.01, concurrency=8)
    out = c.chat_many([q(i) for i in range(32)], return_exceptions=True)
    assert all(isinstance(r, LLMError) and 'connection refused' in str(r) for r in out)
    s = c.usage_summary()
    assert s['calls'] == 32 and s['retries'] == 0
    assert s['api_calls'] <= 8   # at most the calls already in flight knocked; the queued ones failed without a request
    seq = LLMClient('openai', model='kgqa-offline', base_url=url, cache=False, concurrency=1)
    assert all(isinstance(r, LLMError) for r in seq.chat_many([q(i) for i in range(32)], return_exceptions=True))
    assert seq.usage_summary()['api_calls'] == 1
    with OfflineChatServer() as srv:   # the dead mark does not outlive the batch: a new call looks again
        c.base_url = srv.url; c._oai = None
        assert c.chat(q(1)).text == 'Country1'


def test_server_wide_rejection_stops_the_batch_but_a_bad_request_does_not():
    with OfflineChatServer(api_key=SECRET) as srv:   # wrong key: every request would get 401
        c = online(srv, api_key='sk-wrong-key', concurrency=1)
        out = c.chat_many([q(i) for i in range(10)], return_exceptions=True)
        assert all('HTTP 401' in str(r) and 'check the API key' in str(r) for r in out) and len(srv.requests) == 1
    with OfflineChatServer(faults=['400']) as srv:   # one bad request: the others still go
        out = online(srv, concurrency=1).chat_many([q(i) for i in range(3)], return_exceptions=True)
        assert isinstance(out[0], LLMError) and [r.text for r in out[1:]] == ['Country1', 'Country2'] and len(srv.requests) == 3


# --- the usage ledger (issue 10, item 4) -------------------------------------------------------------------------------

LEDGER_RUN = textwrap.dedent('''
    import os, signal, sys
    from kgqa_nb.llm import LLMClient, triples_lookup_messages
    world = [(f'City{i}', 'country', f'Country{i % 7}') for i in range(60)]
    cache_dir, ledger, kill_at, when = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    c = LLMClient(cache_dir=cache_dir, ledger=ledger)
    if kill_at >= 0:
        put, n = c._cache.record, [0]
        def record(rec):                       # SIGKILL this process around the cache write of call number kill_at
            n[0] += 1
            if n[0] == kill_at and when == 'before': os.kill(os.getpid(), signal.SIGKILL)
            put(rec)
            if n[0] == kill_at and when == 'after': os.kill(os.getpid(), signal.SIGKILL)
        c._cache.record = record
    for i in range(20): c.chat(triples_lookup_messages(world, (f'City{i}', 'country', '?')))
''')


def run_ledger(tmp, kill_at=-1, when='after'):
    return subprocess.run([sys.executable, '-c', LEDGER_RUN, str(tmp / 'cache'), str(tmp / 'llm_calls.jsonl'), str(kill_at), when],
                          timeout=120).returncode


def test_ledger_survives_kill_and_resume(tmp_path):
    full, killed, torn = tmp_path / 'full', tmp_path / 'killed', tmp_path / 'torn'
    assert run_ledger(full) == 0
    ref = read_ledger(full / 'llm_calls.jsonl')
    assert ref['calls'] == 20 and ref['offline_calls'] == 20 and ref['prompt_tokens'] > 0 and ref['cost_usd'] == 0.0
    assert set(ref['by_model']) == {'kgqa-offline'} and ref['by_model']['kgqa-offline']['calls'] == 20
    # killed right after call 7 reached the cache: the resumed run replays 1-7 and counts nothing twice
    assert run_ledger(killed, kill_at=7, when='after') == -signal.SIGKILL
    assert read_ledger(killed / 'llm_calls.jsonl')['calls'] == 7
    assert run_ledger(killed) == 0
    got = read_ledger(killed / 'llm_calls.jsonl')
    assert {k: got[k] for k in ('calls', 'prompt_tokens', 'completion_tokens', 'cost_usd')} == \
           {k: ref[k] for k in ('calls', 'prompt_tokens', 'completion_tokens', 'cost_usd')}
    # killed after call 7 was answered and logged but before its reply was cached: the call is made again on resume,
    # so the ledger rightly holds it twice (two calls were made), and nothing is lost
    assert run_ledger(torn, kill_at=7, when='before') == -signal.SIGKILL
    assert read_ledger(torn / 'llm_calls.jsonl')['calls'] == 7
    assert run_ledger(torn) == 0
    lines = [json.loads(x) for x in (torn / 'llm_calls.jsonl').read_text().splitlines()]
    keys = [x['key'] for x in lines]
    assert len(lines) == 21 and len(set(keys)) == 20 and keys[6] == keys[7]
    assert read_ledger(torn / 'llm_calls.jsonl')['prompt_tokens'] == ref['prompt_tokens'] + lines[6]['prompt_tokens']


def test_ledger_records_answered_calls_only(tmp_path):
    led = tmp_path / 'calls.jsonl'
    with OfflineChatServer(faults=['500', 'ok']) as srv:
        c = LLMClient('openai', model='gpt-4.1-mini', base_url=srv.url, cache_dir=tmp_path / 'llm', ledger=led, backoff_base=0.01)
        c.chat_many([q(1), q(2), q(1)])                   # q(1) twice: one call, one cache hit
        with pytest.raises(LLMError):
            LLMClient('openai', model='gpt-4.1-mini', base_url=srv.url, cache=False, ledger=led).chat([dict(role='user', content='x')])
    lines = [json.loads(x) for x in led.read_text().splitlines()]
    assert len(lines) == 2 and {x['backend'] for x in lines} == {'openai'} and not any(x['offline'] for x in lines)
    assert set(lines[0]) == {'key', 'model', 'backend', 'offline', 'prompt_tokens', 'completion_tokens', 'cached_prompt_tokens',
                             'cost_usd', 'attempts', 'seconds', 'time'}
    assert sorted(x['attempts'] for x in lines) == [1, 2]
    s, t = c.usage_summary(), read_ledger(led)
    assert (t['calls'], t['prompt_tokens'], t['completion_tokens']) == (2, s['prompt_tokens'], s['completion_tokens'])
    assert t['cost_usd'] == pytest.approx(s['cost_usd'], abs=1e-6) and t['by_model']['gpt-4.1-mini']['calls'] == 2


# --- the offline server's port (issue 10, item 8) ----------------------------------------------------------------------

def test_server_port_errors_are_one_clear_line():
    for port in (99999, -1, 65536):
        with pytest.raises(ServerStartError, match=f'^port {port} is out of range 0-65535$'):
            OfflineChatServer(port=port)
    with OfflineChatServer() as srv:
        with pytest.raises(ServerStartError, match=f'^port {srv.port} on 127.0.0.1 is already in use'):
            OfflineChatServer(port=srv.port).start()
    assert issubclass(ServerStartError, OSError) and issubclass(ServerStartError, ValueError)


# --- text completions and streaming (what a base model behind llama.cpp needs) -----------------------------------------

def prompt(i, rel='country'):
    m = q(i, rel)
    return m[0]['content'] + '\n' + m[1]['content']


def test_completions_endpoint_and_streaming_give_the_offline_text():
    ps = [prompt(i) for i in range(6)] + [prompt(i, 'mayor') for i in range(6)]
    with OfflineChatServer() as srv:
        whole = online(srv).complete_many(ps)
        streamed = online(srv, stream=True).complete_many(ps)
        chat_streamed = online(srv, stream=True).chat_many([q(i) for i in range(6)])
    want = [offline_reply([dict(role='user', content=p)]) for p in ps]
    assert [r.text for r in whole] == [r.text for r in streamed] == want
    assert [r.usage for r in streamed] == [r.usage for r in whole] and whole[0].usage['prompt_tokens'] > 0
    assert [r.text for r in chat_streamed] == want[:6]
    assert sorted({x['path'] for x in srv.requests}) == ['/v1/chat/completions', '/v1/completions']
    assert all(x['params'].get('stream') for x in srv.requests[12:])


def test_completion_and_chat_requests_never_share_a_cache_key(tmp_path):
    with OfflineChatServer() as srv:
        c = online(srv, tmp_path)
        a, b = c.complete(prompt(1)), c.chat([dict(role='user', content=prompt(1))])
        assert a.key != b.key and a.text == b.text == 'Country1'
        assert len(srv.requests) == 2
    # the server is gone: both replay from the cache, and a cold request says how to start a server
    r = online(srv, tmp_path, cache_mode='replay')
    assert (r.complete(prompt(1)).cached, r.chat([dict(role='user', content=prompt(1))]).cached) == (True, True)
    with pytest.raises(LLMError, match='kgqa serve-llm'):
        online(srv, tmp_path).complete(prompt(2))


def test_streamed_reply_is_cached_under_the_unstreamed_key(tmp_path):
    with OfflineChatServer() as srv:
        s = online(srv, tmp_path, stream=True).complete(prompt(3))
        assert online(srv, tmp_path).complete(prompt(3)).cached and len(srv.requests) == 1
    assert s.text == 'Country3'


def test_grammar_and_unknown_parameters_reach_the_server_and_the_key():
    with OfflineChatServer() as srv:
        c = online(srv)
        a = c.complete(prompt(1), grammar='root ::= [A-Za-z0-9; ]+')
        b = c.complete(prompt(1))
        assert srv.requests[0]['params']['grammar'] == 'root ::= [A-Za-z0-9; ]+' and 'grammar' not in srv.requests[1]['params']
        assert a.key != b.key
        c.chat(q(1), response_format={'type': 'json_object'})
        assert srv.requests[2]['params']['response_format'] == {'type': 'json_object'}


def test_broken_stream_is_retried_as_garbage():
    with OfflineChatServer(faults=['garbage', 'drop', 'ok']) as srv:
        r = online(srv, stream=True, max_retries=3).complete(prompt(2))
    assert (r.text, r.attempts) == ('Country2', 3)


def test_completions_refuse_per_call_overrides_of_the_request_shape():
    c = LLMClient(cache=False)
    for k in ('model', 'stream', 'n', 'endpoint'):
        with pytest.raises(ValueError, match='cannot be overridden'): c.build_completion_request(prompt(1), **{k: 'x'})
