"""KGQAGen runs: the revision loop with scripted replies through the local OpenAI-compatible server (fixes a fixable
query, gives up after three attempts), hostile SPARQL refused before execution, every accepted record's query returns
exactly its answer set, SIGKILL then resume equals an uninterrupted run, malformed replies get named reasons."""
import json, os, re, signal, subprocess, sys, time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from kgqa_nb import llm
from kgqa_nb.loaders import load_kg
from kgqa_nb.llm import LLMClient, register_offline_model
from kgqa_nb.llm_server import OfflineChatServer
from kgqa_nb.sparql import OxigraphStore
from kgqa_nb.core import UsageError
from kgqa_nb.runs import ManifestMismatch, read_outcomes
from kgqa_nb.kgqagen import (EXPAND_FIRST_LINE, REVISE_FIRST_LINE, KGQAGenConfig, KGQAGenError, run_answer_query, start_state, stratified_seeds,
                             verify)
from kgqa_nb.kgqagen_run import _Run, kgqagen_cli, process_batch, run_kgqagen

ROOT = Path(__file__).resolve().parents[1]
N = 60  # records of the killed run: enough candidates (~3 s) to kill it in the middle
SMOKE_N = 30  # records of the smoke-size run whose every query is checked


def cli(*args):
    return [sys.executable, '-c', 'import sys; from kgqa_nb.kgqagen_run import kgqagen_cli; sys.exit(kgqagen_cli(sys.argv[1:]))', *map(str, args)]


@pytest.fixture(scope='module')
def kg():
    return load_kg('toyworld')


@pytest.fixture(scope='module')
def store(kg):
    return OxigraphStore.from_kg(kg, isolation='thread')


@pytest.fixture
def scripted():
    "Replace the offline models of the two KGQAGen prompts by scripted replies (restored afterwards)."
    saved = dict(llm._OFFLINE_MODELS)
    script = {'expand': [], 'revise': []}
    def take(kind):
        def reply(messages):
            return script[kind].pop(0)
        return reply
    register_offline_model('kgqagen-expand', matches=lambda ms: ms[0]['content'].startswith(EXPAND_FIRST_LINE))(take('expand'))
    register_offline_model('kgqagen-revise', matches=lambda ms: ms[0]['content'].startswith(REVISE_FIRST_LINE))(take('revise'))
    yield script
    llm._OFFLINE_MODELS.clear(); llm._OFFLINE_MODELS.update(saved)


@pytest.fixture
def server():
    with OfflineChatServer() as s: yield s


def remote(server, tmp_path, name='m'):
    "A client of the local OpenAI-compatible stand-in server (the path a real model takes)."
    return LLMClient('openai', model=name, base_url=server.url, api_key='x', cache_dir=tmp_path / 'cache', max_retries=0)


def one_object_fact(kg, store):
    "(seed ID, relation ID, object ID) where the seed has several objects but one object for that relation."
    for v in stratified_seeds(kg, 50):
        s = kg.entity_ids[v]
        rows = store.select_ids(f'SELECT ?p ?o WHERE {{ wd:{s} ?p ?o . ?o ?r ?z }}')
        objs = {}
        for r in rows:
            if r['p'] in kg.relation_index and r['o'] in kg.entity_index: objs.setdefault(r['p'], set()).add(r['o'])
        single = [p for p, os_ in objs.items() if len(os_) == 1]
        if len({o for v in objs.values() for o in v}) > 1 and single:
            return s, single[0], next(iter(objs[single[0]]))
    raise AssertionError('no fixture fact in the toy world')


class Spy:
    "A store that records the queries that reach it."
    def __init__(self, store): self.store, self.seen = store, []
    def select_ids(self, q, timeout=None): self.seen.append(q); return self.store.select_ids(q, timeout)
    def select(self, q, timeout=None): self.seen.append(q); return self.store.select(q, timeout)
    def construct(self, q, timeout=None): self.seen.append(q); return self.store.construct(q, timeout)


def test_revision_fixes_a_fixable_query(kg, store, scripted, server, tmp_path):
    s, p, o = one_object_fact(kg, store)
    rev = remote(server, tmp_path)
    scripted['revise'] += [json.dumps(dict(sparql=f'SELECT ?x WHERE {{ wd:{s} ?q2 ?x }}')),  # still wrong
                           json.dumps(dict(sparql=f'SELECT ?x WHERE {{ wd:{s} wdt:{p} ?x }}'))]  # fixed
    v = verify(kg, store, 'q?', f'SELECT ?x WHERE {{ wd:{s} ?q ?x }}', [o], [], lambda m: rev.chat(m).text)
    assert (v.ok, v.reason, v.revisions) == (True, 'accepted:after_2_revisions', 2)
    assert [a['outcome'] for a in v.attempts] == ['answer_mismatch', 'answer_mismatch', 'match']
    assert run_answer_query(store, v.sparql)[0] == [o]
    assert len(server.requests) == 2 and not scripted['revise']


