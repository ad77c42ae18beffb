"""The Batch API path (issue 30, item 2) against the stand-in server's batch endpoints: replies equal the interactive ones
and feed the same cache and ledger at the batch price; kill -9 while a batch is pending, rerun: the batch is fetched, never
submitted twice, and the records equal an uninterrupted run's. Kill -9 at every step (before the batch is created, after
it is created but before its id is written, while polling, while collecting, between a reply's ledger line and its
cache record) and expired batches: every line is billed exactly once, and counted once by the spend file and the
ledger (issue 41, item 5)."""
import http.server, json, os, subprocess, sys, textwrap, threading, time
from collections import Counter

import pytest

from kgqa_nb.llm import LLMClient, LLMError, offline_reply, triples_lookup_messages
from kgqa_nb.llm_spend import BATCH_DISCOUNT, SpendBudget, api_cost, model_price, read_ledger
from kgqa_nb.llm_server import OfflineChatServer
import kgqa_nb.llm_batch  # LLMClient.chat_batch

WORLD = [(f'City{i}', 'country', f'Country{i % 7}') for i in range(40)]
MSGS = [triples_lookup_messages(WORLD, (f'City{i}', 'country', '?')) for i in range(25)]
CLIENT = textwrap.dedent('''
    import json, sys
    from kgqa_nb.llm import LLMClient, triples_lookup_messages
    import kgqa_nb.llm_batch  # LLMClient.chat_batch
    WORLD = [(f'City{i}', 'country', f'Country{i % 7}') for i in range(40)]
    MSGS = [triples_lookup_messages(WORLD, (f'City{i}', 'country', '?')) for i in range(25)]
    url, folder = sys.argv[1], sys.argv[2]
    c = LLMClient('openai', model='gpt-4o-mini', base_url=url, cache_dir=folder + '/llm', ledger=folder + '/calls.jsonl')
    print(json.dumps([r.text for r in c.chat_batch(MSGS, poll_s=0.05)]))
''')


def records(folder):
    "The cache's records without the time they were written: what a rerun must reproduce."
    return sorted((json.dumps({k: v for k, v in json.loads(x).items() if k != 'created'}, sort_keys=True)
                   for x in (folder / 'llm' / 'gpt-4o-mini.jsonl').read_text().splitlines()))


def client(srv, folder, **kw):
    return LLMClient('openai', model='gpt-4o-mini', base_url=srv.url, cache_dir=folder / 'llm', ledger=folder / 'calls.jsonl',
                     say=[].append, **kw)


def test_batch_replies_equal_interactive_ones_at_half_the_price(tmp_path):
    with OfflineChatServer() as srv:
        inter = client(srv, tmp_path / 'interactive').chat_many(MSGS)
        batch = client(srv, tmp_path / 'batch', batch_size=10).chat_batch(MSGS, poll_s=0.01)
    assert [r.text for r in batch] == [r.text for r in inter] == [offline_reply(m) for m in MSGS]
    assert records(tmp_path / 'batch') == records(tmp_path / 'interactive')     # the same cache, whichever path filled it
    assert srv.batch_creations == 3 and len(srv.requests) == 25                  # 25 requests in files of 10; 25 interactive calls
    li, lb = read_ledger(tmp_path / 'interactive' / 'calls.jsonl'), read_ledger(tmp_path / 'batch' / 'calls.jsonl')
    assert lb['calls'] == li['calls'] == 25 and lb['prompt_tokens'] == li['prompt_tokens']
    assert lb['cost_usd'] == pytest.approx(BATCH_DISCOUNT * li['cost_usd'], abs=2e-6)  # read_ledger rounds to 1e-6
    assert {json.loads(x)['batch'] for x in (tmp_path / 'batch' / 'calls.jsonl').read_text().splitlines()} == {
        'batch_000001', 'batch_000002', 'batch_000003'}


def test_cached_requests_are_not_batched_and_failures_take_their_slot(tmp_path):
    bad = [dict(role='user', content='no offline model answers this')]
    with OfflineChatServer() as srv:
        client(srv, tmp_path).chat_many(MSGS[:20])
        out = client(srv, tmp_path).chat_batch(MSGS + [bad], poll_s=0.01, return_exceptions=True)
        with pytest.raises(LLMError, match='failed'): client(srv, tmp_path).chat_batch([bad], poll_s=0.01)
    assert [r.cached for r in out[:25]] == [True] * 20 + [False] * 5
    assert isinstance(out[25], LLMError) and 'no offline model matches' in str(out[25])
    assert json.loads(srv.files['file-000001']['data'].decode().splitlines()[0])['url'] == '/v1/chat/completions'
    assert sum(1 for _ in srv.files['file-000001']['data'].splitlines()) == 6   # the 5 misses and the bad one


