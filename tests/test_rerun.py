"""`kgqa rerun --plan` and `--max-cost`: the plan names every missing thing, makes no network call, takes its token figures
from measured records (caches and ledgers) and its defaults from the notebooks, and the budget guard refuses up front (a
plan above the limit, a limit that is not a finite number of dollars) and refuses, inside the artifact, the call that could
pass the limit, whatever model name the server answers with, with one total. Publishing from a dirty tree is refused;
records name their profile and hold no path of this machine."""
import json, os, socket
from pathlib import Path

import pytest

import kgqa_nb.plan as pl
import kgqa_nb.profiles as pr
import kgqa_nb.rerun as rr
from kgqa_nb.core import UsageError
from kgqa_nb.readers import READER_MARKER


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    "No LLM key, an empty data dir, an empty user cache, no GPU."
    for k in pr.LLM_ENV + ('KGQA_LLM_MODEL',): monkeypatch.delenv(k, raising=False)
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
    plan = pl.plan_profile('paper', roots=[], prior=[])
    manifest, params = pr.load_manifest(), pr.check_profile('paper')
    for a in plan['artifacts']:
        if a['status'] == 'not run': continue
        needs = pr.artifact_needs(manifest[a['artifact']], params[a['artifact']])
        assert [n['need'] for n in a['needs']] == needs
        for n in a['needs']:
            assert not n['met'] or n['need'].startswith('path:'), (a['artifact'], n)  # nothing is available on a bare machine
            assert n['missing'] and n['fix'], n
            if n['need'] == 'data:gtsqa': assert "n.startswith('gtsqa-')" in n['fix']
            if n['need'] == 'data:ogbl_wikikg2': assert "('ogbl-wikikg2',)" in n['fix']
        assert a['status'] == ('blocked' if needs else 'ready')
    by = {a['artifact']: a for a in plan['artifacts']}
    assert [n['need'] for n in by['retriever_study']['needs']] == ['llm', 'data:gtsqa', 'gpu', 'encoder:gte-large-en-v1.5', 'data:ogbl_wikikg2']
    # 3 reference retrievers + 3 trained ones (SubgraphRAG, SR, RoG) x 2 label regimes x 3 seeds, at 13 K values
    assert by['retriever_study']['api_calls'] == 1622 * (3 + 3 * 2 * 3) * 13 and by['retriever_study']['cost_usd'] > 0
    assert by['table4_gt_vs_sp']['llm'][0]['shared_with'] == 'retriever_study'  # the shared study is planned once
    text = pl.format_plan(plan)
    assert text.count('MISSING') == sum(not n['met'] for a in plan['artifacts'] for n in a.get('needs', []))
    assert 'total:' in text and 'blocked on this machine:' in text


