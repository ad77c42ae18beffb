"""`kgqa rerun --plan` and `--max-cost`: the plan names every missing thing, makes no network call, takes its token figures
from measured records (caches and ledgers), and the budget guard refuses up front and stops a run whose spend passes it."""
import json, socket, time
from pathlib import Path

import pytest

import kgqa_nb.rerun as rr
from kgqa_nb.core import UsageError
from kgqa_nb.readers import READER_MARKER


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    "No LLM key, an empty data dir, an empty user cache, no GPU."
    for k in rr.LLM_ENV + ('KGQA_LLM_MODEL',): monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv('KGQA_DATA', str(tmp_path / 'data')); (tmp_path / 'data').mkdir()
    monkeypatch.setenv('KGQA_CACHE', str(tmp_path / 'cache'))
    import torch
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    return tmp_path


def profile(tmp_path, text, name='p'):
    p = tmp_path / f'{name}.yaml'; p.write_text(text); return str(p)


def reader_record(n_triples, prompt_tokens, model='gpt-4o-mini', key=None, completion=7):
    facts = '\n'.join(f'(e{i}, r, e{i + 1})' for i in range(n_triples))
    msgs = [dict(role='system', content=READER_MARKER + ' answer from the facts'), dict(role='user', content=f'Facts:\n{facts}\n\nQuestion:\nwho?')]
    return dict(key=key or f'{model}-{n_triples}', request=dict(model=model, messages=msgs), response=dict(text='ans: x'), model=model,
                usage=dict(prompt_tokens=prompt_tokens, completion_tokens=completion, cached_prompt_tokens=0))


def test_plan_names_every_missing_thing(bare_machine):
    plan = rr.plan_profile('paper', roots=[], prior=[])
    manifest, params = rr.load_manifest(), rr.check_profile('paper')
    for a in plan['artifacts']:
        if a['status'] == 'not run': continue
        needs = rr.artifact_needs(manifest[a['artifact']], params[a['artifact']])
        assert [n['need'] for n in a['needs']] == needs
        for n in a['needs']:
            assert not n['met'] or n['need'].startswith('path:'), (a['artifact'], n)  # nothing is available on a bare machine
            assert n['missing'] and n['fix'], n
            if n['need'] == 'data:gtsqa': assert "n.startswith('gtsqa-')" in n['fix']
            if n['need'] == 'data:ogbl_wikikg2': assert "('ogbl-wikikg2',)" in n['fix']
        assert a['status'] == ('blocked' if needs else 'ready')
    by = {a['artifact']: a for a in plan['artifacts']}
    assert [n['need'] for n in by['retriever_study']['needs']] == ['llm', 'data:gtsqa', 'gpu', 'data:ogbl_wikikg2']
    assert by['retriever_study']['api_calls'] == 1622 * 9 * 13 and by['retriever_study']['cost_usd'] > 0
    assert by['table4_gt_vs_sp']['llm'][0]['shared_with'] == 'retriever_study'  # the shared study is planned once
    text = rr.format_plan(plan)
    assert text.count('MISSING') == sum(not n['met'] for a in plan['artifacts'] for n in a.get('needs', []))
    assert 'total:' in text and 'blocked on this machine:' in text