def run_client(url, folder):
    return subprocess.Popen([sys.executable, '-c', CLIENT, url, str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize('lose_batch_id', [False, True])
def test_kill9_during_a_submitted_batch_then_rerun_fetches_it(tmp_path, lose_batch_id):
    "lose_batch_id: the crash came between the server creating the batch and the client writing its id into the job record."
    with OfflineChatServer() as ref:                                   # the uninterrupted run
        proc = run_client(ref.url, tmp_path / 'ref'); out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with OfflineChatServer(hold_batches=True) as srv:
        proc = run_client(srv.url, tmp_path / 'run')
        assert srv.batch_created.wait(120), proc.communicate()[1]      # the batch is submitted and pending
        proc.kill(); proc.wait()                                       # kill -9
        assert proc.returncode == -9
        if lose_batch_id:
            for f in (tmp_path / 'run' / 'llm' / 'batches').glob('*.json'):
                f.write_text(json.dumps({**json.loads(f.read_text()), 'batch_id': None}))
        srv.finish_batches()
        again = run_client(srv.url, tmp_path / 'run'); out2, err2 = again.communicate(timeout=120)
    assert again.returncode == 0, err2
    assert srv.batch_creations == 1 and len(srv.files) == 2             # one input file, one output file: never submitted twice
    assert 'resuming batch batch_000001' in err2
    assert json.loads(out2) == json.loads(out) == [offline_reply(m) for m in MSGS]
    assert records(tmp_path / 'run') == records(tmp_path / 'ref')
    assert read_ledger(tmp_path / 'run' / 'calls.jsonl')['calls'] == 25


class NoBatchAPI(http.server.BaseHTTPRequestHandler):
    "A chat server without the batch routes (llama.cpp, vLLM's server): 404 on everything."
    def log_message(self, *a): pass
    def _404(self):
        self.rfile.read(int(self.headers.get('Content-Length') or 0))
        body = b'{"error": {"message": "not found"}}'
        self.send_response(404); self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
    do_GET = do_POST = _404


def test_a_server_without_a_batch_api_gets_one_line(tmp_path):
    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), NoBatchAPI)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        c = LLMClient('openai', model='gpt-4o-mini', base_url=f'http://127.0.0.1:{httpd.server_port}/v1', cache_dir=tmp_path / 'llm')
        with pytest.raises(LLMError, match='HTTP 404: this server has no Batch API .*use chat_many'): c.chat_batch(MSGS[:2])
    finally: httpd.shutdown(); httpd.server_close()


def test_kgqa_llm_batch_sends_chat_many_through_the_batch_api(tmp_path, monkeypatch):
    monkeypatch.setenv('KGQA_LLM_BATCH', '1')   # what a run of one artifact sets: its readers and judges go as a batch
    with OfflineChatServer() as srv:
        c = client(srv, tmp_path)
        assert c.batch
        res = c.chat_many(MSGS[:6])
    assert [r.text for r in res] == [offline_reply(m) for m in MSGS[:6]]
    assert srv.batch_creations == 1 and srv.requests == []               # no interactive chat request was made
    monkeypatch.setenv('KGQA_LLM_BATCH', '0')
    with OfflineChatServer() as srv:
        client(srv, tmp_path / 'other').chat_many(MSGS[:2])
    assert srv.batch_creations == 0 and len(srv.requests) == 2


def test_batch_mode_without_the_batch_api_chapter_says_what_to_import(tmp_path):
    "The Batch API is chapter llm_batch, above the client: a process in batch mode that never imported it is told so, in one line."
    code = textwrap.dedent('''
        import sys
        from kgqa_nb.llm import LLMClient, LLMError, triples_lookup_messages
        c = LLMClient('openai', model='gpt-4o-mini', base_url='http://127.0.0.1:9/v1', cache=False, batch=True)
        try: c.chat_many([triples_lookup_messages([('A', 'r', 'B')], ('A', 'r', '?'))])
        except LLMError as e: print(e); sys.exit(3)
    ''')
    res = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 3 and res.stdout.strip() == 'batch mode (batch=True, or $KGQA_LLM_BATCH=1) needs the Batch API of chapter llm_batch: from kgqa_nb import llm_batch'


# Kill -9 at each step of a batch run (issue 41, item 5): the stand-in server bills each request it answers (`.billed`),
# and after the rerun every line is billed exactly once. The child stops itself at the step (a wrapper in this script, not
# in the library) and writes a mark; the test kills it there.
STEPPED = textwrap.dedent('''
    import json, pathlib, sys, time
    import kgqa_nb.llm as L
    import kgqa_nb.llm_batch  # LLMClient.chat_batch
    WORLD = [(f'City{i}', 'country', f'Country{i % 7}') for i in range(40)]
    MSGS = [L.triples_lookup_messages(WORLD, (f'City{i}', 'country', '?')) for i in range(30)]
    url, folder, step = sys.argv[1], sys.argv[2], sys.argv[3]
    mark = pathlib.Path(folder) / 'mark'
    c = L.LLMClient('openai', model='gpt-4o-mini', base_url=url, cache_dir=folder + '/llm', ledger=folder + '/calls.jsonl', batch_size=10)
    batches = c._openai().batches
    if step in ('before-create', 'after-create'):  # the first of three jobs: its file is uploaded; the batch is not / is created
        create = batches.create
        def stopped(**kw):
            if step == 'after-create': create(**kw)
            mark.write_text(step); time.sleep(600)
        batches.create = stopped
    if step == 'collecting':  # twelve replies recorded: the first job's ten and two of the second's
        record, n = L.LLMClient._record, [0]
        def stopped(self, *a):
            record(self, *a); n[0] += 1
            if n[0] == 12: mark.write_text(step); time.sleep(600)
        L.LLMClient._record = stopped
    if step == 'collecting-ledger':  # the twelfth reply's ledger line written, its cache record not: collected again on the rerun
        log, n = L.LLMClient._log_call, [0]
        def stopped(self, *a, **kw):
            log(self, *a, **kw); n[0] += 1
            if n[0] == 12: mark.write_text(step); time.sleep(600)
        L.LLMClient._log_call = stopped
    print(json.dumps([r.text for r in c.chat_batch(MSGS, poll_s=0.02)]))
''')


