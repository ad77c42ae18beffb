"""The plan's prices, limits and both modes (issues 26 items 7-8, 30 item 4): a model is priced by its name wherever it
is served (a proxy does not make gpt-4.1 free, and an unknown model's cost is unknown, so --max-cost refuses it); encoders
and local servers are needs the plan checks; interactive and batch cost and time side by side from the limits table or
the profile's plan.limits; each unknown cost names the one setting that fixes it."""
import json
from pathlib import Path

import pytest

import kgqa_nb.plan as pl
from kgqa_nb.core import project_dirs
import kgqa_nb.profiles as pr
from kgqa_nb.llm_spend import BATCH_DISCOUNT
from kgqa_nb.llm_server import OfflineChatServer


@pytest.fixture
def machine(tmp_path, monkeypatch):
    "No LLM key or model in the environment, an empty user cache."
    for k in pr.LLM_ENV + ('KGQA_LLM_MODEL',): monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv('KGQA_CACHE', str(tmp_path / 'cache'))
    return tmp_path


def profile(tmp_path, text, name='p'):
    p = tmp_path / f'{name}.yaml'; p.write_text(text); return str(p)


def plan(prof, only): return pl.plan_profile(prof, only, roots=[], prior=[])


def test_a_proxy_does_not_make_a_priced_model_free(machine, monkeypatch):
    gen = profile(machine, 'synthkgqa_dataset:\n  backend: openai\n  model: gpt-4.1\n  n_target: 2000\n  kg: toyworld\n')
    direct = plan(gen, ['synthkgqa_dataset'])['artifacts'][0]
    monkeypatch.setenv('KGQA_LLM_BASE_URL', 'http://llm-proxy.example.com:8000/v1')   # the notebook's server: a proxy
    proxied = plan(gen, ['synthkgqa_dataset'])
    a = proxied['artifacts'][0]
    assert a['status'] == 'ready' and a['cost_usd'] == direct['cost_usd'] > 10   # was $0 through any host but OpenAI's
    with pytest.raises(pl.BudgetError, match=r'--max-cost 10: the plan costs \$.*synthkgqa_dataset.*refusing to start'):
        pl.check_budget(proxied, 10)


def test_an_unknown_model_on_a_local_server_has_an_unknown_cost_until_priced(machine, monkeypatch):
    with OfflineChatServer() as srv:
        monkeypatch.setenv('KGQA_LLM_BASE_URL', srv.url)
        sec = 'synthkgqa_dataset:\n  backend: openai\n  model: my-own-model\n  n_target: 50\n  kg: toyworld\n'
        p = plan(profile(machine, sec), ['synthkgqa_dataset'])
        a = p['artifacts'][0]
        assert a['status'] == 'ready' and a['cost_usd'] is None
        with pytest.raises(pl.BudgetError, match='the cost of synthkgqa_dataset is unknown'): pl.check_budget(p, 100)
        assert p['total']['unknown_cost_fixes'][0] == ('synthkgqa_dataset: set plan.prices.my-own-model: [input, output] USD per million '
                                                       'tokens ([0, 0] for a server you run yourself)')
        priced = plan(profile(machine, sec + 'plan:\n  prices: {my-own-model: [0, 0]}\n', 'priced'), ['synthkgqa_dataset'])
    assert priced['artifacts'][0]['cost_usd'] == 0 and 'one setting fixes each' not in pl.format_plan(priced)
    pl.check_budget(priced, 0.01)   # a free model passes any budget


def test_an_unset_model_names_its_parameter(machine):
    p = plan(profile(machine, 'fig4_sp_reader:\n  reader: llm\n  reader_backend: openai\n'), ['fig4_sp_reader'])
    assert p['total']['unknown_cost_fixes'] == ['fig4_sp_reader: set fig4_sp_reader.reader_model in the profile (or export KGQA_LLM_MODEL)']
    assert 'fig4_sp_reader: set fig4_sp_reader.reader_model' in pl.format_plan(p)


