"""The last filters feed the dataset (issue 37, item 5): `datasources.open_artifact` applies `filters.dataset_filters` once per
dataset (stale facts on every split, answerability on the test split) and every reader of the dataset gets the survivors,
with the filtered folder and the count of every stage in its provenance. The stale-fact stage runs against a real second
snapshot: CoDEx-M's own splits, the KG the questions were made on (train + valid + test) against a "newer" version holding
the training triples only, so the records to remove are known from the files alone."""
import json
from pathlib import Path

import pytest

from kgqa_nb.core import UsageError, data_dir, provenance
from kgqa_nb.datasources import open_artifact, open_generation
from kgqa_nb.filters import dataset_filters, edge_ids
from kgqa_nb.kg import read_triple_file
from kgqa_nb.loaders import load_kg
from kgqa_nb.toyworld import make_toyworld

N = 60  # a small generated dataset: seconds on the toy world and on CoDEx-M with the offline writer


@pytest.fixture(scope='module')
def toy():
    return make_toyworld()


def test_answerability_survivors_are_the_dataset_every_reader_gets(toy, tmp_path):
    run = dict(source='generated', kg=toy, n_target=N, seed=0, backend='offline', model='', answerability='offline-text')
    raw = open_artifact('raw', kg=toy, n_target=N, seed=0, backend='offline', out_dir=str(tmp_path))
    made = open_artifact('synthkgqa_dataset', **run, out_dir=str(tmp_path), make_filters=dataset_filters)
    read = open_generation('table1_dataset_overview', run, out_dir=str(tmp_path), make_filters=dataset_filters)
    assert made.source.filtered == read.source.filtered and read.records.equals(made.records)  # one folder, one set
    assert list(read.train.id) == list(raw.train.id)  # the paper filters its test split only
    log = [json.loads(l) for l in (made.source.filtered / 'filter_answerable.jsonl').read_text().splitlines()]
    assert set(raw.test.id) - set(read.test.id) == {r['id'] for r in log}
    assert read.prov['filters'] == [dict(stage='answerable', split='test', before=len(raw.test), after=len(read.test))]
    assert read.prov['dataset'].endswith('/' + made.source.filtered.name) and raw.prov['filters'] == []


def test_a_filter_parameter_without_its_filters_is_refused(toy, tmp_path):
    with pytest.raises(ValueError, match='need make_filters'):
        open_artifact('t', kg=toy, n_target=N, out_dir=str(tmp_path), answerability='offline-text')
    with pytest.raises(UsageError, match='no such file or folder, here or in the data folder'):
        open_artifact('t', kg=toy, n_target=N, out_dir=str(tmp_path), newer_kg=str(tmp_path / 'nowhere.tsv'), make_filters=dataset_filters)


@pytest.mark.data('codex')
def test_stale_facts_against_a_newer_codex_m_snapshot(tmp_path):
    kg = load_kg('codex-m')  # train + valid + test: the KG the questions are generated on
    folder = data_dir('codex') / 'data' / 'triples' / 'codex-m'
    newer = tmp_path / 'codex-m-newer.tsv'  # the "newer" snapshot: the training triples only
    newer.write_text((folder / 'train.txt').read_text())
    current = set(map(tuple, read_triple_file(newer).itertuples(index=False)))
    common = dict(kg=kg, n_target=N, seed=0, backend='offline', model='', out_dir=str(tmp_path / 'out'))
    raw = open_artifact('raw', **common)
    ctx = open_artifact('stale', **common, newer_kg=str(newer), make_filters=dataset_filters)
    for split in ('train', 'test'):
        before = getattr(raw, split)
        stale = {r['id'] for r in before.to_dict('records') if not set(edge_ids(r['answer_subgraph'])) <= current}
        assert set(getattr(ctx, split).id) == set(before.id) - stale, split  # exactly the records with a missing edge go
    removed = len(raw.records) - len(ctx.records)
    assert 0 < removed < len(raw.records)  # the two versions differ on some ground-truth edges, not all
    assert [(s['stage'], s['split']) for s in ctx.prov['filters']] == [('current', 'train'), ('current', 'test')]
    assert sum(s['before'] - s['after'] for s in ctx.prov['filters']) == removed
    log = [json.loads(l) for l in (ctx.source.filtered / 'filter_current.jsonl').read_text().splitlines()]
    assert all(tuple(e) not in current for r in log for e in r['missing_edges']) and len(log) == removed
    assert str(tmp_path) not in json.dumps(provenance(**ctx.prov))  # the snapshot is recorded the way every machine reads it
    assert str(tmp_path) not in (ctx.source.filtered / 'params.json').read_text()  # and keys its folder by content, not path
    # a different snapshot (train + valid) is another dataset: its own folder, never the first one's survivors
    newer2 = tmp_path / 'codex-m-newer2.tsv'
    newer2.write_text((folder / 'train.txt').read_text() + (folder / 'valid.txt').read_text())
    other = open_artifact('stale', **common, newer_kg=str(newer2), make_filters=dataset_filters)
    assert other.source.filtered != ctx.source.filtered and len(other.records) >= len(ctx.records)


def test_dataset_notebook_counts_every_funnel_row_with_a_newer_snapshot(toy, tmp_path):
    "Notebook 51 under the harness with `newer_kg`: the stale-fact rows get counts, and the last row of each split is what was read."
    import pandas as pd
    import kgqa_nb.plan as pl
    import kgqa_nb.profiles as pr
    import kgqa_nb.rerun as rr
    E, R = toy.entity_ids, toy.relation_ids
    newer = tmp_path / 'toy-newer.tsv'  # every fifth triple of the toy world is gone in this version
    newer.write_text(''.join(f'{E[h]}\t{R[r]}\t{E[t]}\n' for i, (h, r, t) in enumerate(zip(toy.head, toy.rel, toy.tail)) if i % 5))
    out = tmp_path / 'out'
    plan = dict(api_calls=0, prompt_tokens=0, completion_tokens=0, cost_usd=0., seconds=60.)
    rec = rr.run_artifact(pr.load_manifest()['synthkgqa_dataset'], 'smoke', overrides=dict(n_target=N, newer_kg=str(newer)), out_root=out,
                          plan=plan, meter=pl.SpendMeter([tmp_path / 'cache']))
    assert rec['status'] == 'ok', rec
    funnel = pd.read_csv(out / 'results' / 'synthkgqa_funnel.csv')
    cur = funnel[funnel.stage == 'current']
    assert list(cur.split) == ['train', 'test'] and cur.questions.notna().all() and cur.by.str.startswith('stale facts against').all()
    split = funnel[funnel.stage == 'split'].set_index('split').questions
    assert (cur.set_index('split').questions < split).any()  # the snapshot lost edges some ground-truth subgraphs use
    prov = json.loads((out / 'results' / 'synthkgqa_funnel.provenance.json').read_text())
    assert [(s['stage'], s['split'], s['after']) for s in prov['filters']] == [(r.stage, r.split, r.questions) for r in funnel[funnel.stage.isin(['current', 'answerable'])].itertuples()]
    assert '### Stale facts' in (out / 'results' / 'synthkgqa_dataset_card.md').read_text()