def test_revision_gives_up_after_three_attempts(kg, store, scripted, server, tmp_path):
    s, p, o = one_object_fact(kg, store)
    rev = remote(server, tmp_path)
    scripted['revise'] += [json.dumps(dict(sparql=f'SELECT ?x WHERE {{ wd:{s} ?q{i} ?x }}')) for i in range(5)]
    v = verify(kg, store, 'q?', f'SELECT ?x WHERE {{ wd:{s} ?q ?x }}', [o, s], [], lambda m: rev.chat(m).text)
    assert (v.ok, v.reason, v.revisions) == (False, 'revision_failed:answer_mismatch', 3)
    assert len(server.requests) == 3 and len(scripted['revise']) == 2  # a fourth revision was never asked for
    assert len(v.attempts) == 4


def test_malformed_revision_reply_is_a_named_reason(kg, store, scripted, server, tmp_path):
    s, p, o = one_object_fact(kg, store)
    rev = remote(server, tmp_path)
    scripted['revise'] += ['I would rewrite it as follows, but I am not sure.']
    v = verify(kg, store, 'q?', f'SELECT ?x WHERE {{ wd:{s} ?q ?x }}', [o], [], lambda m: rev.chat(m).text)
    assert (v.ok, v.reason) == (False, 'revision_failed:reply:not_json')


HOSTILE = ['DELETE WHERE {{ wd:{s} ?p ?o }}', 'INSERT DATA {{ wd:{s} wdt:P31 wd:Q5 }}', 'LOAD <http://example.org/x.ttl>',
           'SELECT ?o WHERE {{ SERVICE <http://example.org/sparql> {{ wd:{s} ?p ?o }} }}', 'CLEAR ALL', 'DROP DEFAULT']


@pytest.mark.parametrize('query', HOSTILE)
def test_hostile_sparql_is_refused_before_execution(kg, store, scripted, server, tmp_path, query):
    s, p, o = one_object_fact(kg, store)
    spy, n = Spy(store), len(store)
    rev = remote(server, tmp_path)
    scripted['revise'] += [json.dumps(dict(sparql=query.format(s=s)))] * 3
    v = verify(kg, spy, 'q?', query.format(s=s), [o], [], lambda m: rev.chat(m).text)
    assert (v.ok, v.reason) == (False, 'revision_failed:unsafe_query')
    assert spy.seen == [] and len(store) == n  # nothing reached the store, nothing changed


def test_hostile_generator_reply_in_a_run_is_discarded(kg, store, scripted, server, tmp_path):
    gen, rev = remote(server, tmp_path, 'gen'), remote(server, tmp_path, 'rev')
    seeds = stratified_seeds(kg, 2)
    run = _Run(kg, Spy(store), KGQAGenConfig(n_target=1, max_candidates=2), gen, rev, seeds)
    s = kg.entity_ids[seeds[0]]
    e0 = start_state(kg, 0, seeds[0], run.cfg).edges[0]  # a triple of the subgraph the model saw
    h, r, t = kg.triple_text(e0)
    answer = t if kg.head[e0] == seeds[0] else h
    scripted['expand'] += [json.dumps(dict(sufficient=True, question='Which?', answers=[answer], proof=[[h, r, t]],
                                           sparql=f'DELETE WHERE {{ wd:{s} ?p ?o }}')),
                           'no JSON here']
    scripted['revise'] += [json.dumps(dict(sparql=f'DELETE WHERE {{ wd:{s} ?p ?o }}'))] * 3
    n = len(store)
    outs, errors = process_batch(run, [0])  # one candidate at a time: scripted replies are taken in request order
    outs2, errors2 = process_batch(run, [1])
    outs, errors = outs + outs2, errors + errors2
    assert errors == [] and len(store) == n
    reasons = {o['candidate_id']: o['reason'] for o in outs}
    assert reasons[1] == 'reply:not_json'
    assert reasons[0] == 'revision_failed:unsafe_query'
    assert not any('DELETE' in q for q in run.store.seen)


