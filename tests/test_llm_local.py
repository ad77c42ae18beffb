"""The LLM client against a real llama.cpp server serving the registry GGUF (kgqa_nb.llm_local): reply shapes (never
content), usage, streaming, retries, grammars, byte-identical replay with the server stopped, and every role's parser on the
real model's replies, format failures counted by named reason.

The server tests run wherever `make llm-local` has installed the server and the model, and are skipped elsewhere with the
one line `local_llm_missing()` gives; the tests of `kgqa serve-llm`'s flags run everywhere."""
import http.server, json, threading, urllib.request
from collections import Counter

import pytest

from kgqa_nb.core import CacheMissError
from kgqa_nb.llm import LLMClient, LLMError, estimate_tokens
from kgqa_nb import llm_local
from kgqa_nb.cli import main as cli_main
from kgqa_nb.core import UsageError
from kgqa_nb.llm_local import REGISTRY_MODEL, LocalLLMServer, local_llm_missing, serve_llm_cli

MISSING = local_llm_missing()
needs_server = pytest.mark.skipif(MISSING is not None, reason=MISSING or '')

FEW_SHOT = ('Facts: (Lisbon, capital of, Portugal)\nQuestion: Lisbon is the capital of which country?\nAnswer: Portugal\n\n'
            'Facts: (Madrid, capital of, Spain)\nQuestion: Madrid is the capital of which country?\nAnswer:')
CHAT = [dict(role='user', content='Name one colour.')]


@pytest.fixture(scope='module')
def server():
    with LocalLLMServer(ctx=4096) as s:
        yield s


def small(server, **kw):
    kw.setdefault('cache', False); kw.setdefault('max_tokens', 12); kw.setdefault('backoff_base', 0.01)
    return server.client(**kw)


def check_shape(r, max_tokens):
    assert isinstance(r.text, str) and not r.cached and r.attempts == 1
    assert r.finish_reason in ('stop', 'length')
    assert set(r.usage) == {'prompt_tokens', 'completion_tokens', 'cached_prompt_tokens'}
    assert r.usage['prompt_tokens'] > 0 and 0 <= r.usage['completion_tokens'] <= max_tokens
    assert len(r.key) == 64


@needs_server
def test_server_lists_its_alias(server):
    models = json.loads(urllib.request.urlopen(server.url + '/models', timeout=10).read())
    assert REGISTRY_MODEL.name in [m['id'] for m in models['data']]


@needs_server
def test_completion_and_chat_reply_shapes_and_usage(server):
    c = small(server)
    check_shape(c.complete(FEW_SHOT, stop=['\n']), 12)
    check_shape(c.chat(CHAT), 12)
    s = c.usage_summary()
    assert (s['calls'], s['api_calls'], s['retries'], s['cost_usd']) == (2, 2, 0, 0.0)
    assert s['prompt_tokens'] > 0 and s['completion_tokens'] > 0


@needs_server
def test_system_messages_reach_the_model(server):
    "llama-cpp-python's gemma format drops system turns; the server's kgqa-gemma folds them into the first user turn."
    c = small(server, max_tokens=1)
    bare = c.chat(CHAT).usage['prompt_tokens']
    with_system = c.chat([dict(role='system', content='You answer in one word, a colour that painters use often.')] + CHAT).usage['prompt_tokens']
    assert with_system >= bare + 10


@needs_server
def test_streaming_reply_shapes_and_usage(server):
    whole = small(server).complete(FEW_SHOT, stop=['\n'])
    streamed = small(server, stream=True).complete(FEW_SHOT, stop=['\n'])
    check_shape(streamed, 12)
    # llama-cpp-python's server (0.3.36) sends no usage chunk on a stream even when asked (stream_options.include_usage),
    # so the client's documented estimate (one token per 4 characters) stands in; a server that sends it is taken as is
    assert streamed.usage['prompt_tokens'] in (whole.usage['prompt_tokens'], estimate_tokens(FEW_SHOT))
    chat = small(server, stream=True).chat(CHAT)
    check_shape(chat, 12)


