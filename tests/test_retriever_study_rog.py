"""RoG in the GT-vs-SP retriever study (chapter 15c's `listing` hook, as notebooks 64 and 65 use it): its rows have the
study's columns and the other arms' test questions, its GT and SP arms are fine-tuned on different paths, and the Table 4
statistics and the gate verdict cover it."""
import numpy as np
import pandas as pd
import pytest

from kgqa_nb.benchmark import BenchmarkSetup, fitted_path_model
from kgqa_nb.pathgen import training_pairs
from kgqa_nb.retriever_study import (ListingRetriever, gate_verdict, gt_vs_sp, ranked_scores, retriever_study, training_gate,
                                     UNDER_TRAINED)
from kgqa_nb.subgraphrag import two_hop_dataset
from kgqa_nb.text import HashingEncoder
from test_pathgen import toy_records  # the toy records with the GTSQA gold fields RoG reads


def rog_listing(fitted: dict, steps: int = 120, lr: float = 3e-3) -> dict:
    "The `listing` argument notebook 64 builds, with the tiny generator; every fitted model kept in `fitted` by (labels, seed)."
    budget = dict(generator='tiny', steps=steps, batch_size=4, lr=lr, beams=3)
    def fit(records, graphs, kg, labels, seed, folder):
        m = fitted_path_model(BenchmarkSetup(kg, train=records, train_graphs=graphs, arm=labels, budgets={'rog': {**budget, 'seed': seed}},
                                             cache_dir=folder))
        fitted[(labels, seed)] = (m, records, graphs)
        return m
    return {'rog': ListingRetriever(fit, dict(budget), losses=lambda m: m.gen.history)}


@pytest.fixture(scope='module')
def rog_study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('rogstudy')
    kg, recs, graphs = two_hop_dataset(24, n_distractors=8, shortcut=True, seed=1)
    df = pd.DataFrame(toy_records(kg, recs, graphs)).assign(split=['train'] * 18 + ['test'] * 6)
    fitted = {}
    st = retriever_study(kg, df, graphs, HashingEncoder(dim=32), tmp / 'cache', labels=('gt', 'sp'), seeds=(0,),
                         references=('ppr', 'embedding'), train_cfg=dict(epochs=1, val_metric=None), root=tmp / 'emb', ks=(3, 10),
                         reader_ks=(10,), gate_k=10, listing=rog_listing(fitted))
    return st, fitted, kg


def test_rog_rows_have_the_study_columns_and_the_same_test_questions(rog_study):
    st, _, _ = rog_study
    rog, sg = st[st.retriever == 'rog'], st[st.retriever == 'subgraphrag']
    assert set(rog.labels) == {'gt', 'sp:synth-kgqa'} and len(rog) == 2 * 6
    for lab in ('gt', 'sp:synth-kgqa'):
        assert sorted(rog[rog.labels == lab].id) == sorted(sg[sg.labels == lab].id) == sorted(st[st.retriever == 'ppr'].id)
    metrics = [c for c in st.columns if '@' in c and not c.startswith('gt_recall_readded')]
    assert rog[metrics + ['gt_mrr', 'n_retrieved', 'val_gt_recall@10']].notna().all().all()
    assert rog[[c for c in metrics if 'recall' in c]].apply(lambda c: c.between(0, 1)).all().all()
    assert (rog.epochs == 1).all() and (rog.train_seconds > 0).all()
    assert (rog.n_retrieved < rog.n_triples).any()  # a listing retriever: only what it listed can enter a top-K


def test_rog_gt_and_sp_arms_are_fine_tuned_on_different_paths(rog_study):
    _, fitted, kg = rog_study
    (gt, recs, graphs), (sp, recs_sp, _) = fitted[('gt', 0)], fitted[('sp:synth-kgqa', 0)]
    assert (gt.labels, sp.labels) == ('gt', 'sp:synth-kgqa') and [r['id'] for r in recs] == [r['id'] for r in recs_sp]
    paths = {lab: {t for _, t in training_pairs(recs[:1], kg, graphs[:1], lab)} for lab in ('gt', 'sp')}
    assert paths['gt'] == {' <p> parent > born in </p>'} and paths['sp'] == {' <p> shortcut </p>'}  # the shortcut question
    assert gt.gen.steps == sp.gen.steps == 120 and gt.gen.history != sp.gen.history


