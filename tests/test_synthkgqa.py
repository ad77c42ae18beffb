"""End-to-end generation runs: SIGKILL mid-run then resume equals an uninterrupted run; the OpenAI-compatible path
against the local offline server equals the offline backend; folders of other runs are refused."""
import json, os, re, signal, subprocess, sys, time
from pathlib import Path

import pytest

from kgqa_nb.llm_server import OfflineChatServer
from kgqa_nb.core import UsageError
from kgqa_nb.runs import GenerationError, ManifestMismatch, RunRefused
from kgqa_nb.synthkgqa import generate_cli, read_outcomes

ROOT = Path(__file__).resolve().parents[1]
N = 120  # accepted datapoints per run: enough work (~4 s) to kill a run in the middle


def cli(*args):
    return [sys.executable, '-m', 'kgqa_nb.cli', 'generate', *map(str, args)]


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp('ref')
    assert generate_cli(['--kg', 'toyworld', '--n', str(N), '--out', str(out), '--batch-size', '16']) == 0
    return out


def cache_keys(folder) -> list:
    "Keys of the complete records in a run's LLM cache files."
    out = []
    for f in (Path(folder) / 'llm_cache').glob('*.jsonl'):
        for line in f.read_text().splitlines():
            try: out.append(json.loads(line)['key'])
            except (ValueError, KeyError): pass  # a line cut by the kill
    return out


def records(folder):
    return [json.loads(l) for l in (Path(folder) / 'records.jsonl').read_text().splitlines()]


def test_reference_run(reference):
    recs = records(reference)
    assert len(recs) == N
    assert [r['id'] for r in recs] == sorted(r['id'] for r in recs)
    assert all(r['graph_isomorphism'] and r['paraphrased_question'] and r['all_answers_wikidata'] for r in recs)
    summary = json.loads((reference / 'run_summary.json').read_text())
    assert summary['records'] == N and summary['stopped'] == 'n_target reached'
    flog = json.loads((reference / 'filter_log.json').read_text())
    assert flog['accepted'] + sum(flog['rejected'].values()) == flog['candidates'] == summary['candidates']
    assert (reference / 'dataset_card.md').exists() and (reference / 'manifest.json').exists()


@pytest.fixture(scope='module')
def reference4(tmp_path_factory):
    "An uninterrupted run with the batch size of the killed run below (batches decide which candidates are processed)."
    out = tmp_path_factory.mktemp('ref4')
    assert generate_cli(['--kg', 'toyworld', '--n', str(N), '--out', str(out), '--batch-size', '4']) == 0
    return out


def test_sigkill_then_resume_equals_uninterrupted(reference, reference4, tmp_path):
    out = tmp_path / 'killed'
    env = {**os.environ, 'KGQA_PROGRESS': '0'}
    proc = subprocess.Popen(cli('--kg', 'toyworld', '--n', N, '--out', out, '--batch-size', 4), cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    outcomes = out / 'outcomes.jsonl'
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if outcomes.exists() and outcomes.read_bytes().count(b'\n') >= 12: break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL); proc.wait()
    assert proc.returncode == -signal.SIGKILL, f'the run ended by itself before the kill: {proc.stdout.read()[-2000:]!r}'
    done_before = read_outcomes(outcomes, repair=False)
    assert 0 < sum(o['status'] == 'accepted' for o in done_before.values()) < N
    assert not (out / 'records.jsonl').exists()
    keys_before = set(cache_keys(out))
    with open(outcomes, 'ab') as f: f.write(b'{"candidate_id": 999999, "status": "acc')  # a torn last write
    res = subprocess.run(cli('--kg', 'toyworld', '--n', N, '--out', out, '--batch-size', 4), cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / 'records.jsonl').read_bytes() == (reference / 'records.jsonl').read_bytes()
    after = read_outcomes(outcomes)
    assert 999999 not in after and all(after[i] == o for i, o in done_before.items())  # finished work kept, not redone
    summary = json.loads((out / 'run_summary.json').read_text())
    assert len(summary['sessions']) == 1  # the killed session never reached its summary
    # no request reached a model twice: replies recorded by the killed run (in-flight candidates) were replayed
    keys = cache_keys(out)
    assert keys and len(keys) == len(set(keys))
    s = summary['sessions'][0]
    calls = s['generator']['calls'] + s['paraphraser']['calls']
    hits = s['generator']['cache_hits'] + s['paraphraser']['cache_hits']
    assert calls == hits + len(set(keys) - keys_before)  # every call of the resumed session was a hit or a new record
    # usage: every call a model answered, in the killed session too, is in the run's ledger once, and the summary reads it
    rows = [json.loads(l) for l in (out / 'llm_calls.jsonl').read_text().splitlines()]
    ref_rows = [json.loads(l) for l in (reference4 / 'llm_calls.jsonl').read_text().splitlines()]
    assert summary['llm_calls'] == len(rows) and summary['prompt_tokens'] == sum(r['prompt_tokens'] for r in rows)
    assert summary['completion_tokens'] == sum(r['completion_tokens'] for r in rows)
    assert len(rows) > s['generator']['calls'] - s['generator']['cache_hits'] + s['paraphraser']['calls'] - s['paraphraser']['cache_hits']
    distinct = lambda rs: {r['key']: (r['prompt_tokens'], r['completion_tokens']) for r in rs}
    assert distinct(rows) == distinct(ref_rows)  # the same calls as the uninterrupted run with the same batch size ...
    assert len(rows) - len(distinct(rows)) <= 4  # ... apart from calls in flight at the kill (answered, never cached)
    assert set(keys) <= set(distinct(rows))  # every cached reply was paid for and is accounted
    ref_summary = json.loads((reference4 / 'run_summary.json').read_text())
    # the same totals as the uninterrupted run, once the calls answered twice (in flight at the kill) are counted once
    assert (ref_summary['llm_calls'], ref_summary['prompt_tokens'], ref_summary['completion_tokens']) == (
        len(distinct(rows)), sum(t for t, _ in distinct(rows).values()), sum(t for _, t in distinct(rows).values()))
    # every line of the log is one complete candidate and each candidate appears once
    lines = outcomes.read_bytes().split(b'\n')
    assert lines[-1] == b'' and len({json.loads(l)['candidate_id'] for l in lines[:-1]}) == len(lines) - 1