@pytest.fixture(scope='module')
def smoke_run(tmp_path_factory, kg, store):
    out = tmp_path_factory.mktemp('smoke')
    summary = run_kgqagen(out, KGQAGenConfig(n_target=SMOKE_N, max_candidates=400, batch_size=8), kg=kg, store=store, verbose=False, status_every=0)
    return out, summary


def records(folder):
    return [json.loads(l) for l in (Path(folder) / 'records.jsonl').read_text().splitlines()]


def test_every_accepted_query_returns_exactly_its_answer_set(smoke_run, store):
    out, summary = smoke_run
    recs = records(out)
    assert len(recs) == SMOKE_N == summary['records']
    for r in recs:
        assert run_answer_query(store, r['sparql_query'])[0] == sorted(r['all_answers_wikidata']), r['id']
        assert r['answer_subgraph'] and r['seed_entities'] and r['rounds'] >= 1 and 0 <= r['revisions'] <= 3


def test_funnel_adds_up(smoke_run):
    "The funnel adds up, non-minimal instances are counted as discarded, and revised outcomes name their revisions."
    out, summary = smoke_run
    f = json.loads((out / 'funnel.json').read_text())
    assert f['records'] + f['duplicates'] + sum(f['discarded'].values()) == f['candidates']
    assert f['accepted_first_try'] + f['accepted_after_revisions'] == f['records']
    assert all(r['redundant'] is False for r in records(out))  # the minimality check ran on every record kept
    outs = read_outcomes(out / 'outcomes.jsonl')
    revised = [o for o in outs.values() if o['status'] == 'accepted' and o['revisions'] > 0]
    assert all(o['reason'] == f"accepted:after_{o['revisions']}_revisions" for o in revised)
    assert all(o['attempts'][0]['outcome'] == 'answer_mismatch' for o in revised)


def test_answer_node_is_the_answer_the_proof_supports(smoke_run):
    "answer_node is an entity of answer_subgraph whenever the proof shows any answer (it was the first answer by ID)."
    ent = lambda x: x.rsplit('(', 1)[-1].rstrip(')')
    for r in records(smoke_run[0]):
        in_proof = {ent(x) for t in r['answer_subgraph'] for x in (t[0], t[2])}
        if in_proof & set(r['all_answers_wikidata']): assert ent(r['answer_node']) in in_proof, r['id']


def test_records_have_varied_shapes_and_are_all_minimal(smoke_run):
    "A generated set holds at least three isomorphism types, and every record passed the minimality check."
    recs = records(smoke_run[0])
    assert len({r['graph_isomorphism'] for r in recs}) >= 3, Counter(r['graph_isomorphism'] for r in recs)
    assert all(r['redundant'] is False and r['minimal_graph_isomorphism'] == r['graph_isomorphism'] for r in recs)
    assert all(r['n_hops'] >= 2 for r in recs)  # two hops of reasoning, every question


def redundant_instance(kg, store):
    "A sufficient reply whose constraint is not needed: the seed's only object for a relation, 'and' a fact of that object."
    deg = kg.degree()
    for v in sorted(stratified_seeds(kg, 200), key=lambda v: (deg[v], v)):
        s = kg.entity_ids[v]
        objs = {}
        for r in store.select_ids(f'SELECT ?p ?o WHERE {{ wd:{s} ?p ?o }}'):
            if r['p'] in kg.relation_index and r['o'] in kg.entity_index and r['p'] not in ('P31', 'P279'): objs.setdefault(r['p'], set()).add(r['o'])
        for p, os_ in sorted(objs.items()):
            if len(os_) != 1: continue
            o = next(iter(os_))
            facts = [r for r in store.select_ids(f'SELECT ?q ?c WHERE {{ wd:{o} ?q ?c }}') if r['c'] in kg.entity_index and r['c'] != s
                     and r['q'] not in ('P31', 'P279', p)]
            if not facts: continue
            q, c = facts[0]['q'], facts[0]['c']
            it = lambda x: kg.entity_text(kg.entity_index[x]); rt = lambda x: kg.relation_text(kg.relation_index[x])
            lab = lambda x: kg.entity_labels[kg.entity_index[x]] if x in kg.entity_index else kg.relation_labels[kg.relation_index[x]]
            return s, json.dumps(dict(sufficient=True, question=f'Which entity is the {lab(p)} of {lab(s)} and has {lab(q)} {lab(c)}?', answers=[it(o)],
                                      proof=[[it(s), rt(p), it(o)], [it(o), rt(q), it(c)]],
                                      sparql=f'SELECT DISTINCT ?answer WHERE {{ wd:{s} wdt:{p} ?answer . ?answer wdt:{q} wd:{c} . }}'))
    raise AssertionError('no fixture fact in the toy world')