def test_table4_rog_row_has_the_paired_statistics_and_the_gate_verdict(rog_study):
    st, _, _ = rog_study
    gate = training_gate(st, k=10)
    assert set(gate[gate.retriever == 'rog'].labels) == {'gt', 'sp:synth-kgqa'}
    verdict = gate_verdict(gate)
    t4 = gt_vs_sp(st, ['gt_recall@10', 'answer_recall@10'], n_boot=200).assign(verdict=verdict)
    row = t4[t4.retriever == 'rog']
    assert list(row.metric) == ['gt_recall@10', 'answer_recall@10'] and (row.verdict == verdict).all()
    assert row[['p_paired_t', 'p_wilcoxon', 'ci_low', 'ci_high']].notna().all().all() and (row.n_questions == 6).all()
    if not gate[gate.retriever == 'rog'].passes.all():  # an arm below the references is named in the verdict
        assert verdict.startswith(UNDER_TRAINED) and ' rog ' in f' {verdict} '


def test_an_untrained_rog_fails_the_gate(tmp_path):
    kg, recs, graphs = two_hop_dataset(16, n_distractors=8, shortcut=True, seed=2)
    df = pd.DataFrame(toy_records(kg, recs, graphs)).assign(split=['train'] * 12 + ['test'] * 4)
    st = retriever_study(kg, df, graphs, HashingEncoder(dim=32), tmp_path / 'cache', labels=('gt',), seeds=(0,), references=('ppr', 'embedding'),
                         retrievers=(), root=tmp_path / 'emb', ks=(10,), reader_ks=(10,), gate_k=10, listing=rog_listing({}, steps=1, lr=1e-9))
    assert gate_verdict(training_gate(st, k=10)).startswith(f'{UNDER_TRAINED} (rog gt')


def test_ranked_scores_follow_the_list_order():
    kg, recs, graphs = two_hop_dataset(2, n_distractors=4)
    from kgqa_nb.subgraphrag import prepare_examples
    ex = prepare_examples(recs, graphs, HashingEncoder(dim=8))[0]
    ei = ex.edge_index.numpy(); tri = np.stack([ex.nodes[ei[0]], ex.rel.numpy(), ex.nodes[ei[1]]], 1)
    s = ranked_scores(ex, tri[[3, 1, 3]])  # a repeat keeps its first rank
    assert s[3] > s[1] > -np.inf and np.isinf(np.delete(s, [1, 3])).all()


def test_notebooks_64_and_65_build_rog_from_the_one_library_definition():
    # 65 reads the RoG runs 64 cached: both build the arm with benchmark.rog_study_listing (one definition, one cache key)
    import json
    from pathlib import Path
    for nb in ('64_retriever_study.ipynb', '65_table4_gt_vs_sp.ipynb'):
        src = [''.join(c['source']) for c in json.loads((Path(__file__).parents[1] / 'nbs' / nb).read_text())['cells'] if c['cell_type'] == 'code']
        assert not any('def rog_listing(' in x for x in src), f'{nb} defines its own RoG arm'
        assert sum('rog_arm, ROG_LABEL = rog_study_listing(' in x for x in src) == 1, f'{nb} does not build RoG with rog_study_listing'


def test_rog_study_listing_keys_the_same_budget_the_same_way():
    from kgqa_nb.benchmark import rog_study_listing
    a, la = rog_study_listing('tiny', 300, 8, 3e-3, 5)
    b, lb = rog_study_listing('tiny', 300, 8, 3e-3, 5, threads=2)
    c, _ = rog_study_listing('tiny', 301, 8, 3e-3, 5)
    assert la == lb and a['rog'].cfg == b['rog'].cfg and a['rog'].cfg != c['rog'].cfg


def test_a_listed_retriever_is_given_the_question_view_only():
    "The study hands a listed model the question, paraphrase and seeds of a record, never its answers, query or subgraph."
    from kgqa_nb.dataset import QUESTION_FIELDS
    from kgqa_nb.retriever_study import ListedScores
    from kgqa_nb.subgraphrag import prepare_examples
    kg, recs, graphs = two_hop_dataset(4, n_distractors=4, seed=2)
    rows = toy_records(kg, recs, graphs)
    seen = []
    class Spy:
        def retrieve(self, rec, kg, graph=None): seen.append(set(rec)); return np.zeros((0, 3), np.int64)
    exs = prepare_examples(rows, graphs, HashingEncoder(dim=16))
    ListedScores(Spy(), {r['id']: r for r in rows}, kg).example_scores(exs[0])
    assert seen and seen[0] <= set(QUESTION_FIELDS) and 'answer_subgraph' in rows[0]