def test_openai_backend_against_offline_server_gives_identical_records(reference, tmp_path):
    with OfflineChatServer() as server:
        code = generate_cli(['--kg', 'toyworld', '--n', str(N), '--out', str(tmp_path / 'api'), '--backend', 'openai',
                             '--model', 'kgqa-offline', '--base-url', server.url, '--concurrency', '4'])
        n_requests = len(server.requests)
    assert code == 0
    assert (tmp_path / 'api' / 'records.jsonl').read_bytes() == (reference / 'records.jsonl').read_bytes()
    summary = json.loads((tmp_path / 'api' / 'run_summary.json').read_text())
    assert n_requests == summary['sessions'][0]['generator']['api_calls'] + summary['sessions'][0]['paraphraser']['api_calls']
    assert summary['llm']['generator'] == 'openai:kgqa-offline@127.0.0.1'  # a local server: its host, not its port
    assert summary['prompt_tokens'] > 0


def test_folder_of_another_run_is_refused(reference):
    before = (reference / 'outcomes.jsonl').read_bytes()
    with pytest.raises(ManifestMismatch, match='config.seed'):
        generate_cli(['--kg', 'toyworld', '--n', str(N), '--out', str(reference), '--seed', '1'])
    with pytest.raises(ManifestMismatch, match='config.k_choices'):
        generate_cli(['--kg', 'toyworld', '--n', str(N), '--out', str(reference), '--k', '1,2'])
    assert (reference / 'outcomes.jsonl').read_bytes() == before


def test_extending_a_finished_run_keeps_its_prefix(reference, tmp_path):
    import shutil
    out = tmp_path / 'ext'
    shutil.copytree(reference, out)
    assert generate_cli(['--kg', 'toyworld', '--n', str(N + 20), '--out', str(out)]) == 0
    assert records(out)[:N] == records(reference) and len(records(out)) == N + 20


# --- issue 10: duplicates, the funnel, impossible parameters, early stop, usage ledger, shrinking, damaged log lines ---
import http.server
import re
import threading
import warnings

from kgqa_nb.llm_server import chat_completion


SMALL_SAMPLES = ['--max-nodes', '10', '--max-edges', '30']  # Algorithm 1 sizes of the run the issue reported


def _norm_q(q): return re.sub(r'[\s?.!]+$', '', ' '.join(q.split()).casefold())


@pytest.fixture(scope='module')
def run200(tmp_path_factory):
    "The run in which the issue found a duplicate pair (toyworld, --n 200 with the seed subgraphs of that time: 'Who performed Western City?' twice)."
    out = tmp_path_factory.mktemp('run200')
    assert generate_cli(['--kg', 'toyworld', '--n', '200', '--out', str(out), *SMALL_SAMPLES]) == 0
    return out