def test_plan_makes_no_network_call(bare_machine, monkeypatch, capsys):
    def refuse(*a, **k): raise AssertionError(f'network call during --plan: {a}')
    monkeypatch.setattr(socket.socket, 'connect', refuse)
    monkeypatch.setattr(socket, 'create_connection', refuse)
    monkeypatch.setattr(socket, 'getaddrinfo', refuse)
    out = bare_machine / 'plan.json'
    assert rr.rerun_cli(['--profile', 'paper', '--plan', '--plan-json', str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan['network_calls'] == 0 and len(plan['artifacts']) == len(rr.load_manifest())
    assert 'plan for profile paper' in capsys.readouterr().out


def test_estimates_come_from_measured_records(bare_machine):
    "Tokens per call from a small cache + ledger (base + per triple), seconds per call from the ledger, cached replies subtracted."
    llm = bare_machine / 'runs' / 'llm'; llm.mkdir(parents=True)
    recs = [reader_record(2, 320, key='a'), reader_record(6, 360, key='b'), reader_record(4, 340, key='c')]
    (llm / 'gpt-4o-mini.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in recs))
    (bare_machine / 'runs' / 'llm_calls.jsonl').write_text(''.join(
        json.dumps(dict(key=k, model='gpt-4o-mini-2024-07-18', offline=False, prompt_tokens=1, completion_tokens=1, cost_usd=0., seconds=s)) + '\n'
        for k, s in (('a', 2.0), ('b', 4.0))))
    prof = profile(bare_machine, 'fig4_sp_reader:\n  n_questions: 50\n  reader: llm\n  reader_backend: openai\n  reader_model: gpt-4o-mini\n'
                                 'plan:\n  sp_triples: 10\n  concurrency: 2\n')
    plan = rr.plan_profile(prof, ['fig4_sp_reader'], roots=[bare_machine / 'runs'], prior=[])
    assert plan['measured_prompts']['kgqa-reader'] == dict(prompt=300, per_triple=10.0, completion=7, calls=3)
    assert plan['seconds_per_call'] == dict(value=3.0, source='measured here (2 ledger lines)')
    [g] = plan['artifacts'][0]['llm']
    assert (g['calls'], g['cache_hits'], g['api_calls']) == (50, 3, 47)
    assert g['prompt_tokens'] == 47 * (300 + 10 * 10) and g['completion_tokens'] == 47 * 7
    assert g['tokens_source'].startswith('measured here')
    from kgqa_nb.llm import api_cost, model_price
    assert g['cost_usd'] == round(api_cost(47 * 400, 47 * 7, model_price('gpt-4o-mini')), 4)
    assert plan['artifacts'][0]['seconds'] == pytest.approx(47 * 3.0 / 2)  # no earlier run: API time only


def test_unknown_plan_setting_refused(bare_machine):
    prof = profile(bare_machine, 'plan:\n  acceptance: 0.2\n')
    with pytest.raises(rr.ProfileError, match=r"plan.acceptance: not a planning setting \(did you mean 'acceptance_rate'\?\)"):
        rr.plan_settings(prof)


def _paid_profile(tmp):
    return profile(tmp, 'synthkgqa_dataset:\n  backend: openai\n  model: gpt-4.1\n  n_target: 100\n'
                        'kg_overview:\n  kgs: [toyworld]\n', 'paid')


def test_max_cost_refuses_up_front(bare_machine, monkeypatch):
    monkeypatch.setenv('KGQA_LLM_API_KEY', 'sk-test-never-sent')
    prof, ran = _paid_profile(bare_machine), []
    plan = rr.plan_profile(prof, ['synthkgqa_dataset'])
    assert plan['artifacts'][0]['cost_usd'] > 0.01
    with pytest.raises(rr.BudgetError, match=r'--max-cost 0.01: the plan costs \$.*synthkgqa_dataset.*refusing to start'):
        rr.rerun(prof, ['synthkgqa_dataset'], max_cost=0.01, run=lambda *a, **k: ran.append(a), log=lambda s: None)
    assert ran == []
    with pytest.raises(rr.BudgetError): rr.rerun_cli(['--profile', prof, '--only', 'synthkgqa_dataset', '--max-cost', '0.01'])
    with pytest.raises(UsageError): rr.rerun_cli(['--profile', prof, '--max-cost', '-1'])


def test_max_cost_unknown_price_refused(bare_machine, monkeypatch):
    monkeypatch.setenv('KGQA_LLM_API_KEY', 'sk-test-never-sent')
    prof = profile(bare_machine, 'synthkgqa_dataset:\n  backend: openai\n  model: some-unpriced-model\n  n_target: 10\n')
    with pytest.raises(rr.BudgetError, match='the cost of synthkgqa_dataset is unknown'):
        rr.rerun(prof, ['synthkgqa_dataset'], max_cost=100, run=lambda *a, **k: None, log=lambda s: None)


def _spending_run(cache: Path, usd_tokens: int, hang: float = 0.):
    "A stand-in for run_artifact that makes one gpt-4.1 call of `usd_tokens` prompt tokens, then works for `hang` seconds."
    def run(art, profile, out_root=None, plan=None, meter=None):
        before = meter.poll()
        f = cache / 'llm' / 'gpt-4.1.jsonl'; f.parent.mkdir(parents=True, exist_ok=True)
        with f.open('a') as fh: fh.write(json.dumps(reader_record(2, usd_tokens, 'gpt-4.1', key=f'{art.name}-call')) + '\n')
        t = time.time()
        while time.time() - t < hang: time.sleep(0.02)
        return dict(artifact=art.name, status='ok', seconds=0.1, outputs=[], llm_spent=rr.spent_since(before, meter.poll()))
    return run


def test_max_cost_stops_between_artifacts(bare_machine, monkeypatch):
    prof, lines = profile(bare_machine, 'kg_overview:\n  kgs: [toyworld]\n'), []
    recs = rr.rerun(prof, ['kg_overview', 'table1_dataset_overview', 'fig5_relation_frequency'], max_cost=1.0, log=lines.append,
                    run=_spending_run(bare_machine / 'cache', 1_000_000))  # $2 at gpt-4.1's input price
    assert [r['status'] for r in recs] == ['ok', 'stopped', 'stopped']
    assert recs[0]['llm_spent']['api_calls'] == 1 and recs[0]['llm_spent']['cost_usd'] == pytest.approx(2.0, abs=1e-3)
    assert any('STOPPED, measured LLM spend $2.00 passed --max-cost 1' in s for s in lines)


def test_max_cost_stops_mid_run(bare_machine):
    "The guard interrupts an artifact that is still running once the measured spend passes the limit."
    prof, lines = profile(bare_machine, 'kg_overview:\n  kgs: [toyworld]\n'), []
    t = time.time()
    recs = rr.rerun(prof, ['kg_overview', 'table1_dataset_overview'], max_cost=1.0, log=lines.append, guard_every=0.05,
                    run=_spending_run(bare_machine / 'cache', 1_000_000, hang=30))
    assert time.time() - t < 25  # interrupted, not run to its end
    assert [r['status'] for r in recs] == ['stopped', 'stopped']
    assert 'passed --max-cost 1' in recs[0]['reason']


def test_run_records_plan_and_spend_in_provenance(bare_machine):
    "A real (smoke-size) artifact run records its planned and measured LLM figures in the executed notebook's provenance."
    art = rr.load_manifest()['kg_overview']
    plan = dict(api_calls=0, prompt_tokens=0, completion_tokens=0, cost_usd=0., seconds=5.)
    out = bare_machine / 'out'
    rec = rr.run_artifact(art, 'smoke', overrides=dict(kgs=['toyworld']), out_root=out, plan=plan, meter=rr.SpendMeter([bare_machine / 'cache']))
    prov = json.loads((out / 'results' / 'executed' / 'kg_overview.provenance.json').read_text())
    assert prov['plan'] == plan and prov['llm_spent']['api_calls'] == 0 and rec['llm_spent'] == prov['llm_spent']
