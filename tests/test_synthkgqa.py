"""End-to-end generation runs: SIGKILL mid-run then resume equals an uninterrupted run; the OpenAI-compatible path
against the local offline server equals the offline backend; folders of other runs are refused."""
import json, os, signal, subprocess, sys, time
from pathlib import Path

import pytest

from kgqa_nb.llm import OfflineChatServer
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


def test_sigkill_then_resume_equals_uninterrupted(reference, tmp_path):
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
    res = subprocess.run(cli('--kg', 'toyworld', '--n', N, '--out', out, '--batch-size', 8), cwd=ROOT, env=env,
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
    assert summary['llm']['generator'].startswith('openai:kgqa-offline@http://127.0.0.1:')
    assert summary['prompt_tokens'] > 0


def test_folder_of_another_run_is_refused(reference, capsys):
    before = (reference / 'outcomes.jsonl').read_bytes()
    assert generate_cli(['--kg', 'toyworld', '--n', str(N), '--out', str(reference), '--seed', '1']) == 2
    assert 'config.seed' in capsys.readouterr().err
    assert generate_cli(['--kg', 'toyworld', '--n', str(N), '--out', str(reference), '--k', '1,2']) == 2
    assert (reference / 'outcomes.jsonl').read_bytes() == before


def test_extending_a_finished_run_keeps_its_prefix(reference, tmp_path):
    import shutil
    out = tmp_path / 'ext'
    shutil.copytree(reference, out)
    assert generate_cli(['--kg', 'toyworld', '--n', str(N + 20), '--out', str(out)]) == 0
    assert records(out)[:N] == records(reference) and len(records(out)) == N + 20
