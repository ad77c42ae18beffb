"""Filters after acceptance (chapter 16a, issue 28): the answerability filter removes and logs a question its ground-truth
subgraph cannot answer (with every try's reply), the stale-fact filter rejects datapoints whose subgraph lost or changed an
edge in a newer KG (a triples file, and a SPARQL endpoint through its record/replay cache), a replacement is re-validated,
and `kgqa generate` runs both filters from flags, refusing bad ones in one line before any work."""
import json

import numpy as np
import pytest

from kgqa_nb.core import UsageError

from kgqa_nb.filters import (AnswerabilityFilter, StaleFactFilter, answerability_table, current_record, edge_ids,
                             generate_with_filters_cli, missing_edges, newer_kg_store)
from kgqa_nb.kg import parse_item
from kgqa_nb.llm import LLMClient
from kgqa_nb.readers import LLMReader, QueryReader, TextPathReader
from kgqa_nb.sparql import OxigraphStore, RemoteSparqlStore, serve_sparql
from kgqa_nb.synthkgqa import GenerationConfig, run_generation
from kgqa_nb.toyworld import make_toyworld


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    kg, out = make_toyworld(), tmp_path_factory.mktemp('toy') / 'run'
    run_generation(out, GenerationConfig(n_target=20, batch_size=20), kg=kg, verbose=False)
    return kg, [json.loads(l) for l in (out / 'records.jsonl').read_text().splitlines()]


def unanswerable(rec):
    "The record with every ground-truth edge that touches one of its answers removed."
    gold = set(rec['all_answers_wikidata']) | {parse_item(rec['answer_node'])[1]}
    return dict(rec, id=f"{rec['id']}-cut", answer_subgraph=[t for t in rec['answer_subgraph'] if not gold & {parse_item(x)[1] for x in t}])


def test_unanswerable_question_is_removed_and_logged_with_both_replies(toy):
    kg, recs = toy
    f = AnswerabilityFilter(LLMReader(LLMClient('offline', cache=False)), kg)
    kept, log = f(recs)
    answered = kept[0]  # a question the offline stand-in model answers from its subgraph, twice
    cut = unanswerable(answered)
    kept, log = f([answered, cut])
    assert [r['id'] for r in log] == [cut['id']] and kept == [answered]
    assert len(log[0]['replies']) == 2 and log[0]['correct'] == [False, False]  # two tries, both replies logged
    assert all(r.startswith('ans:') for r in log[0]['replies'])  # the raw replies, as the model wrote them
    assert '2 of 2 tries at temperature 1.0' in f.describe()


def test_offline_reader_filter_says_its_tries_are_one(toy):
    kg, recs = toy
    f = AnswerabilityFilter(TextPathReader(), kg)
    kept, log = f(recs + [unanswerable(recs[0])])
    assert f"{recs[0]['id']}-cut" in [r['id'] for r in log]
    assert all(len(r['replies']) == 1 for r in log) and 'deterministic: 2 tries are one' in f.describe()
    table = answerability_table(recs + [unanswerable(recs[0])], log)
    assert table.iloc[-1].to_dict() == dict(group='all', value='all', questions=len(recs) + 1, failed=len(log),
                                            failure_pct=round(100 * len(log) / (len(recs) + 1), 2))


def test_the_oracle_cannot_be_the_answerability_reader(toy):
    kg, recs = toy
    with pytest.raises(Exception, match='executes the gold query'): AnswerabilityFilter(QueryReader(), kg)(recs[:1])


def newer_copy(kg, drop, change, answer):
    "The KG's ID triples without the edge `drop`, and with the `answer` end of the edge `change` moved to another entity."
    E, R = np.asarray(kg.entity_ids), np.asarray(kg.relation_ids)
    base = list(zip(E[kg.head], R[kg.rel], E[kg.tail])); have = set(base)
    moved = lambda e: tuple(e if x == answer else x for x in change)
    other = next(e for e in kg.entity_ids if e != answer and moved(e) not in have)
    return [t for t in base if t not in (drop, change)] + [moved(other)]


@pytest.fixture(scope='module')
def newer(toy, tmp_path_factory):
    kg, recs = toy
    a, b = [r for r in recs if r['graph_isomorphism'] == '(1)'][:2]
    dropped, changed = edge_ids(a['answer_subgraph'])[0], edge_ids(b['answer_subgraph'])[0]
    rows = newer_copy(kg, dropped, changed, parse_item(b['answer_node'])[1])
    path = tmp_path_factory.mktemp('newer') / 'triples.tsv'
    path.write_text(''.join(f'{h}\t{r}\t{t}\n' for h, r, t in rows))
    return path, a, b, dropped, changed


def test_stale_filter_rejects_dropped_and_changed_edges_from_a_file(toy, newer):
    kg, recs = toy
    path, a, b, dropped, changed = newer
    kept, log = StaleFactFilter(newer_kg_store(path, kg), kg, source=str(path))(recs)
    gone = {r['id']: r for r in log}
    assert a['id'] in gone and b['id'] in gone and a not in kept and b not in kept
    assert list(dropped) in gone[a['id']]['missing_edges'] and list(changed) in gone[b['id']]['missing_edges']
    assert all(missing_edges(newer_kg_store(path, kg), r['answer_subgraph']) == [] for r in kept)