def stepped(url, folder, step):
    "The stepped client, under the spend limit in `folder / 'spend.json'` (made by the test)."
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, '-c', STEPPED, url, str(folder), step], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, 'KGQA_SPEND_FILE': str(folder / 'spend.json')})


def wait_for(cond, proc, what):
    for _ in range(1200):
        if cond(): return
        if proc.poll() is not None: raise AssertionError(f'the client ended before {what}: {proc.communicate()[1][-2000:]}')
        time.sleep(0.05)
    raise AssertionError(f'no {what} within 60 s')


@pytest.mark.parametrize('step', ['before-create', 'after-create', 'polling', 'collecting', 'collecting-ledger'])
def test_kill9_at_each_step_bills_every_line_exactly_once(tmp_path, step):
    msgs = [triples_lookup_messages(WORLD, (f'City{i}', 'country', '?')) for i in range(30)]
    budget = SpendBudget.create(tmp_path / 'spend.json', 1.0)
    with OfflineChatServer(hold_batches=step == 'polling') as srv:
        proc = stepped(srv.url, tmp_path, step)
        if step == 'polling': wait_for(lambda: srv.batch_creations == 3, proc, 'three batches')   # all submitted, none answered
        else: wait_for((tmp_path / 'mark').exists, proc, f'the {step} step')
        proc.kill(); proc.wait()
        assert proc.returncode == -9
        if step == 'after-create':  # 120 newer batches on the account: the crashed job's batch is not among the newest 100
            empty = srv._new_file('empty.jsonl', b'', 'batch')['id']
            for _ in range(120): srv._create_batch(dict(input_file_id=empty))
        srv.finish_batches()
        again = stepped(srv.url, tmp_path, 'none'); out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert json.loads(out) == [offline_reply(m) for m in msgs]
    billed = Counter(b['messages'] for b in srv.billed)
    assert len(billed) == 30 and set(billed.values()) == {1}                  # every line billed, none twice
    assert srv.batch_creations - (120 if step == 'after-create' else 0) == 3  # three jobs, each submitted once
    assert list((tmp_path / 'llm' / 'batches').iterdir()) == []                # every job closed
    cost = sum(BATCH_DISCOUNT * api_cost(b['prompt_tokens'], b['completion_tokens'], model_price('gpt-4o-mini')) for b in srv.billed)
    st, led = budget.state(), read_ledger(tmp_path / 'calls.jsonl')
    assert (st['calls'], led['calls'], st['held']) == (30, 30, {})                # every line counted once by the spend limit and the ledger
    assert st['spent'] == pytest.approx(cost, rel=1e-9) and led['cost_usd'] == pytest.approx(cost, abs=2e-6)
    lines = (tmp_path / 'calls.jsonl').read_text().splitlines()               # the twelfth reply's line twice, counted once
    assert len(lines) == 30 + (step == 'collecting-ledger')


def test_an_expired_batch_resubmits_only_its_unanswered_lines_and_is_not_resumed_forever(tmp_path):
    with OfflineChatServer(hold_batches=True) as srv:
        srv.finish_batches(answer=4)                                           # each batch answers four lines, then expires
        out = client(srv, tmp_path).chat_batch(MSGS[:10], poll_s=0.01)
    assert [r.text for r in out] == [offline_reply(m) for m in MSGS[:10]]
    assert [b['request_counts']['total'] for b in srv.batches.values()] == [10, 6, 2] and len(srv.billed) == 10
    with OfflineChatServer(hold_batches=True) as srv:
        srv.finish_batches(answer=0)                                           # a batch that expires with no reply at all
        out = client(srv, tmp_path / 'none').chat_batch(MSGS[:3], poll_s=0.01, return_exceptions=True)
    assert all(isinstance(r, LLMError) for r in out) and srv.batch_creations == 3   # tried three times, then given up
    assert list((tmp_path / 'none' / 'llm' / 'batches').iterdir()) == []       # nothing left open to resume forever
    with OfflineChatServer() as srv:
        assert [r.text for r in client(srv, tmp_path / 'none').chat_batch(MSGS[:3], poll_s=0.01)] == [offline_reply(m) for m in MSGS[:3]]
    assert srv.batch_creations == 1