@needs_server
def test_token_limit_is_reported_as_length(server):
    r = small(server, max_tokens=2).complete('Count from one to fifty: one, two, three,')
    assert r.finish_reason == 'length' and r.usage['completion_tokens'] == 2


@needs_server
def test_grammar_constrains_the_completion(server):
    r = small(server, max_tokens=4).complete(FEW_SHOT, grammar='root ::= "yes" | "no"')
    assert r.text in ('yes', 'no')
    j = small(server, max_tokens=40).chat(CHAT, response_format=dict(type='json_object', schema=dict(
        type='object', properties=dict(colour=dict(type='string', maxLength=12)), required=['colour'])))
    assert isinstance(json.loads(j.text)['colour'], str)


class _FlakyProxy:
    "Answers the first `fail` requests with HTTP 503, then forwards to the real server."
    def __init__(self, target, fail):
        outer = self; self.target, self.fail, self.seen = target, fail, 0
        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get('Content-Length') or 0)); outer.seen += 1
                if outer.seen <= outer.fail:
                    data = b'{"error": {"message": "busy", "type": "server_error"}}'; status = 503
                else:
                    rq = urllib.request.Request(outer.target + self.path.removeprefix('/v1'), body, {'Content-Type': 'application/json'})
                    with urllib.request.urlopen(rq, timeout=120) as r: data, status = r.read(), r.status
                self.send_response(status); self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data))); self.end_headers(); self.wfile.write(data)
        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}/v1'
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
    def close(self): self.httpd.shutdown(); self.httpd.server_close()


@needs_server
def test_transient_failures_in_front_of_the_real_server_are_retried(server):
    proxy = _FlakyProxy(server.url, fail=2)
    try:
        c = LLMClient('openai', model=server.alias, base_url=proxy.url, cache=False, max_tokens=6, backoff_base=0.01)
        r = c.complete(FEW_SHOT, stop=['\n'])
    finally: proxy.close()
    assert r.attempts == 3 and proxy.seen == 3 and c.usage_summary()['retries'] == 2
    assert r.usage['prompt_tokens'] > 0


@needs_server
def test_replay_is_byte_identical_with_the_server_stopped(tmp_path):
    prompts = [FEW_SHOT, FEW_SHOT.replace('Madrid', 'Paris').replace('Spain', 'France')]
    with LocalLLMServer() as srv:
        c = srv.client(cache_dir=tmp_path / 'llm', max_tokens=8, ledger=tmp_path / 'calls.jsonl')
        first = c.complete_many(prompts, stop=['\n']) + [c.chat(CHAT), c.chat(CHAT, max_tokens=9)]
        url = srv.url
    assert not any(r.cached for r in first)
    before = c.cache_path.read_bytes()
    for mode in ('replay', 'readwrite'):  # the server is gone: both modes answer from the cache alone
        again = LLMClient('openai', model=REGISTRY_MODEL.name, base_url=url, cache_dir=tmp_path / 'llm', cache_mode=mode, max_tokens=8)
        got = again.complete_many(prompts, stop=['\n']) + [again.chat(CHAT), again.chat(CHAT, max_tokens=9)]
        assert [(r.text, r.usage, r.finish_reason, r.key) for r in got] == [(r.text, r.usage, r.finish_reason, r.key) for r in first]
        assert all(r.cached for r in got) and again.usage_summary()['api_calls'] == 0
    assert c.cache_path.read_bytes() == before
    with pytest.raises(CacheMissError):
        LLMClient('openai', model=REGISTRY_MODEL.name, base_url=url, cache_dir=tmp_path / 'llm', cache_mode='replay').complete('cold')
    with pytest.raises(LLMError, match=r'`kgqa serve-llm`, after `make llm-local`'):
        LLMClient('openai', model=REGISTRY_MODEL.name, base_url=url, cache_dir=tmp_path / 'llm').complete('cold')


