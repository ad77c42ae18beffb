"""SynthKGQA Table 3 (transfer to Mintaka, notebook 69) on a tiny file in Mintaka's published layout, its absent-data path,
and SubgraphRAG's warm start (chapter 15) that its few-shot regime needs."""
import json

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from kgqa_nb.core import project_dirs
from kgqa_nb.dataset import read_mintaka
from kgqa_nb.loaders import load_kg
from kgqa_nb.profiles import artifact_needs, load_manifest, unmet_needs
from kgqa_nb.subgraphrag import (CheckpointMismatchError, SubgraphRAGRetriever, TrainConfig, prepare_examples, save_retriever,
                                 step_inputs, text_features, train_retriever, two_hop_dataset)
from kgqa_nb.text import HashingEncoder

NB = project_dirs.root / 'nbs' / '69_table3_mintaka.ipynb'
TINY = dict(study_questions=40, study_epochs=1, study_seeds=1, rog_steps=20, rog_few_shot_steps=5, epochs=1)


def mintaka_item(i: int, kg, h: int, r: int, t: int) -> dict:
    "One record in Mintaka's published layout: a question about a toy-world triple, its head the question entity, its tail the answer."
    hl, rl, tl = kg.entity_labels[h], kg.relation_labels[r], kg.entity_labels[t]
    q = f'What is the {rl} of {hl}?'
    return dict(id=f'm{i}', lang='en', question=q, category='geography', complexityType='generic',
                questionEntity=[dict(name=kg.entity_ids[h], entityType='entity', label=hl, mention=hl, span=[q.index(hl), q.index(hl) + len(hl)])],
                answer=dict(answerType='entity', mention=tl, answer=[dict(name=kg.entity_ids[t], label=dict(en=tl, de=tl))]))


def write_tiny_mintaka(root) -> dict:
    "mintaka_{train,dev,test}.json under root/mintaka: toy-world triple questions, plus one numeric answer and one seed outside the KG."
    kg = load_kg('toyworld')
    rows = [(int(h), int(r), int(t)) for h, r, t in zip(kg.head, kg.rel, kg.tail) if h != t][:400:25]
    items = [mintaka_item(i, kg, *x) for i, x in enumerate(rows)]
    numeric = dict(id='num', lang='en', question='How many moons has Mars?', category='science', complexityType='count',
                   questionEntity=[dict(name=kg.entity_ids[rows[0][0]], entityType='entity', label='x', mention='x', span=[0, 1])],
                   answer=dict(answerType='number', answer=[2], mention='2'))
    outside = {**items[0], 'id': 'outside', 'questionEntity': [dict(name='Q999999999', entityType='entity', label='nobody', mention='nobody', span=[0, 6])]}
    split = {'train': items[:10] + [numeric, outside], 'dev': items[10:12], 'test': items[12:16]}
    (root / 'mintaka').mkdir(parents=True)
    for s, part in split.items(): (root / 'mintaka' / f'mintaka_{s}.json').write_text(json.dumps(part, indent=2, ensure_ascii=False))
    return split


def run_notebook(tmp_path, monkeypatch, data, **params):
    import papermill as pm
    monkeypatch.setenv('KGQA_DATA', str(data)); monkeypatch.setenv('KGQA_PROGRESS', '0'); monkeypatch.setenv('OMP_NUM_THREADS', '1')
    out = tmp_path / 'out'
    pm.execute_notebook(str(NB), str(tmp_path / 'executed.ipynb'), parameters=dict(out_dir=str(out), **params), cwd=str(NB.parent),
                        progress_bar=False)
    return out


def test_the_tiny_file_reads_as_mintaka(tmp_path):
    split = write_tiny_mintaka(tmp_path)
    d = read_mintaka(tmp_path / 'mintaka' / 'mintaka_train.json')
    assert len(d) == len(split['train'])
    assert set(d.answer_type) == {'entity', 'number'}
    assert d.seed_entities.iloc[0][0].endswith(f"({split['train'][0]['questionEntity'][0]['name']})")


