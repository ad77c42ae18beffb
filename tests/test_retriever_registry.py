"""Adding a retriever is one registry entry: a tiny trained retriever, registered here and nowhere else, is trained and
scored by the GT-vs-SP study, read back from its checkpoint by the benchmark, and scored there beside a built-in model."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from kgqa_nb.benchmark import BenchmarkSetup, check_model_names, make_models, model_factories, run_benchmark
from kgqa_nb.readers import TextPathReader
from kgqa_nb.retriever_study import (REFERENCE_RETRIEVERS, TRAINED_RETRIEVERS, RetrieverStudy, ppr_scores, retriever_study, study_code,
                                     train_code)
from kgqa_nb.retrievers import RetrieverSpec, StudyConfig, registered, retriever_spec
from kgqa_nb.qgraphs import build_question_graphs
from kgqa_nb.spanalysis import tree_records
from kgqa_nb.subgraphrag import label_key
from kgqa_nb.text import HashingEncoder
from kgqa_nb.toyworld import make_toyworld


class SeedNear:
    "PPR plus a learned bonus for triples that touch a seed: one weight, fitted on the arm's labels."
    def __init__(self, w: float): self.w = float(w)
    def example_scores(self, ex) -> np.ndarray:
        ei, topic = ex.edge_index.numpy(), ex.topic.numpy()
        return (ppr_scores(ex) + self.w * (topic[ei[0]] | topic[ei[1]])).astype(np.float32)


def _label_recall(model, exs, arm: str, k: int) -> float:
    out = []
    for ex in exs:
        y = ex.labels[label_key(arm)].numpy().astype(bool)
        top = np.argsort(-model.example_scores(ex), kind='stable')[:k]
        out.append(y[top].sum() / max(1, y.sum()))
    return float(np.mean(out))


def train_seed_near(kg, encoder, train, val, feats, labels, seed, cfg, ckpt_dir=None, **_):
    "The study's trainer protocol: pick the bonus with the best training label recall@k, write best.pt, return the history."
    grid = [0.0, *cfg.get('grid', (0.01, 0.1, 1.0))]
    scores = [_label_recall(SeedNear(w), train, labels, cfg.get('k', 5)) for w in grid]
    w = grid[int(np.argmax(scores))]
    if ckpt_dir is not None:
        ckpt_dir.mkdir(parents=True, exist_ok=True); torch.save({'w': w}, ckpt_dir / 'best.pt')
    return SeedNear(w), [dict(epoch=1, loss=float(-max(scores)), val=_label_recall(SeedNear(w), val, labels, cfg.get('k', 5)))]


def load_seed_near(path, encoder, root=None):
    return SeedNear(torch.load(path)['w']), HashingEncoder(dim=16)


TINY = RetrieverSpec('seednear', 'trained', train=train_seed_near, load=load_seed_near, title='SeedNear ({k})',
                     config=lambda c: dict(k=c.own['seednear_k']), params={'seednear_k': 5}, detail=lambda m: f', bonus {m.w:g}')


def test_one_registry_entry_runs_a_new_retriever_through_the_study_and_the_benchmark(tmp_path):
    kg = make_toyworld(scale=0.2)  # GTSQA-schema questions (seed-to-answer trees) and their question graphs, as chapter 25's
    df = tree_records(kg, 16, seed=3, max_hops=2, max_seeds=2).assign(test_type=[['in_distribution']] * 16, split=['train'] * 10 + ['test'] * 6)
    graphs = build_question_graphs(kg, df, tmp_path / 'qg', n_nodes=60, max_triples=400)
    enc = HashingEncoder(dim=16)
    assert 'seednear' not in TRAINED_RETRIEVERS
    with registered(TINY):
        # the study: its config read from a profile-like dict (the retriever's own parameter included), trained and scored
        cfg = StudyConfig.from_params(dict(retrievers=['seednear'], labels=['gt'], n_seeds=1, seednear_k=3))
        own = {'seednear': retriever_spec('seednear').own_config(cfg)}
        assert own == {'seednear': {'k': 3}} and 'seednear' in TRAINED_RETRIEVERS
        st = retriever_study(kg, df, graphs, enc, tmp_path / 'cache', labels=('gt',), seeds=(0,), references=('ppr',), retrievers=('seednear',),
                             retriever_cfgs=own, train_cfg=dict(epochs=1, val_metric=None), root=tmp_path / 'emb', ks=(5,), val_fraction=0.3)
        assert set(st.retriever) == {'ppr', 'seednear'} and (st[st.retriever == 'seednear'].epochs == 1).all()
        assert len(st[st.retriever == 'seednear']) == 6  # every test question scored
        folder = tmp_path / 'cache' / st.attrs['folder'].split('/')[-1]
        ckpts = list((folder / 'ckpt').glob('seednear-*-gt-0/best.pt'))
        assert len(ckpts) == 1
        w = torch.load(ckpts[0])['w']
        # the benchmark: the same name is a model, its checkpoint read back through the registry's `load`
        assert 'seednear' in model_factories() and check_model_names('seednear,llm-only') == ['seednear', 'llm-only']
        rs = RetrieverStudy(None, graphs, st, {'params': {'encoder': enc.name}}, folder)
        setup = BenchmarkSetup(kg, study=rs, arm='gt', seed=0, k=5, verdict='gate not run in this test')
        tiny, only = make_models('seednear,llm-only', setup)
        assert tiny.describe().startswith(f'SeedNear (5) (top 5 triples; study checkpoint: gt labels, seed 0, 1 epochs, bonus {w:g};')
        test = df[df.split == 'test']
        tg = [np.stack([g.h, g.r, g.t], 1) for g in graphs[10:]]
        rows = run_benchmark([tiny, only], test, kg, tg, TextPathReader(encoder=enc))
        assert rows.groupby('model').size().to_dict() == {'llm-only': 6, 'seednear': 6}
        assert (rows[rows.model == 'seednear'].n_triples == 5).all()
        # the cache keys follow the registry's code list, so the new retriever's study has keys of its own
        assert json.loads((folder / 'params.json').read_text())['code'] == study_code(retrievers=['seednear', 'ppr'])
    assert 'seednear' not in TRAINED_RETRIEVERS and 'seednear' not in model_factories()  # the registry as it was
    with pytest.raises(ValueError, match="unknown trained retriever 'seednear'"):
        retriever_study(kg, df, graphs, enc, tmp_path / 'cache2', labels=('gt',), seeds=(0,), retrievers=('seednear',))
    assert list(REFERENCE_RETRIEVERS) == ['ppr', 'embedding', 'random'] and train_code('sr') == train_code('subgraphrag', 'sr')