def test_stale_filter_through_an_endpoint_and_its_cache(toy, newer, tmp_path):
    kg, recs = toy
    path, a, b, _, _ = newer
    cache = tmp_path / 'sparql_cache.jsonl'
    with serve_sparql(newer_kg_store(path, kg)) as srv:
        remote = newer_kg_store(srv.url, kg, cache=cache)
        assert isinstance(remote, RemoteSparqlStore)
        kept, log = StaleFactFilter(remote, kg, source=srv.url)(recs)
        asked = srv.requests
    assert {a['id'], b['id']} <= {r['id'] for r in log}
    assert asked == len(recs)  # one query per datapoint
    replay = RemoteSparqlStore(srv.url, cache=cache, cache_mode='replay')  # the server is gone: every answer comes from the cache
    assert StaleFactFilter(replay, kg, source=srv.url)(recs) == (kept, log)


def test_replacement_is_revalidated(toy, newer):
    kg, recs = toy
    path, a, b, _, changed = newer
    store = newer_kg_store(path, kg)
    kept, log = StaleFactFilter(store, kg, replace=True)(recs)
    row = {r['id']: r for r in log}
    assert row[a['id']]['outcome'] == 'removed' and row[a['id']]['reason'] == 'no_current_answer'  # its only edge is gone
    assert row[b["id"]]["outcome"] == "replaced", row[b["id"]]["reason"]
    new = next(r for r in kept if r['id'] == b['id'])
    assert missing_edges(store, new['answer_subgraph']) == []
    assert parse_item(new['answer_node'])[1] in new['all_answers_wikidata'] and new['graph_isomorphism'] == '(1)'
    bad = dict(b, sparql_query=b['sparql_query'].replace('?answer', '?x', 1))  # a query whose projection is not its pattern's
    assert current_record(store, bad, kg)[0] is None


def test_generate_runs_both_filters_and_reports_the_funnel(tmp_path, newer):
    path = newer[0]
    out = tmp_path / 'gen'
    assert generate_with_filters_cli(['--out', str(out), '--n', '20', '--batch-size', '20', '--answerability', 'offline-text',
                                      '--newer-kg', str(path)]) == 0
    flog = json.loads((out / 'filter_log.json').read_text())
    assert [s['stage'] for s in flog['stages']] == ['answerable', 'current']
    summary = json.loads((out / 'run_summary.json').read_text())
    assert summary['records'] == flog['stages'][-1]['records'] == len((out / 'records.jsonl').read_text().splitlines())
    card = (out / 'dataset_card.md').read_text()
    assert '### Answerability' in card and '0.47 %' in card and '### Stale facts' in card
    manifest = json.loads((out / 'manifest.json').read_text())
    assert 'filters' in json.dumps(manifest)


@pytest.mark.parametrize('kind,label', [('llm', '2 of 2 tries at temperature 1.0'), ('few-shot', '[floor]; 2 of 2 tries')])
def test_generate_with_a_model_reader_records_its_tries(tmp_path, kind, label):
    out = tmp_path / kind  # the offline backend: the readers' stand-in models, through the run's cache and ledger
    assert generate_with_filters_cli(['--out', str(out), '--n', '10', '--batch-size', '10', '--answerability', kind]) == 0
    stage = json.loads((out / 'filter_log.json').read_text())['stages'][0]
    assert stage['stage'] == 'answerable' and label in stage['by']
    rows = [json.loads(l) for l in (out / 'filter_answerable.jsonl').read_text().splitlines()]
    assert len(rows) == stage['removed'] >= 1 and all(len(r['replies']) == 2 for r in rows)  # the stand-ins answer few questions


@pytest.mark.parametrize('argv,message', [
    (['--answerability', 'offline-text', '--answer-tries', '0'], '--answer-tries must be an integer >= 1, got 0'),
    (['--answerability', 'offline-text', '--answer-tries', '-2'], '--answer-tries must be an integer >= 1, got -2'),
    (['--replace-stale'], '--replace-stale needs --newer-kg'),
    (['--reader-model', 'm'], '--reader-model needs --answerability llm or few-shot'),
    (['--n', '0'], '--n must be an integer >= 1 and at most 1,000,000 (GTSQA holds 32,099 questions), got 0'),
    (['--max-candidates', '-5'], '--max-candidates must be'),
    (['--timeout', '0'], '--timeout must be a number of seconds > 0'),
    (['--max-nodes', '0'], '--max-nodes must be an integer >= 2, got 0'),
    (['--batch-size', '0'], '--batch-size must be an integer >= 1, got 0'),
    (['--concurrency', '-1'], '--concurrency must be an integer >= 1, got -1'),
    (['--aggregation-fraction', '2'], '--aggregation-fraction must be a number in [0, 1]'),
    (['--early-stop', '-1'], '--early-stop must be an integer >= 0'),
    (['--k', '0,2'], '--k must be one or more integers >= 1'),
    (['--seed', '-1'], '--seed must be an integer >= 0, got -1'),
])
def test_generate_refuses_each_bad_numeric_flag_in_one_line_before_any_work(tmp_path, argv, message):
    out = tmp_path / 'never'
    with pytest.raises(UsageError) as e: generate_with_filters_cli(['--out', str(out), *argv])
    assert message in str(e.value) and len(str(e.value).splitlines()) == 1
    assert not out.exists()


def test_a_bad_n_is_reported_alone(tmp_path):
    with pytest.raises(UsageError) as e: generate_with_filters_cli(['--out', str(tmp_path / 'never'), '--n', '-3'])
    assert str(e.value) == '--n must be an integer >= 1 and at most 1,000,000 (GTSQA holds 32,099 questions), got -3'  # not also the candidate budget derived from it


def test_kgqa_generate_prints_one_line_and_exits_2(tmp_path, capsys):
    from kgqa_nb.cli import main
    out = tmp_path / 'never'
    assert main(['generate', '--out', str(out), '--n', '0', '--timeout', '-1']) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('kgqa generate: --n must be an integer >= 1 and at most 1,000,000 (GTSQA holds 32,099 questions), got 0') and len(err.splitlines()) == 1 and not out.exists()