def test_minimal_only_false_keeps_non_minimal_records_marked(tmp_path, kg, store, scripted):
    "With minimal_only=False a question with a constraint it does not need is kept, marked redundant; by default it is discarded."
    s, reply = redundant_instance(kg, store)
    cfg = dict(n_target=1, seeds=(s,), min_hops=1, initial_neighbours=1000)  # one hop allowed: the constraint is the point here
    scripted['expand'] += [reply, reply]
    kept = run_kgqagen(tmp_path / 'kept', KGQAGenConfig(minimal_only=False, **cfg), kg=kg, store=store, verbose=False, status_every=0)
    strict = run_kgqagen(tmp_path / 'strict', KGQAGenConfig(**cfg), kg=kg, store=store, verbose=False, status_every=0)
    marked = [r for r in records(tmp_path / 'kept') if r['redundant']]
    assert marked and 'non_minimal' not in kept['funnel']['discarded'], kept['funnel']
    assert strict['funnel']['discarded'] == {'non_minimal': 1}
    assert not (tmp_path / 'strict' / 'records.jsonl').read_text().strip()


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp('ref')
    assert kgqagen_cli(['--n', str(N), '--out', str(out), '--batch-size', '4']) == 0
    return out


def test_sigkill_then_resume_equals_uninterrupted(reference, tmp_path):
    out = tmp_path / 'killed'
    env = {**os.environ, 'KGQA_PROGRESS': '0'}
    proc = subprocess.Popen(cli('--n', N, '--out', out, '--batch-size', 4), cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    outcomes = out / 'outcomes.jsonl'
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if outcomes.exists() and outcomes.read_bytes().count(b'\n') >= 12: break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL); proc.wait()
    assert proc.returncode == -signal.SIGKILL, f'the run ended by itself before the kill: {proc.stdout.read()[-2000:]!r}'
    done_before = read_outcomes(outcomes, repair=False)
    assert 0 < sum(o['status'] == 'accepted' for o in done_before.values()) < N
    assert not (out / 'records.jsonl').exists()
    with open(outcomes, 'ab') as f: f.write(b'{"candidate_id": 999999, "status": "acc')  # a torn last write
    res = subprocess.run(cli('--n', N, '--out', out, '--batch-size', 4), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / 'records.jsonl').read_bytes() == (reference / 'records.jsonl').read_bytes()
    after = read_outcomes(outcomes)
    assert 999999 not in after and all(after[i] == o for i, o in done_before.items())  # finished work kept, not redone
    lines = outcomes.read_bytes().split(b'\n')
    assert lines[-1] == b'' and len({json.loads(l)['candidate_id'] for l in lines[:-1]}) == len(lines) - 1  # none twice
    assert json.loads((out / 'funnel.json').read_text()) == json.loads((reference / 'funnel.json').read_text())


def test_openai_backend_against_offline_server_gives_identical_records(reference, tmp_path):
    with OfflineChatServer() as s:
        assert kgqagen_cli(['--n', str(N), '--out', str(tmp_path / 'o'), '--batch-size', '4', '--backend', 'openai',
                            '--model', 'kgqa-offline', '--base-url', s.url]) == 0
    assert (tmp_path / 'o' / 'records.jsonl').read_bytes() == (reference / 'records.jsonl').read_bytes()


def test_folder_of_another_run_is_refused(reference):
    with pytest.raises(ManifestMismatch, match='config.seed'):
        kgqagen_cli(['--n', str(N), '--out', str(reference), '--seed', '3'])


@pytest.mark.parametrize('args, error, message', [(['--n', '0'], UsageError, '--n must be an integer >= 1'),
                                                  (['--n', '-3'], UsageError, '--n must be an integer >= 1 and at most 1,000,000 (KGQAGen-10k holds 10,787 questions), got -3'),
                                                  (['--concurrency', '-1'], UsageError, '--concurrency must be an integer >= 1'),
                                                  (['--timeout', '-5'], UsageError, '--timeout must be a number of seconds > 0'),
                                                  (['--timeout', 'nan'], UsageError, '--timeout must be a number of seconds > 0'),
                                                  (['--max-revisions', '-1'], UsageError, '--max-revisions must be an integer >= 0'),
                                                  (['--n', 'two'], UsageError, "argument --n: invalid int value: 'two'"),
                                                  (['--seeds', 'no-such-file.txt'], FileNotFoundError, '--seeds no-such-file.txt: no such file')])