# --- every role's parser on the real model's replies ---------------------------------------------------------------------

def role_cases():
    "(role, messages, parse) for every LLM role; `parse(text, finish_reason)` returns None when usable, else a named reason."
    from kgqa_nb import generate, kgrag, metrics, readers, ultrag
    from kgqa_nb.dsl import parse_query
    from kgqa_nb.loaders import load_kg
    kg = load_kg('toyworld')
    T = [('Alien (Q103569)', 'director (P57)', 'Ridley Scott (Q56005)'), ('Ridley Scott (Q56005)', 'place of birth (P19)', 'South Shields (Q646)')]
    e0, e1 = kg.entity_ids[0], kg.entity_ids[1]
    top = [(e0, 0.9), (e1, 0.4)]

    def raises(parse):
        def f(text, finish):
            try: parse(text); return None
            except Exception as e: return getattr(e, 'reason', None) or type(e).__name__
        return f

    def writer(text, finish):
        try: qtext, _ = ultrag.parse_writer_reply(text)
        except Exception as e: return getattr(e, 'reason', None) or type(e).__name__
        if not qtext: return 'no_query'
        try: parse_query(qtext); return None
        except Exception as e: return getattr(e, 'reason', None) or type(e).__name__

    def issues(parse):
        def f(text, finish):
            out = parse(text) if parse is not kgrag.parse_decomposition else parse(text, finish)
            return ','.join(out[-1]) or None
        return f

    yesno = lambda text, finish: None if (text or '').strip().split() and (text or '').strip().split()[0].strip('.,!').lower() in ('yes', 'no') else 'not_yes_or_no'
    ids = lambda text, finish: None if any(e in (text or '') for e, _ in top) else 'no_candidate_id'
    cases = [
        ('datapoint writer', generate.datapoint_prompt(generate._EX_GRAPH_A, 2), raises(generate.parse_datapoint_response)),
        ('paraphraser', generate.paraphrase_prompt('Who directed The Salt Harbour?'), raises(generate.parse_paraphrase_response)),
        ('query writer (DSL)', ultrag.writer_messages('Which films did the director of Alien make?', kg), writer),
        ('decider', ultrag.decider_messages('Which films?', top, kg), lambda t, f: None if (t or '').strip().upper().startswith(('SUFFICIENT', 'INSUFFICIENT')) else 'not_a_verdict'),
        ('arbitrator', ultrag.arbitrator_messages('Which films?', 'Q1 -> P1', top, kg), ids),
        ('reader', readers.reader_messages('Where was the director of Alien born', T), lambda t, f: None if readers.parse_answers(t) else 'no_ans_line'),
        ('subgraphrag reader', readers.subgraphrag_messages('Where was the director of Alien born', T), lambda t, f: None if readers.parse_answers(t) else 'no_ans_line'),
        ('decomposer', kgrag.decomposition_messages('Who directed the films that Tom Hanks acted in?'), issues(kgrag.parse_decomposition)),
        ('sub-question answerer', kgrag.answer_messages('Who directed Alien?', ['(Alien, directed_by, Ridley Scott)']), issues(kgrag.parse_answer)),
        ('synthesiser', kgrag.synthesis_messages('Who directed Alien?', 'one step', ['Who directed Alien?'], ['Ridley Scott']), issues(kgrag.parse_final_answer)),
        ('LASM judge', metrics.lasm_messages('Who directed Alien?', 'R. Scott', ['Ridley Scott']), yesno),
    ]
    try:
        from kgqa_nb import kgqagen
        cases += [('KGQAGen expander', kgqagen.expansion_prompt(T, {'Alien (Q103569)': 12, 'Ridley Scott (Q56005)': 30}, ['Alien (Q103569)']), raises(kgqagen.parse_expansion_reply)),
                  ('KGQAGen reviser', kgqagen.revision_prompt('Who directed Alien?', 'SELECT ?x WHERE { wd:Q103569 wdt:P57 ?x }', 'no rows', ['Ridley Scott'], [list(T[0])]),
                   raises(kgqagen.parse_revision_reply))]
    except ImportError: pass
    return cases