def test_no_duplicate_datapoints_and_named_rejection(run200):
    recs = records(run200)
    questions = [_norm_q(r['question']) for r in recs]
    queries = [(' '.join(r['sparql_query'].split()), tuple(sorted(r['all_answers_wikidata']))) for r in recs]
    assert len(set(questions)) == len(recs) and len(set(queries)) == len(recs)
    flog = json.loads((run200 / 'filter_log.json').read_text())
    assert flog['rejected'].get('duplicate', 0) >= 1 and len(flog['duplicates']) == flog['rejected']['duplicate']
    outcomes = read_outcomes(run200 / 'outcomes.jsonl')
    for d in flog['duplicates']:  # each dropped candidate really repeats the record it names, which was kept
        a, b = outcomes[d['candidate']]['record'], outcomes[d['repeats']]['record']
        assert d['repeats'] < d['candidate'] and d['repeats'] in {r['id'] for r in recs}
        assert _norm_q(a['question']) == _norm_q(b['question']) or sorted(a['all_answers_wikidata']) == sorted(b['all_answers_wikidata'])
    card = (run200 / 'dataset_card.md').read_text()
    assert '## Duplicates' in card and 'same answer set' in card


def test_funnel_adds_up_on_a_real_run(run200):
    flog = json.loads((run200 / 'filter_log.json').read_text())
    summary = json.loads((run200 / 'run_summary.json').read_text())
    n_lines = (run200 / 'outcomes.jsonl').read_text().count('\n')
    assert flog['candidates'] == flog['accepted'] + sum(flog['rejected'].values())
    assert flog['accepted'] == summary['records'] == len(records(run200)) == 200
    assert summary['candidates_processed'] == n_lines == flog['candidates'] + summary['candidates_after_last_record']
    table = (run200 / 'dataset_card.md').read_text().split('## Statistics')[1].split('##')[0]
    header = [w for w in table.strip().splitlines()[0].split() if w != '|']  # a plain or a markdown table (with tabulate)
    assert header == ['all'], header  # one split, one column (no identical 'all' and 'All')


def test_extended_run_dedups_against_records_accepted_before(run200, tmp_path):
    out = tmp_path / 'ext'
    first = json.loads((run200 / 'filter_log.json').read_text())['duplicates'][0]
    n_small = 1 + sum(1 for r in records(run200) if r['id'] <= first['repeats'])  # the original is kept, its repeat not reached
    assert generate_cli(['--kg', 'toyworld', '--n', str(n_small), '--out', str(out), '--batch-size', '8', *SMALL_SAMPLES]) == 0
    assert first['candidate'] not in {r['id'] for r in records(out)}
    assert generate_cli(['--kg', 'toyworld', '--n', '200', '--out', str(out), '--batch-size', '8', *SMALL_SAMPLES]) == 0
    assert (out / 'records.jsonl').read_bytes() == (run200 / 'records.jsonl').read_bytes()


IMPOSSIBLE = [['--max-answers', '0'], ['--timeout', '-1'], ['--timeout', 'nan'], ['--max-candidates', '0'], ['--n', '0'],
              ['--n', '-3'], ['--n', '10', '--max-candidates', '5'], ['--batch-size', '0'], ['--concurrency', '0'],
              ['--k', '0,2'], ['--k', '1,x'], ['--aggregation-fraction', '1.5'], ['--early-stop', '-1'], ['--seed', '-1'],
              ['--n', 'ten']]


@pytest.mark.parametrize('args', IMPOSSIBLE, ids=[' '.join(a) for a in IMPOSSIBLE])
def test_impossible_parameters_are_refused_up_front(args, tmp_path, capsys):
    out = tmp_path / 'never'
    with pytest.raises(UsageError) as e:  # raised, not printed: `kgqa` alone prints errors
        generate_cli(['--kg', 'toyworld', '--out', str(out), *args])
    err = str(e.value)
    assert len(err.splitlines()) == 1 and capsys.readouterr().err == '', err
    assert all(a in err for a in args if a.startswith('--')), err  # named as the user wrote it
    assert not out.exists()  # nothing was done


def test_impossible_config_in_python():
    from kgqa_nb.synthkgqa import ConfigError, GenerationConfig
    with pytest.raises(ConfigError, match='max_answers'):
        GenerationConfig(max_answers=0)
    with pytest.raises(ConfigError, match='query_timeout'):
        GenerationConfig(query_timeout=-1.0)


class _LoremServer:
    "An OpenAI-compatible server that answers every chat request with lorem ipsum (a broken deployment)."
    def __init__(self):
        owner = self
        self.requests = 0
        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1'
            def log_message(self, *a): pass
            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
                owner.requests += 1
                data = json.dumps(chat_completion(req['model'], 'Lorem ipsum dolor sit amet, consectetur adipiscing elit.', 100, 12)).encode()
                self.send_response(200); self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data))); self.end_headers(); self.wfile.write(data)
        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}/v1'
    def __enter__(self): threading.Thread(target=self.httpd.serve_forever, daemon=True).start(); return self
    def __exit__(self, *a): self.httpd.shutdown(); self.httpd.server_close()