def test_three_regimes_end_to_end_on_a_tiny_mintaka_file(tmp_path, monkeypatch):
    write_tiny_mintaka(tmp_path / 'data')
    out = run_notebook(tmp_path, monkeypatch, tmp_path / 'data', mintaka='published', **TINY)
    table = pd.read_csv(out / 'results' / 'table3_mintaka.csv')
    got = sorted(zip(table.regime, table.model))
    assert got == sorted([('0-shot', 'llm-only'), *[(r, m) for r in ('0-shot', 'few-shot', 'full training') for m in ('rog', 'subgraphrag')]])
    assert table.labels.str.contains('SP-path stand-in').all() and (table.source == 'Mintaka (published)').all()
    assert (table.n_questions == 4).all() and (table.n_train == 10).all() and (table.n_few_shot == 1).all()
    assert ((table.em_hit_lo <= table.em_hit) & (table.em_hit <= table.em_hit_hi)).all()
    assert table.label[table.regime == 'few-shot'].str.contains('continued from the study checkpoint').any()
    assert table.label[table.regime == 'full training'].str.contains('from scratch').all()
    assert table.set_index(['model', 'regime']).paper_em_hit[('subgraphrag', 'few-shot')] == 86.02  # the paper's value beside the row
    dropped = pd.read_csv(out / 'results' / 'table3_mintaka_dropped.csv')
    assert dict(zip(dropped.id, dropped.reason)) == {'num': 'answer not an entity', 'outside': 'seed or answer not in the KG'}
    perq = pd.read_csv(out / 'results' / 'table3_mintaka_questions.csv')
    assert len(perq) == 7 * 4 and perq.labels.str.contains('SP-path stand-in').all()


def test_absent_mintaka_says_why_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    import papermill as pm
    (tmp_path / 'data').mkdir()
    with pytest.raises(pm.PapermillExecutionError) as e:
        run_notebook(tmp_path, monkeypatch, tmp_path / 'data', mintaka='published', **TINY)
    assert e.value.ename == 'FileNotFoundError'
    assert 'Mintaka train' in e.value.evalue and 'mintaka_train.json' in e.value.evalue and '\n' not in e.value.evalue
    assert not (tmp_path / 'out').exists() or not any(p.is_file() for p in (tmp_path / 'out').rglob('*'))
    why = unmet_needs(artifact_needs(load_manifest()['table3_mintaka'], dict(mintaka='published')))
    assert any("'mintaka'" in w for w in why)                                          # kgqa rerun skips it with this reason
    assert not any('mintaka' in w for w in unmet_needs(artifact_needs(load_manifest()['table3_mintaka'], {})))  # the toy default needs no file


@pytest.fixture(scope='module')
def two_hop(tmp_path_factory):
    root = tmp_path_factory.mktemp('emb')
    kg, recs, graphs = two_hop_dataset(8, n_distractors=6)
    enc = HashingEncoder(dim=16)
    return text_features(kg, enc, root=root), prepare_examples(recs, graphs, enc, root=root)


def bce(model, ex, feats) -> float:
    "The training loss of one question under `model` (question vector, no paraphrase), from the public step inputs."
    it = step_inputs(ex, feats, 'gt')
    ent = torch.cat([torch.as_tensor(feats.ent), torch.zeros(1, feats.dim)])
    with torch.no_grad():
        logits = model(it['q'][0], ent[it['rows']], it['has_text'], torch.as_tensor(feats.rel), it['edge_index'], it['rel'], it['topic'], dde_x=it['dde'])
    return float(F.binary_cross_entropy_with_logits(logits, it['y']))


def test_a_warm_start_begins_at_the_checkpoints_weights(two_hop, tmp_path):
    feats, exs = two_hop
    trained, _ = train_retriever(list(exs)[:6], [], feats, TrainConfig(epochs=3, val_metric=None, paraphrase_p=0.0, lr=1e-2))
    ck = save_retriever(trained, tmp_path / 'best.pt', encoder=feats.encoder)
    one, first = [exs[6]], TrainConfig(epochs=1, val_metric=None, paraphrase_p=0.0)  # one question: the first step is the whole epoch
    _, warm = train_retriever(one, [], feats, first, init=ck)
    _, cold = train_retriever(one, [], feats, first)
    assert warm[0]['loss'] == pytest.approx(bce(trained, exs[6], feats), abs=1e-5)
    assert abs(cold[0]['loss'] - warm[0]['loss']) > 1e-3
    model, _ = train_retriever(one, [], feats, TrainConfig(epochs=1, val_metric=None, paraphrase_p=0.0, lr=0.0), init=trained)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), trained.parameters()))   # lr 0: the checkpoint unchanged


def test_a_warm_start_refuses_weights_of_another_shape(two_hop, tmp_path):
    feats, exs = two_hop
    other = save_retriever(SubgraphRAGRetriever(feats.dim, hidden=3), tmp_path / 'other.pt', encoder=feats.encoder)
    with pytest.raises(CheckpointMismatchError, match='config'):
        train_retriever([exs[0]], [], feats, TrainConfig(epochs=1, val_metric=None), init=other)
    wide = save_retriever(SubgraphRAGRetriever(feats.dim + 1), tmp_path / 'wide.pt', encoder=feats.encoder)
    with pytest.raises(CheckpointMismatchError, match='-d'):
        train_retriever([exs[0]], [], feats, TrainConfig(epochs=1, val_metric=None), init=wide)