@needs_server
def test_every_role_parser_survives_the_real_model(server, tmp_path):
    c = server.client(cache_dir=tmp_path / 'llm', max_tokens=96, concurrency=2)
    cases = role_cases()
    results = c.chat_many([m for _, m, _ in cases], return_exceptions=True)
    failures, rows = Counter(), []
    for (role, _, parse), r in zip(cases, results):
        if isinstance(r, LLMError): why = f'request failed: {str(r)[:60]}'   # e.g. a prompt longer than the context
        else: why = parse(r.text, r.finish_reason)                          # a crash here fails the test
        if why: failures[f'{role}: {why}'] += 1
        rows.append((role, why or 'ok'))
    print('\n'.join(f'{role:<24} {why}' for role, why in rows))
    assert len(rows) == len(cases) >= 11
    assert all(isinstance(r, LLMError) or isinstance(r.text, str) for r in results)
    # the few-shot reader of the floor row, through completions: its replies are classified, never raised
    from kgqa_nb.readers import FewShotReader
    fs = FewShotReader(server.client(cache=False))
    fs.answer_many(['Where was the director of Alien born?', 'Who directed Alien?'],
                   [[('Alien (Q1)', 'director (P57)', 'Ridley Scott (Q2)'), ('Ridley Scott (Q2)', 'place of birth (P19)', 'South Shields (Q3)')]] * 2)
    print('few-shot reader replies:', dict(fs.status))
    assert sum(fs.status.values()) == 2 and set(fs.status) <= {'answer', 'not available', 'empty', 'token limit', 'prompt echo'}


# --- the server never outlives its parent ----------------------------------------------------------------------------------

_PARENT = '''import sys, threading, time, urllib.request
from kgqa_nb.llm_local import LocalLLMServer
srv = LocalLLMServer(threads=1)
if sys.argv[1] == 'worker-thread':  # the thread that started the server ends: the server must stay
    t = threading.Thread(target=srv.start); t.start(); t.join(); time.sleep(1)
else: srv.start()
urllib.request.urlopen(srv.url + '/models', timeout=10).read()
print(srv.proc.pid, flush=True)
time.sleep(600)
'''


def _gone(pid) -> bool:
    "No such process, or a zombie waiting for init to reap it (it runs no code and holds no port)."
    import psutil
    try: return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess: return True