def test_a_local_server_and_an_encoder_are_needs(machine):
    with OfflineChatServer() as srv: url = srv.url
    sec = (f'kgrag_hops_topk:\n  backend: openai\n  model: m\n  base_url: {url}\n'
           'kgrag_retrieval:\n  encoder: no-such-org/no-such-encoder\n')
    p = plan(profile(machine, sec), ['kgrag_hops_topk', 'kgrag_retrieval'])
    hops, retr = p['artifacts']
    assert hops['status'] == 'blocked' and [n['need'] for n in hops['needs'] if not n['met']] == [f'server:{url}']
    [server] = [n for n in hops['needs'] if not n['met']]
    assert 'no LLM server answers at' in server['missing'] and 'kgqa serve-offline' in server['fix']
    [enc] = [n for n in retr['needs'] if n['need'] == 'encoder:no-such-org/no-such-encoder']
    assert retr['status'] == 'blocked' and not enc['met'] and 'is not on this machine' in enc['missing']
    with OfflineChatServer(port=int(url.rsplit(':', 1)[1].split('/')[0])):   # the server answers: the need is met
        assert plan(profile(machine, sec), ['kgrag_hops_topk'])['artifacts'][0]['status'] == 'ready'
    assert p['local_server_probes'] == 1 and p['network_calls'] == 0


def test_interactive_and_batch_side_by_side(machine):
    sec = ('fig4_sp_reader:\n  reader: llm\n  reader_backend: openai\n  reader_model: gpt-4o-mini\n'
           'plan:\n  limits: {gpt-4o-mini: {rpm: 60}}\n  batch_hours: 2\n')
    p = plan(profile(machine, sec), ['fig4_sp_reader'])
    a = p['artifacts'][0]; [g] = a['llm']
    assert g['api_calls'] == 600 and g['batch'] and g['limits_source'] == 'plan.limits.gpt-4o-mini'  # 300 questions, on SP then on GT triples
    assert a['seconds'] == pytest.approx(600.0)                 # 600 calls at one a second (no earlier run to add)
    assert a['batch_seconds'] == pytest.approx(2 * 3600 + 600)  # the batch's deadline, then its calls interactively should none come back
    assert a['batch_cost_usd'] == pytest.approx(BATCH_DISCOUNT * a['cost_usd'], abs=1e-4)
    text = pl.format_plan(p)
    assert 'interactive $' in text and '| batch $' in text and 'at the request limit, 60 calls/min' in text


def test_known_limits_make_a_hosted_model_fast_and_a_server_of_yours_takes_its_concurrency(machine):
    sec = ('fig4_sp_reader:\n  reader: llm\n  reader_backend: openai\n  reader_model: gpt-4o-mini\n'
           'kgrag_hops_topk:\n  backend: openai\n  model: mistral-7b\n  base_url: https://my-gpu-box.example.com/v1\n'
           'plan:\n  limits: {mistral-7b: {concurrency: 32, seconds_per_call: 2}}\n')
    fig4, kgrag = plan(profile(machine, sec), ['fig4_sp_reader', 'kgrag_hops_topk'])['artifacts']
    r = fig4['llm'][0]  # the token limit binds: each request holds its prompt + max_tokens (1,024) of the 4M tokens a minute
    assert r['limits_source'].startswith('OpenAI tier 3') and 'token limit' in r['rate']
    assert f"{4_000_000 / (r['prompt_tokens'] / r['api_calls'] + 1024):,.0f} calls/min" in r['rate']
    calls = sum(g['api_calls'] for g in kgrag['llm'])  # evaluate_kgrag runs one sample's questions side by side: 2 (smoke), not 32
    assert kgrag['seconds'] == pytest.approx(calls * 2 / 2, abs=0.3) and calls > 0  # each group's time is rounded to 0.1 s
    assert not any(g['batch'] for g in kgrag['llm'])            # a server of yours has no Batch API


def test_bad_limits_are_refused(machine):
    with pytest.raises(pr.ProfileError, match=r'plan.limits.gpt-4o: expected rpm, tpm, concurrency and/or seconds_per_call, numbers > 0'):
        pl.plan_settings(profile(machine, 'plan:\n  limits: {gpt-4o: {rpm: -5}}\n'))