def test_lorem_ipsum_server_stops_early_with_the_reason(tmp_path):
    out = tmp_path / 'lorem'
    with _LoremServer() as server, pytest.raises(GenerationError) as e:
        generate_cli(['--kg', 'toyworld', '--n', '20', '--out', str(out), '--backend', 'openai', '--model', 'broken',
                      '--base-url', server.url, '--early-stop', '30', '--batch-size', '10', '--concurrency', '4'])
    err = str(e.value)
    assert 'stopped early: the first 30 candidates were all rejected as parse' in err and 'missing_field:Question' in err
    assert server.requests == 30  # three batches, not the 400 calls of the whole budget
    summary = json.loads((out / 'run_summary.json').read_text())
    assert summary['records'] == 0 and summary['stopped'].startswith('early stop') and summary['llm_calls'] == 30


def test_run_that_accepts_nothing_fails(tmp_path):
    out = tmp_path / 'none'
    # early stop off: the whole (small) budget is spent and nothing is accepted
    with _LoremServer() as server, pytest.raises(GenerationError, match=re.escape('no record: all 10 candidates were rejected (parse:missing_field:Question 10)')):
        generate_cli(['--kg', 'toyworld', '--n', '2', '--max-candidates', '10', '--early-stop', '0', '--out', str(out),
                      '--backend', 'openai', '--model', 'broken', '--base-url', server.url])
    assert json.loads((out / 'run_summary.json').read_text())['stopped'] == 'max_candidates used up'


def test_smaller_n_never_shrinks_a_finished_dataset(reference, tmp_path):
    import shutil
    out = tmp_path / 'shrink'
    shutil.copytree(reference, out)
    before = (out / 'records.jsonl').read_bytes()
    with pytest.raises(RunRefused) as e:
        generate_cli(['--kg', 'toyworld', '--n', str(N // 2), '--out', str(out)])
    err = str(e.value)
    assert len(err.splitlines()) == 1 and f'already holds a dataset of {N} records' in err and f'--n {N} or more' in err
    assert (out / 'records.jsonl').read_bytes() == before


def test_damaged_middle_line_is_reported_and_its_candidate_redone(reference, tmp_path):
    import shutil
    out = tmp_path / 'damaged'
    shutil.copytree(reference, out)
    lines = (out / 'outcomes.jsonl').read_bytes().split(b'\n')
    victim = json.loads(lines[5])['candidate_id']
    lines[5] = lines[5][:40]  # a damaged line in the middle of the log
    (out / 'outcomes.jsonl').write_bytes(b'\n'.join(lines))
    with pytest.warns(UserWarning, match=r'outcomes\.jsonl:6: damaged line'):
        assert generate_cli(['--kg', 'toyworld', '--n', str(N), '--out', str(out), '--batch-size', '16']) == 0
    after = [json.loads(l) for l in (out / 'outcomes.jsonl').read_bytes().split(b'\n') if l.strip()]
    assert [o['candidate_id'] for o in after[len(lines) - 2:]] == [victim]  # the damaged line set aside; only its candidate done again
    assert (out / 'outcomes.jsonl.damaged').read_bytes() == lines[5] + b'\n'  # kept beside the log, not lost
    assert (out / 'records.jsonl').read_bytes() == (reference / 'records.jsonl').read_bytes()


def test_status_lines_when_stderr_is_not_a_terminal(tmp_path):
    env = {**os.environ, 'KGQA_PROGRESS': '0'}  # as under make: no bars, so the status lines are all a log shows
    res = subprocess.run(cli('--kg', 'toyworld', '--n', 60, '--out', tmp_path / 'st', '--batch-size', 16), cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [l for l in res.stderr.splitlines() if l.startswith('kgqa generate: ')]
    assert len(lines) >= 2 and 'candidates done' in lines[0]  # the first batch is reported at once
    summary = json.loads((tmp_path / 'st' / 'run_summary.json').read_text())
    assert lines[-1] == (f"kgqa generate: {summary['candidates_processed']} candidates done, 60 records, "
                         f"{summary['candidates'] - 60} rejected, {summary['llm_calls']} model calls")


def test_command_errors_end_as_one_kgqa_line_with_status_2(reference, tmp_path):
    "Through `kgqa`: an impossible flag and a folder of another run each end with one `kgqa generate: ...` line and exit status 2."
    bad = subprocess.run(cli('--kg', 'toyworld', '--out', tmp_path / 'never', '--concurrency', '-2'), capture_output=True, text=True, cwd=ROOT)
    other = subprocess.run(cli('--kg', 'toyworld', '--n', N, '--out', reference, '--seed', '5'), capture_output=True, text=True, cwd=ROOT)
    for res, fragment in ((bad, '--concurrency must be an integer >= 1, got -2'), (other, 'config.seed: folder has 0, this run has 5')):
        assert res.returncode == 2 and res.stderr.splitlines() == [res.stderr.strip()] and res.stderr.startswith('kgqa generate: '), res.stderr
        assert fragment in res.stderr, res.stderr
    assert not (tmp_path / 'never').exists()