@needs_server
@pytest.mark.parametrize('started_from', ['main-thread', 'worker-thread'])
def test_server_dies_with_a_sigkilled_parent(started_from):
    import os, signal, subprocess, sys, time
    parent = subprocess.Popen([sys.executable, '-c', _PARENT, started_from], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()  # the server's pid, once it answers
        assert line.strip().isdigit(), f'the parent did not start the server (exit code {parent.poll()})'
        pid = int(line)
        assert not _gone(pid)
        os.kill(parent.pid, signal.SIGKILL); parent.wait(10)
        deadline = time.monotonic() + 10
        while not _gone(pid) and time.monotonic() < deadline: time.sleep(0.1)
        assert _gone(pid), f'the server (pid {pid}) outlived its SIGKILLed parent'
    finally:
        if parent.poll() is None: parent.kill(); parent.wait(10)
        parent.stdout.close()


# --- the KG-RAG floor row: the full system with the small base LM answering the sub-questions --------------------------------

@needs_server
def test_kgrag_with_the_few_shot_reader_on_the_real_server(server, tmp_path):
    from kgqa_nb.kg import KnowledgeGraph
    from kgqa_nb.kgrag import KGRAG, MetaQAQuestion, TripleRetriever, evaluate_kgrag, roles_label
    from kgqa_nb.readers import FewShotReader
    from kgqa_nb.text import HashingEncoder
    toy = KnowledgeGraph.from_id_triples(
        [('m1', 'directed_by', 'p1'), ('m1', 'starred_actors', 'p2'), ('m2', 'starred_actors', 'p2'), ('m2', 'directed_by', 'p3')],
        {'m1': 'Inception', 'm2': 'Warrior', 'p1': 'Christopher Nolan', 'p2': 'Tom Hardy', 'p3': 'Gavin OConnor'}, name='toy')
    q = MetaQAQuestion('2hop-test-1', 'who directed the movies starred by [Tom Hardy]', 'Tom Hardy', ('Christopher Nolan', 'Gavin OConnor'), 2)
    fs = FewShotReader(server.client(cache_dir=tmp_path / 'llm'))
    system = KGRAG(TripleRetriever(toy, HashingEncoder(), store_root=tmp_path / 'emb'), LLMClient(cache=False), n_hops=2, top_k=5, reader=fs)
    df = evaluate_kgrag(system, [q], 'kg-rag')
    assert df.llm_error.iloc[0] == '' and df.n_subquestions.iloc[0] >= 1 and df.hit_at_1.iloc[0] in (0.0, 1.0)
    assert sum(fs.status.values()) == df.n_subquestions.iloc[0]  # one completion per sub-question, each classified
    assert set(fs.status) <= {'answer', 'not available', 'empty', 'token limit', 'prompt echo'}
    label = roles_label(system.llm, REGISTRY_MODEL.describe())
    assert 'gemma-3-270m' in label and 'MB' in label and 'few-shot completions' in label


# --- kgqa serve-llm: flags are checked before anything starts, and the command prints no error itself -----------------

@pytest.mark.parametrize('flag, value, line', [
    ('--ctx', '0', '--ctx must be 16 tokens or more, got 0'),
    ('--threads', '-2', '--threads must be 1 or more, got -2'),
    ('--gpu-layers', '-5', '--gpu-layers must be -1 (all), 0 or more, got -5'),
])
def test_serve_llm_numeric_flags_are_checked_before_any_work(flag, value, line, monkeypatch, capsys):
    def no_server(*a, **k): raise AssertionError('the server was set up before the flags were checked')
    monkeypatch.setattr(llm_local, 'LocalLLMServer', no_server)
    with pytest.raises(UsageError) as e: serve_llm_cli([flag, value])
    assert str(e.value) == line and capsys.readouterr() == ('', '')
    assert cli_main(['serve-llm', flag, value]) == 2
    assert capsys.readouterr() == ('', f'kgqa serve-llm: {line}\n')


def test_serve_llm_bad_port_is_one_line_on_stderr(capsys):
    assert cli_main(['serve-llm', '--port', 'abc']) == 2
    out, err = capsys.readouterr()
    assert out == '' and err == "kgqa serve-llm: argument --port: a port is a number 0-65535, got 'abc' (see `kgqa serve-llm --help`)\n"


def test_serve_llm_server_exit_is_raised_not_printed(monkeypatch, capsys):
    "A server that dies is a `LocalLLMError` for `kgqa` to print, not a line the command prints with its own exit code."
    class Dead:
        def __init__(self, *a, **k): self.alias, self.url, self.log_path = 'm', 'http://127.0.0.1:1/v1', 'log'
        def describe(self): return 'a dead server'
        def start(self): self.proc = type('P', (), {'wait': lambda _: 3})()
        def env(self): return {}
        def _log_tail(self, n): return 'out of memory'
        def stop(self): pass
    monkeypatch.setattr(llm_local, 'LocalLLMServer', Dead)
    with pytest.raises(llm_local.LocalLLMError, match=r'the server exited with code 3 \(out of memory\)'): serve_llm_cli([])
    assert capsys.readouterr().err == ''