def test_kgqagen_table2_counts_every_trained_seed_and_the_offline_rows(machine):
    "Reader calls on retrieved triples: PPR + labels x seeds retrievers; the LASM judge reads every row, offline-reader rows too."
    text = ('kgqagen_table2:\n  source: generated\n  n_target: 100\n  backend: offline\n  reader_backend: openai\n  reader_model: gpt-4o\n'
            '  judge_backend: openai\n  judge_model: gpt-4o-mini\n  retriever_profile: companion\n  retriever_labels: [sp, gt]\n'
            '  retriever_seeds: 3\n  ultrag_questions: 10\n')
    groups = {g['role']: g for g in plan(profile(machine, text), ['kgqagen_table2'])['artifacts'][0]['llm']}
    assert groups['reader (retrieved triples)']['api_calls'] == (1 + 2 * 3) * 100
    per_q = pl.PLAN_DEFAULTS['lasm_judged_per_question']
    rows = (2 + 7) * 100 + (1 + 7) * 100 * 2 + 10   # LLM-reader, offline-reader and oracle rows (generated), ULTRAG
    tail = (2 + 1) * 100 + 10  # judged after the last LLM reader's row: it, its offline and oracle rows, ULTRAG's
    assert groups['LASM judge']['beside'] and not groups['LASM judge (last rows)']['beside']  # `score_runs` judges beside the readers
    assert groups['LASM judge']['api_calls'] == -(-(rows - tail) * per_q // 1)
    assert groups['LASM judge (last rows)']['api_calls'] == -(-tail * per_q // 1)
    art = plan(profile(machine, text), ['kgqagen_table2'])['artifacts'][0]
    llm = [g for g in art['llm']]
    readers = sum(g['seconds'] for g in llm if g['role'].startswith('reader'))
    judge, last = groups['LASM judge']['seconds'], groups['LASM judge (last rows)']['seconds']
    assert art['seconds'] == pytest.approx(art['own_seconds'] + max(readers, judge) + last, abs=0.2)  # two models: the longer lane


def test_the_benchmark_time_scales_by_the_test_questions_of_its_study():
    "Issue 41, item 3: the benchmark's n_questions of 0 (all) read as no question scaled its measured time x973 (715 h in the paper plan)."
    m = pr.load_manifest()
    art, plan = m['gtsqa_benchmark'], pl.PLAN_DEFAULTS
    companion = pr.read_params(art, pr.check_profile('companion')['gtsqa_benchmark'])
    run = dict(artifact='gtsqa_benchmark', seconds=100., profile='companion', created='2026-12-01', params=pr.check_profile('companion')['gtsqa_benchmark'])
    secs, how = pl.estimate_seconds(art, pr.check_profile('paper')['gtsqa_benchmark'], plan, [run], 'paper')
    study = pr.full_params(m['retriever_study'], pr.check_profile('companion')['retriever_study'])
    read = min(pl.test_questions(study, plan), int(companion['n_questions']) or 10**9)  # the companion run's questions: its sample, else the study's test split
    ratio = 1622 * 3 / (read * int(companion['n_seeds']))  # paper: 1,622 GTSQA test questions x 3 seeds
    assert secs == pytest.approx(100 * ratio) and ratio < 20 and f'scaled x{ratio:.3g}' in how
    assert pl.scale_questions(companion, plan) == read


def test_readme_plan_sentence_comes_from_the_plan(tmp_path, monkeypatch):
    "tools/readme_plan.py writes the plan's totals into the README's marked block and --check fails when they differ."
    import importlib.util
    spec = importlib.util.spec_from_file_location('readme_plan', Path(__file__).resolve().parent.parent / 'tools' / 'readme_plan.py')
    rp = importlib.util.module_from_spec(spec); spec.loader.exec_module(rp)
    plan = dict(profile='paper', total=dict(api_calls=1234, cost_usd=5.5, seconds=7200, batch_cost_usd=3.25,
                                            side_by_side=dict(jobs=2, seconds=3600, chain=['a', 'b'])),
                artifacts=[dict(artifact='a', seconds=3600), dict(artifact='b', seconds=7), dict(artifact='c', seconds=None)])
    (tmp_path / 'plan.json').write_text(json.dumps(plan)); monkeypatch.setattr(rp, 'ROOT', tmp_path)
    (tmp_path / 'README.md').write_text(f'Before. {rp.START}old numbers{rp.END} After.\n')
    assert rp.main(['--check', '--plan', str(tmp_path / 'plan.json')]) == 1
    assert rp.main(['--plan', str(tmp_path / 'plan.json')]) == 0 and rp.main(['--check', '--plan', str(tmp_path / 'plan.json')]) == 0
    text = (tmp_path / 'README.md').read_text()
    flat = ' '.join(text.split())
    assert '1,234 LLM calls: $5.50 and about 1h00m interactive' in flat and '(`--jobs 2`' in flat and '2h00m one after another' in flat
    assert 'it ends with a -> b' in flat and 'b 7s.' in text and text.endswith(' After.\n')
    assert max(len(l) for l in text.splitlines()) <= 120   # wrapped: the README reads in short lines
    with pytest.raises(ValueError, match='exactly one'): rp.with_sentence('no block', 'x')


def test_figures_runs_as_many_artifacts_at_once_as_the_paper_plan_assumes():
    "Issue 41, item 3: the plan is the run: `make figures` passes --jobs JOBS, and JOBS is the paper profile's plan.jobs."
    import re
    make = (Path(__file__).resolve().parent.parent / 'Makefile').read_text()
    target = make.split('\nfigures:')[1].split('\n\n')[0]
    assert target.count('--jobs $(JOBS)') == 2  # the plan it prints and the run
    assert int(re.search(r'^JOBS \?= (\d+)$', make, re.M)[1]) == pl.plan_settings('paper')['jobs'] > 1


def test_bad_jobs_are_refused(machine):
    for bad in (0, 'four', True):
        with pytest.raises(pr.ProfileError, match=r'plan.jobs: expected a whole number of artifacts >= 1'):
            pl.plan_settings(profile(machine, f'plan:\n  jobs: {bad}\n'))


def test_the_paper_plan_schedules_its_artifacts_side_by_side(machine):
    "Readers of a run start after it (Table 4, Table 2 after the study; Figure 9 after Table 6); the total is the schedule's, under the sum."
    p = pl.plan_profile('paper', roots=[], prior=[])
    by, sb = {a['artifact']: a for a in p['artifacts']}, p['total']['side_by_side']
    assert by['table4_gt_vs_sp']['after'] == ['retriever_study'] and by['kgqagen_table2']['after'] == ['retriever_study']
    assert by['fig9_shortcuts_parallel_paths']['after'] == ['table6_gt_vs_sp'] and by['table1_dataset_overview']['after'] == []
    when = sb['schedule']
    for a in p['artifacts']:
        for d in a['after']: assert when[a['artifact']][0] >= when[d][1], (a['artifact'], d)
    assert sb['jobs'] == pl.plan_settings('paper')['jobs'] and sb['seconds'] < p['total']['seconds']
    assert sb['seconds'] >= max(a['seconds'] or 0 for a in p['artifacts'])
    one = pl.plan_profile('paper', roots=[], prior=[], jobs=1)['total']
    assert one['side_by_side']['seconds'] == pytest.approx(one['seconds'], abs=1.)  # one slot: the sum


def test_the_plans_fix_commands_import_what_they_name():
    "Every `python -c \"from kgqa_nb.X import A, B; ...\"` hint the plan prints names things that module has (a hint once named kg.DOWNLOADS)."
    import importlib, re
    src = (project_dirs.root / 'kgqa_nb' / 'plan.py').read_text()
    hints = re.findall(r'python -c \\?"from (kgqa_nb\.\w+) import ([\w, ]+);', src)
    assert hints, 'no python -c hint found: the pattern is out of date'
    for mod, names in hints:
        m = importlib.import_module(mod)
        assert all(hasattr(m, n.strip()) for n in names.split(',')), f'{mod} has not all of {names}'


def _fresh_clone_paper_plan():
    p = pl.plan_profile('paper', roots=[], prior=pl.prior_runs([project_dirs.results]))
    return p, p['total'], p['total']['side_by_side']

def test_the_paper_plan_as_the_profile_runs_it_waits_at_most_the_deadline_per_batch():
    "Issue 41: what a fresh clone plans for `make figures` (committed measurements and runs only) has every cost known, and the profile's batch deadline bounds what batching adds along the chain."
    p, t, sb = _fresh_clone_paper_plan()
    assert t['cost_unknown_for'] == [] and t['seconds_unknown_for'] == []
    assert t['llm_batch'] and p['settings']['batch_hours'] < 24      # batched roles, each batch waited for at most the deadline
    assert sb['run_seconds'] <= sb['seconds'] + len(sb['chain']) * p['settings']['batch_hours'] * 3600 + 1
    assert sb['run_seconds'] < sb['batch_seconds']                  # the deadline ends sooner than waiting out every batch window


@pytest.mark.xfail(strict=True, reason="the GTSQA benchmark's companion run (2026-12-07, 160 questions, 1h23m of 2-core CPU, "
                   "mostly Gemma 3 270M fine-tunes and decoding) scales to 8.7 h of the paper plan, which does not model the GPU box: "
                   "the chain retriever_study -> gtsqa_benchmark is planned at 16.2 h; the plan needs the benchmark's per-question "
                   "and fixed costs apart (and a GPU measurement) before it can say whether the paper run is a working day")
def test_the_paper_plan_as_the_profile_runs_it_is_a_working_day():
    "Issue 41's target: with the profile's batch deadline the paper run ends within 12 h (strict: once it passes again, drop the mark)."
    _, _, sb = _fresh_clone_paper_plan()
    assert sb['run_seconds'] <= 12 * 3600, f"the run as the paper profile makes it is planned at {sb['run_seconds'] / 3600:.1f} h"