def test_plan_makes_no_network_call(bare_machine, monkeypatch, capsys):
    def refuse(*a, **k):
        if a and isinstance(a[0], tuple) and a[0][0] in pr.LOOPBACK_HOSTS: raise ConnectionRefusedError('nothing listens here')  # the plan asks a local server
        raise AssertionError(f'network call during --plan: {a}')
    monkeypatch.setattr(socket.socket, 'connect', refuse)
    monkeypatch.setattr(socket, 'create_connection', refuse)
    monkeypatch.setattr(socket, 'getaddrinfo', refuse)
    out = bare_machine / 'plan.json'
    assert rr.rerun_cli(['--profile', 'paper', '--plan', '--plan-json', str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan['network_calls'] == 0 and len(plan['artifacts']) == len(pr.load_manifest())
    assert 'plan for profile paper' in capsys.readouterr().out


def test_estimates_come_from_measured_records(bare_machine):
    "Tokens per call from a small cache + ledger (base + per triple), seconds per call from the ledger, cached replies subtracted."
    llm = bare_machine / 'runs' / 'llm'; llm.mkdir(parents=True)
    recs = [reader_record(2, 320, key='a'), reader_record(6, 360, key='b'), reader_record(4, 340, key='c')]
    (llm / 'gpt-4o-mini.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in recs))
    (bare_machine / 'runs' / 'llm_calls.jsonl').write_text(''.join(
        json.dumps(dict(key=k, model='gpt-4o-mini-2024-07-18', offline=False, prompt_tokens=1, completion_tokens=1, cost_usd=0., seconds=s)) + '\n'
        for k, s in (('a', 2.0), ('b', 4.0))))
    prof = profile(bare_machine, f'table6_gt_vs_sp:\n  n_questions: 50\nfig4_sp_reader:\n  analysis_profile: {bare_machine / "p.yaml"}\n'  # Table 6's 50 questions
                                 '  reader: llm\n  reader_backend: openai\n  reader_model: gpt-4o-mini\n'
                                 'plan:\n  sp_triples: 10\n  limits: {gpt-4o-mini: {concurrency: 2}}\n')
    plan = pl.plan_profile(prof, ['fig4_sp_reader'], roots=[bare_machine / 'runs'], prior=[])
    assert plan['measured_prompts']['kgqa-reader'] == dict(prompt=300, per_triple=10.0, completion=7, calls=3)
    assert plan['seconds_per_call'] == dict(value=3.0, source='measured here (2 ledger lines)')
    [g] = plan['artifacts'][0]['llm']
    assert (g['calls'], g['cache_hits'], g['api_calls']) == (100, 3, 97)  # 50 questions read on SP, then on GT triples
    assert g['prompt_tokens'] == 97 * (300 + 10 * 10) and g['completion_tokens'] == 97 * 7
    assert g['tokens_source'].startswith('measured here')
    from kgqa_nb.llm_spend import api_cost, model_price
    assert g['cost_usd'] == round(api_cost(97 * 400, 97 * 7, model_price('gpt-4o-mini')), 4)
    assert plan['artifacts'][0]['seconds'] == pytest.approx(97 * 3.0 / 2)  # no earlier run: API time only


def test_unknown_plan_setting_refused(bare_machine):
    prof = profile(bare_machine, 'plan:\n  acceptance: 0.2\n')
    with pytest.raises(pr.ProfileError, match=r"plan.acceptance: not a planning setting \(did you mean 'acceptance_rate'\?\)"):
        pl.plan_settings(prof)


def _paid_profile(tmp):
    return profile(tmp, 'synthkgqa_dataset:\n  backend: openai\n  model: gpt-4.1\n  n_target: 100\n'
                        'kg_overview:\n  kgs: [toyworld]\n', 'paid')


def test_max_cost_refuses_up_front(bare_machine, monkeypatch):
    monkeypatch.setenv('KGQA_LLM_API_KEY', 'sk-test-never-sent')
    prof, ran = _paid_profile(bare_machine), []
    plan = pl.plan_profile(prof, ['synthkgqa_dataset'])
    assert plan['artifacts'][0]['cost_usd'] > 0.01
    with pytest.raises(pl.BudgetError, match=r'--max-cost 0.01: the plan costs \$.*synthkgqa_dataset.*refusing to start'):
        rr.rerun(prof, ['synthkgqa_dataset'], max_cost=0.01, run=lambda *a, **k: ran.append(a), log=lambda s: None)
    assert ran == []
    with pytest.raises(pl.BudgetError): rr.rerun_cli(['--profile', prof, '--only', 'synthkgqa_dataset', '--max-cost', '0.01'])
    with pytest.raises(UsageError): rr.rerun_cli(['--profile', prof, '--max-cost', '-1'])


def test_max_cost_unknown_price_refused(bare_machine, monkeypatch):
    monkeypatch.setenv('KGQA_LLM_API_KEY', 'sk-test-never-sent')
    prof = profile(bare_machine, 'synthkgqa_dataset:\n  backend: openai\n  model: some-unpriced-model\n  n_target: 10\n')
    with pytest.raises(pl.BudgetError, match='the cost of synthkgqa_dataset is unknown'):
        rr.rerun(prof, ['synthkgqa_dataset'], max_cost=100, run=lambda *a, **k: None, log=lambda s: None)


def _spending_run(srv, calls: int):
    "A stand-in for run_artifact whose notebook client (found through the environment, as in a kernel) makes `calls` gpt-4.1 calls."
    def run(art, profile, out_root=None, plan=None, meter=None):
        from kgqa_nb.llm import LLMClient, triples_lookup_messages
        c = LLMClient('openai', model='gpt-4.1', base_url=srv.url, cache=False, max_tokens=50, say=[].append)
        for i in range(calls): c.chat(triples_lookup_messages([(f'{art.name}{i}', 'r', 'b')], (f'{art.name}{i}', 'r', '?')))
        return dict(artifact=art.name, status='ok', seconds=0.1, outputs=[])
    return run


def _billed(srv):
    from kgqa_nb.llm_spend import api_cost, model_price
    return sum(api_cost(b['prompt_tokens'], b['completion_tokens'], model_price('gpt-4.1')) for b in srv.billed)


@pytest.mark.parametrize('reply_model', [None, 'openai/gpt-4.1'])
def test_max_cost_stops_mid_run_within_one_call_with_one_total(bare_machine, reply_model):
    "The call that could pass the limit is refused inside the artifact, whatever name the server answers with; one total."
    from kgqa_nb.llm_server import OfflineChatServer
    prof, lines = profile(bare_machine, 'kg_overview:\n  kgs: [toyworld]\n'), []
    with OfflineChatServer(reply_model=reply_model) as srv:
        recs = rr.rerun(prof, ['kg_overview', 'table1_dataset_overview', 'fig5_relation_frequency'], max_cost=0.01, log=lines.append,
                        run=_spending_run(srv, 1000))
    assert [r['status'] for r in recs] == ['stopped'] * 3
    billed, total = _billed(srv), recs[0]['reason']
    assert 0.01 - 0.001 < billed <= 0.01                                  # one gpt-4.1 call here costs well under $0.001
    assert total == f'LLM spend ${billed:,.4f} in {len(srv.billed):,} API calls stopped at --max-cost 0.01'
    assert {r['reason'] for r in recs} == {total} and [s for s in lines if 'STOPPED' in s] == [f'[1/3] kg_overview: STOPPED, {total}; the remaining artifacts are not run']
    assert 'KGQA_SPEND_FILE' not in os.environ                            # the guard gives the environment back


def test_max_cost_stops_between_artifacts(bare_machine):
    from kgqa_nb.llm_server import OfflineChatServer
    prof, lines = profile(bare_machine, 'kg_overview:\n  kgs: [toyworld]\n'), []
    with OfflineChatServer() as srv:
        recs = rr.rerun(prof, ['kg_overview', 'table1_dataset_overview', 'fig5_relation_frequency'], max_cost=0.01, log=lines.append,
                        run=_spending_run(srv, 50))                        # 50 calls fit; the second artifact's run out
    assert [r['status'] for r in recs] == ['ok', 'stopped', 'stopped'] and 0.01 - 0.001 < _billed(srv) <= 0.01


@pytest.mark.parametrize('bad', ['nan', 'inf', '-1', '-inf'])
def test_max_cost_that_is_not_a_finite_number_of_dollars_is_refused(bare_machine, bad):
    with pytest.raises(UsageError, match=f'--max-cost must be >= 0 USD, got {bad.lstrip("+")}'):
        rr.rerun_cli(['--profile', 'smoke', '--only', 'kg_overview', f'--max-cost={bad}'])
    with pytest.raises(pl.BudgetError, match='a finite number of dollars'):
        rr.rerun('smoke', ['kg_overview'], max_cost=float(bad), run=lambda *a, **k: None, log=lambda s: None)


def test_plan_above_the_limit_is_refused_even_where_nothing_can_run(bare_machine, capsys):
    "`--plan --max-cost` judges the whole plan: on a bare machine every paid artifact is blocked, and the plan still costs money."
    prof = _paid_profile(bare_machine)
    with pytest.raises(pl.BudgetError, match=r'--max-cost 0.01: the plan costs \$.*synthkgqa_dataset.*refusing to start'):
        rr.rerun_cli(['--profile', prof, '--only', 'synthkgqa_dataset', '--plan', '--plan-json', str(bare_machine / 'p.json'), '--max-cost', '0.01'])
    assert 'synthkgqa_dataset: blocked' in capsys.readouterr().out
    assert rr.rerun_cli(['--profile', prof, '--only', 'synthkgqa_dataset', '--plan', '--plan-json', str(bare_machine / 'p.json'), '--max-cost', '1000']) == 0


def test_a_changed_notebook_default_changes_the_plan(bare_machine):
    "The planner reads the notebook's parameters cell: no default is restated in the call arithmetic."
    art = pr.load_manifest()['retriever_study']
    nb = json.loads(art.notebook.read_text())
    [cell] = pr.parameters_cells(nb)
    src = ''.join(cell['source'])
    assert 'n_seeds: int = 3' in src
    cell['source'] = src.replace('n_seeds: int = 3', 'n_seeds: int = 5')
    changed = bare_machine / art.notebook.name; changed.write_text(json.dumps(nb))
    params = dict(reader='llm', reader_backend='openai', reader_model='gpt-4o-mini', n_questions=600)  # the profile leaves n_seeds alone
    calls = lambda a: [g.calls for g in pl.artifact_calls(a, params, pl.PLAN_DEFAULTS)]
    full = pr.full_params(art)
    ks, trained = len(full['reader_ks']), len(full['retrievers']) + bool(full['rog_generator'])  # SubgraphRAG, SR (+ RoG)
    assert trained == 3
    assert calls(art) == [99 * (3 + trained * 2 * 3) * ks]
    assert calls(pr.Artifact(art.name, changed)) == [99 * (3 + trained * 2 * 5) * ks]


def test_publishing_from_a_dirty_tree_is_refused_before_anything_runs(bare_machine, monkeypatch):
    prof, ran = profile(bare_machine, 'publish: true\npublish_dir: review\nkg_overview:\n  kgs: [toyworld]\n', 'review'), []
    monkeypatch.setattr(rr, 'git_changes', lambda: ['nbs/02_toyworld.ipynb', 'kgqa_nb/toyworld.py'])
    with pytest.raises(rr.PublishError, match=r'refusing to publish profile .*review.yaml from a tree with uncommitted changes \(nbs/02_toyworld.ipynb, kgqa_nb/toyworld.py\)'):
        rr.rerun(prof, ['kg_overview'], run=lambda *a, **k: ran.append(a), log=lambda s: None)
    with pytest.raises(rr.PublishError): rr.run_artifact(pr.load_manifest()['kg_overview'], prof)
    assert ran == [] and not (bare_machine / 'review').exists()
    rr.rerun(prof, ['kg_overview'], out_root=bare_machine / 'scratch', run=lambda *a, **k: ran.append(a) or dict(artifact='kg_overview', status='ok', seconds=0.), log=lambda s: None)
    assert len(ran) == 1  # an explicit output folder publishes nothing: any tree will do
    skipped = profile(bare_machine, 'publish: true\nnot_run:\n  kg_overview: not here\n', 'skipped')
    assert rr.rerun(skipped, ['kg_overview'], log=lambda s: None)[0]['status'] == 'skipped'  # nothing would be published
    monkeypatch.setattr(rr, 'git_changes', lambda: [])
    rr.rerun(prof, ['kg_overview'], run=lambda *a, **k: ran.append(a) or dict(artifact='kg_overview', status='ok', seconds=0.), log=lambda s: None)
    assert len(ran) == 2


def test_run_records_plan_and_spend_in_provenance(bare_machine):
    "A real (smoke-size) artifact run records its planned and measured LLM figures in the executed notebook's provenance."
    art = pr.load_manifest()['kg_overview']
    plan = dict(api_calls=0, prompt_tokens=0, completion_tokens=0, cost_usd=0., seconds=5.)
    out = bare_machine / 'out'
    rec = rr.run_artifact(art, 'smoke', overrides=dict(kgs=['toyworld']), out_root=out, plan=plan, meter=pl.SpendMeter([bare_machine / 'cache']))
    prov = json.loads((out / 'results' / 'executed' / 'kg_overview.provenance.json').read_text())
    assert prov['plan'] == plan and prov['llm_spent']['api_calls'] == 0 and rec['llm_spent'] == prov['llm_spent']
    table = json.loads((out / 'results' / 'kg_overview.provenance.json').read_text())  # written by the notebook itself
    assert prov['profile'] == table['profile'] == 'smoke'
    for f in (out / 'results').rglob('*'):
        if f.suffix in ('.json', '.ipynb'): assert str(bare_machine) not in f.read_text(), f  # no path of this machine


def test_git_changes_names_modified_tracked_files_only(tmp_path):
    "What the publish refusal reads: tracked files with uncommitted changes; untracked files and republished outputs do not make a tree dirty."
    import subprocess
    from kgqa_nb.core import git_changes, git_state
    git = lambda *a: subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t', *a], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / 'a.txt').write_text('1'); git('init', '-q'); git('add', 'a.txt'); git('commit', '-qm', 'x')
    assert git_changes(tmp_path) == [] and git_state(tmp_path)['dirty'] is False
    (tmp_path / 'new.txt').write_text('untracked')
    assert git_changes(tmp_path) == []
    (tmp_path / 'results').mkdir(); (tmp_path / 'results' / 't.csv').write_text('1'); git('add', 'results'); git('commit', '-qm', 'r')
    (tmp_path / 'results' / 't.csv').write_text('2')  # a run republished an output: not a change to the code
    assert git_changes(tmp_path) == [] and git_state(tmp_path)['dirty'] is False
    (tmp_path / 'a.txt').write_text('2')
    assert git_changes(tmp_path) == ['a.txt'] and git_state(tmp_path)['dirty'] is True
    assert git_changes(tmp_path, skip=()) == ['a.txt', 'results/t.csv']


def test_time_estimate_prefers_a_run_of_the_same_profile():
    "A newer smoke run scaled up a thousandfold says less about a companion run than the companion's own last run."
    art = pr.load_manifest()['kg_overview']
    prior = [dict(artifact='kg_overview', seconds=100., profile='companion', created='2026-01-01', params={}),
             dict(artifact='kg_overview', seconds=5., profile='smoke', created='2026-01-02', params={})]
    assert pl.estimate_seconds(art, {}, pl.PLAN_DEFAULTS, prior, 'companion')[0] == 100.
    assert pl.estimate_seconds(art, {}, pl.PLAN_DEFAULTS, prior, 'paper')[0] == 5.  # none of its own: the latest run
    assert pl.estimate_seconds(art, {}, pl.PLAN_DEFAULTS, prior)[0] == 5.


def test_a_notebook_status_line_reaches_stderr_once(tmp_path):
    """A long run's status line (the kernel's stderr) is shown once, not once more through papermill's logger (a subprocess,
    as `kgqa rerun` runs: pytest's own log capture would hide the second copy)."""
    import subprocess, sys, nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('out_dir: str = ""  # output folder', metadata={'tags': ['parameters']}),
                nbformat.v4.new_code_cell("import sys; print('kgqa generate: 3 candidates done', file=sys.stderr)")]
    p = tmp_path / 'status.ipynb'; nbformat.write(nb, p)
    code = ('import sys; from pathlib import Path; import kgqa_nb.rerun as rr; '
            'rr.execute_artifact(rr.Artifact("status", Path(sys.argv[1])), Path(sys.argv[2]), dict(out_dir=sys.argv[3]), "smoke")')
    res = subprocess.run([sys.executable, '-c', code, str(p), str(tmp_path / 'executed.ipynb'), str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stderr.count('kgqa generate: 3 candidates done') == 1, res.stderr


@pytest.mark.parametrize('listed', [True, False])
def test_llm_batch_profile_key_reaches_the_notebook(tmp_path, monkeypatch, listed):
    "A profile's `llm_batch` list sends that artifact's LLM calls through the Batch API: its kernel sees KGQA_LLM_BATCH=1, and the deadline plan.batch_hours."
    import nbformat
    monkeypatch.delenv('KGQA_LLM_BATCH', raising=False); monkeypatch.delenv('KGQA_LLM_BATCH_HOURS', raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('out_dir: str = ""  # output folder', metadata={'tags': ['parameters']}),
                nbformat.v4.new_code_cell("import os, pathlib; pathlib.Path(out_dir, 'env.txt').write_text(' '.join(os.environ.get(v, 'unset') for v in ('KGQA_LLM_BATCH', 'KGQA_LLM_BATCH_HOURS')))")]
    p = tmp_path / 'batchy.ipynb'; nbformat.write(nb, p)
    prof = profile(tmp_path, f'llm_batch: [{"batchy" if listed else "other"}]\nplan:\n  batch_hours: 1.5\n')
    rr.execute_artifact(rr.Artifact('batchy', p), tmp_path / 'executed.ipynb', dict(out_dir=str(tmp_path)), prof)
    assert (tmp_path / 'env.txt').read_text() == ('1 1.5' if listed else 'unset unset')


def _side_by_side_profile(tmp, table6='n_questions: 20'):
    "Smoke-size: the KG overview of the toy world, Table 6 on 20 generated questions, and Figure 9, which reads Table 6's."
    p = tmp / 'jobs.yaml'
    p.write_text(f'kg_overview:\n  kgs: [toyworld]\ntable6_gt_vs_sp:\n  {table6}\nfig9_shortcuts_parallel_paths:\n  analysis_profile: {p}\n')
    return str(p)


def test_jobs_runs_artifacts_side_by_side_after_what_they_read(bare_machine):
    "Issue 41, item 3: `--jobs 2` runs two notebooks at once, each in its own kernel; Figure 9 starts only after Table 6, which it reads, ended ok."
    prof, lines = _side_by_side_profile(bare_machine), []
    names = ['kg_overview', 'table6_gt_vs_sp', 'fig9_shortcuts_parallel_paths']
    assert pl.plan_profile(prof, names, roots=[], prior=[])['artifacts'][2]['after'] == ['table6_gt_vs_sp']
    recs = rr.rerun(prof, names, out_root=bare_machine / 'out', log=lines.append, jobs=2)
    assert [(r['artifact'], r['status']) for r in recs] == [(n, 'ok') for n in names], recs
    for n in names: assert (bare_machine / 'out' / 'results' / 'executed' / f'{n}.ipynb').is_file()
    at = lambda n, what: lines.index(next(l for l in lines if l.startswith(f'[{names.index(n) + 1}/3] {n}: {what}')))
    assert at('table6_gt_vs_sp', 'ok') < at('fig9_shortcuts_parallel_paths', 'running')        # after what it reads
    first_end = min(at(n, 'ok') for n in names[:2])
    assert at('kg_overview', 'running') < first_end and at('table6_gt_vs_sp', 'running') < first_end  # the two ran at once
    assert all(l.startswith('[') for l in lines)  # every line is one artifact's (or the run's), whole


def test_jobs_skips_what_reads_a_failed_artifact(bare_machine):
    "A real notebook failure (Table 6 with an unknown shortest-path convention) skips Figure 9 with the reason; --jobs 1 is unchanged."
    prof, lines = _side_by_side_profile(bare_machine, 'convention: no-such-convention'), []
    names = ['table6_gt_vs_sp', 'fig9_shortcuts_parallel_paths']
    recs = rr.rerun(prof, names, out_root=bare_machine / 'out', log=lines.append, jobs=2)
    assert [r['status'] for r in recs] == ['failed', 'skipped'], recs
    assert recs[1]['reason'] == 'needs table6_gt_vs_sp, which failed'
    assert '[2/2] fig9_shortcuts_parallel_paths: skipped, needs table6_gt_vs_sp, which failed' in lines
    rr.failed_notebook('table6_gt_vs_sp').unlink(missing_ok=True)  # the failed run's notebook, kept in the scratch folder
    with pytest.raises(UsageError, match='--jobs must be a whole number >= 1, got 0'): rr.rerun(prof, names, jobs=0)