def test_bad_parameters_are_refused_up_front(args, error, message, tmp_path, capsys):
    with pytest.raises(error, match=re.escape(message)):  # raised, not printed: `kgqa` alone prints errors
        kgqagen_cli(['--out', str(tmp_path / 'x'), *args])
    assert capsys.readouterr().err == ''
    assert not (tmp_path / 'x').exists()


def test_user_seed_list(tmp_path, kg):
    seeds = tmp_path / 'seeds.txt'
    picked = [kg.entity_ids[v] for v in stratified_seeds(kg, 6, seed=7)]
    seeds.write_text('# my seeds\n' + '\n'.join(picked) + '\n')
    assert kgqagen_cli(['--out', str(tmp_path / 'u'), '--n', '2', '--seeds', str(seeds)]) == 0
    assert {r['seed'] for r in records(tmp_path / 'u')} <= {kg.entity_text(kg.entity_index[q]) for q in picked}
    seeds.write_text('Q1234567890123\n')
    with pytest.raises(KGQAGenError, match='not in KG'):
        run_kgqagen(tmp_path / 'v', KGQAGenConfig(seeds=['Q1234567890123']), kg=kg)


# ------------------------------------------------------------------ Table 2 on the published KGQAGen-10k layout

PUBLISHED = [
    {'id': 3, 'seed': 'Q13373', 'question': 'Which city was Galileo Galilei born in?', 'answer': ['Pisa'],
     'sparql': 'SELECT ?cityLabel WHERE { wd:Q307 wdt:P19 ?city . SERVICE wikibase:label { bd:serviceParam wikibase:language "en" . } }',
     'proof': [['Galileo Galilei (Q307)', 'place of birth (P19)', 'Pisa (Q13373)']]},
    {'id': 1, 'seed': 'Q3048935', 'question': "Which work follows 'The Adventures of Captain Hatteras' in the 'Voyages Extraordinaires'?",
     'answer': ['A Journey to the Center of the Earth'],
     'sparql': 'SELECT ?work WHERE { wd:Q319149 wdt:P156 ?work . ?work wdt:P179 wd:Q3048935 . }',
     'proof': [['The Adventures of Captain Hatteras (Q319149)', 'followed by (P156)', 'A Journey to the Center of the Earth (Q219457)'],
               ['A Journey to the Center of the Earth (Q219457)', 'part of the series (P179)', 'Voyages Extraordinaires (Q3048935)'],
               ['A Journey to the Center of the Earth (Q219457)', 'publication date (P577)', '1864']]},
]


def test_table2_reads_the_published_dataset(tmp_path, monkeypatch):
    "Artifact 92 with source kgqagen-10k and no KG: the LLM rows on every published question, the oracle and retriever rows left out."
    from kgqa_nb.profiles import load_manifest
    from kgqa_nb.rerun import run_artifact
    data = tmp_path / 'data'; (data / 'kgqagen').mkdir(parents=True)
    (data / 'kgqagen' / 'data.jsonl').write_text(''.join(json.dumps(o) + '\n' for o in PUBLISHED))
    monkeypatch.setenv('KGQA_DATA', str(data))
    out = tmp_path / 'out'
    run_artifact(load_manifest()['kgqagen_table2'], 'smoke', overrides=dict(source='kgqagen-10k', kg=''), out_root=out)
    table = pd.read_csv(out / 'results' / 'kgqagen_table2.csv')
    assert table.group.tolist() == ['Pure LLM', 'LLM-SP', 'LLM-SP'] and (table.n_questions == 2).all()
    assert (table.type == 'stand-in (offline non-oracle)').all() and table.model.str.contains('offline (non-oracle) reader', regex=False).sum() == 1
    assert not table.model.str.contains(r'(?<!non-)oracle').any()  # published queries use the label service: no oracle row
    assert table.accuracy_lasm.isna().all() and table.accuracy_em.notna().all()  # the offline judge's LASM is left blank
    per_q = pd.read_csv(out / 'results' / 'kgqagen_table2_per_question.csv')
    assert sorted(per_q.id.unique()) == [1, 3]
    prov = json.loads((out / 'results' / 'kgqagen_table2.provenance.json').read_text())
    assert prov['params']['source'] == 'kgqagen-10k' and 'published KGQAGen-10k' in prov['llm_backend']
