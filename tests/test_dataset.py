"""The zero-shot split builder obeys its rules on many random datasets, and dataset I/O round-trips."""
import pandas as pd
import pytest
from kgqa_nb.dataset import (SplitConfig, build_split, check_split, read_dataset, synthetic_records, write_jsonl,
                             write_parquet, stats_table, dataset_card, hops_by_split, types_by_split)

@pytest.mark.parametrize('seed', range(8))
def test_split_rules_hold(seed):
    ds = synthetic_records(n=500, seed=seed)
    res = build_split(ds, SplitConfig(unseen_graph_types=('(2)(1)',), id_per_type=15, min_per_cell=5, seed=seed))
    assert check_split(res) == []
    assert len(res.train) and len(res.test)
    assert set(res.train['id']).isdisjoint(res.test['id'])
    assert all(t == ['training'] for t in res.train['test_type'])

def test_split_is_deterministic():
    ds = synthetic_records(n=300, seed=3)
    a, b = (build_split(ds, SplitConfig(unseen_graph_types=('(1)(1)(1)',), seed=1)) for _ in range(2))
    pd.testing.assert_frame_equal(a.test, b.test); pd.testing.assert_frame_equal(a.train, b.train)

def test_check_split_catches_violations():
    ds = synthetic_records(n=300, seed=2)
    res = build_split(ds, SplitConfig(unseen_graph_types=('(2)(1)',), min_per_cell=1))
    leaked = res.test.iloc[:1].copy(); leaked['test_type'] = [['training']]
    res.train = pd.concat([res.train, leaked], ignore_index=True)
    assert any('test answers appear as train answers' in v for v in check_split(res))

def test_truncated_jsonl_line_is_skipped(tmp_path):
    ds = synthetic_records(n=5)
    p = write_jsonl(ds, tmp_path / 'd.jsonl')
    with open(p, 'a') as f: f.write('{"id": 99, "quest')  # a writer killed mid-line
    assert len(read_dataset(p)) == 5

def test_parquet_and_jsonl_agree(tmp_path):
    ds = synthetic_records(n=20)
    a = read_dataset(write_jsonl(ds, tmp_path / 'd.jsonl')); b = read_dataset(write_parquet(ds, tmp_path / 'd.parquet'))
    assert a['answer_subgraph'].tolist() == b['answer_subgraph'].tolist()
    pd.testing.assert_frame_equal(stats_table({'all': a}), stats_table({'all': b}))


# --- issue 10: one statistics column per split; duplicates; one JSONL reader --------------------------------------------
import json
import warnings

from kgqa_nb.dataset import dataset_card, empty_record, find_duplicates, normalize_question


def test_single_split_has_one_statistics_column():
    ds = synthetic_records(n=30)
    assert list(stats_table({'all': ds}).columns) == ['all']
    assert list(stats_table({'train': ds, 'test': ds}).columns) == ['train', 'test', 'All']
    card = dataset_card('x', {'all': ds}, 'synthetic', 'none')
    header = [w for w in card.split('## Statistics')[1].strip().splitlines()[0].split() if w != '|']  # plain or markdown (tabulate)
    assert header == ['all']


def _rec(i, q, sparql, answers):
    return empty_record(id=i, question=q, sparql_query=sparql, answer_node=f'a ({answers[0]})', all_answers_wikidata=answers)


def test_find_duplicates_by_query_or_question():
    recs = [_rec(5, 'Who performed Western City?', 'SELECT ?answer WHERE { wd:Q9 wdt:P175 ?answer . }', ['Q1']),
            _rec(1, 'Who sang Western City?', 'SELECT ?answer WHERE { wd:Q9 wdt:P175 ?answer . }', ['Q1']),
            _rec(3, 'who performed  western city', 'SELECT ?answer WHERE { wd:Q8 wdt:P175 ?answer . }', ['Q2']),
            _rec(4, 'Who performed Western Town?', 'SELECT ?p WHERE { wd:Q9 wdt:P175 ?p }', ['Q1', 'Q3']),  # other answers
            _rec(6, 'Other?', None, ['Q1']), _rec(7, 'Another?', None, ['Q1']),  # no query: compared by question only
            _rec(8, 'Who performed Western City!', 'SELECT ?answer WHERE { wd:Q7 wdt:P175 ?answer . }', ['Q4'])]
    assert find_duplicates(recs) == {5: (1, 'query'), 8: (3, 'question')}
    assert normalize_question('Who performed Western City?') == normalize_question('who performed  western city')


def test_damaged_middle_line_of_a_dataset_is_reported(tmp_path):
    ds = synthetic_records(n=5)
    p = write_jsonl(ds, tmp_path / 'd.jsonl')
    lines = p.read_text().splitlines()
    lines[2] = lines[2][:30]
    p.write_text('\n'.join(lines) + '\n')
    with pytest.warns(UserWarning, match=r'd\.jsonl:3: damaged line'):
        assert len(read_dataset(p)) == 4

def test_card_hop_and_type_tables_count_each_split():
    ds = synthetic_records(n=400, seed=5)
    res = build_split(ds, SplitConfig(unseen_graph_types=('(2)(1)',), min_per_cell=3))
    splits = {'train': res.train, 'test': res.test}
    hops, types = hops_by_split(splits), types_by_split(splits)
    for name, d in splits.items():
        assert hops[name].sum() == len(d) and types[name].sum() == len(d)
        assert hops[name].to_dict() == d.n_hops.value_counts().to_dict()
        assert abs(hops[f'{name} %'].sum() - 100) < 0.5
    assert types.loc['(2)(1)', 'train'] == 0 and types.loc['(2)(1)', 'test'] > 0  # the reserved type is test-only
    card = dataset_card('demo', splits, 'synthetic', 'none')
    assert '## Hops by split' in card and '## Isomorphism types by split' in card and '(2)(1)' in card

def test_hub_answers_stay_out_of_test():
    """Regression: one test question answered by a hub (an answer shared by many questions) removed every train question
    with that answer (on CoDEx-M 2,535 of 6,000, most of the multi-hop ones); such questions are no longer test candidates."""
    ds = synthetic_records(n=400, seed=7)
    hub = 'Hub (Q999999)'
    ds.loc[ds.index[:60], 'answer_node'] = hub  # 60 questions share one answer, across every type
    ds.loc[ds.index[:60], 'all_answers_wikidata'] = pd.Series([[hub]] * 60, index=ds.index[:60])
    cfg = SplitConfig(unseen_graph_types=('(2)(1)',), id_per_type=15, min_per_cell=5, max_answer_questions=20)
    res = build_split(ds, cfg)
    assert check_split(res) == []
    assert not any(hub in a for a in res.test['all_answers_wikidata'])
    hub_train = sum(hub in a for a in res.train['all_answers_wikidata'])
    assert hub_train > 30 and res.dropped['hub_answer_test_candidates'] > 0  # the hub questions that may train do
    off = build_split(ds, SplitConfig(**{**cfg.__dict__, 'max_answer_questions': None}))
    assert off.dropped['hub_answer_test_candidates'] == 0 and len(off.train) < len(res.train)
