"""SubgraphRAG retriever (chapter 15) and the retrieval metrics (chapter 13): brute-force metric check, determinism,
resume after a kill, exact checkpoint reload, learnability on a two-hop toy set, and the named errors."""
import json

import numpy as np
import pytest
import torch

from kgqa_nb.metrics import retrieval_metrics
from kgqa_nb.qgraphs import QuestionGraph
from kgqa_nb.subgraphrag import (CheckpointMismatchError, RetrievalInputError, TrainConfig, load_retriever,
                                 mean_metric, prepare_examples, save_retriever, score_example, text_features, train_retriever,
                                 two_hop_dataset, SubgraphRAGRetriever)
from kgqa_nb.text import HashingEncoder


def _brute(scores, gt, h, t, ans, ks):
    "Retrieval metrics by explicit loops over a sorted list (ties by position)."
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    out = {}
    for k in ks:
        top = order[:k]
        n_gt = sum(gt[i] for i in top)
        out[f'gt_recall@{k}'] = n_gt / sum(gt)
        out[f'gt_precision@{k}'] = n_gt / len(top)
        ends = {h[i] for i in top} | {t[i] for i in top}
        out[f'answer_recall@{k}'] = sum(a in ends for a in set(ans)) / len(set(ans))
    out['gt_mrr'] = 1 / (next(r for r, i in enumerate(order) if gt[i]) + 1)
    return out


def test_retrieval_metrics_equal_brute_force():
    rng = np.random.default_rng(0)
    for trial in range(200):
        E = int(rng.integers(1, 60))
        scores = rng.integers(0, 5, E).astype(float)  # many ties
        gt = (rng.random(E) < 0.2).astype(int); gt[rng.integers(E)] = 1
        h, t = rng.integers(0, 15, E), rng.integers(0, 15, E)
        ans = rng.integers(0, 15, int(rng.integers(1, 4)))
        ks = (1, 3, 10, 30, 100)
        got, want = retrieval_metrics(scores, gt, h, t, ans, ks), _brute(scores.tolist(), gt.tolist(), h.tolist(), t.tolist(), ans.tolist(), ks)
        assert got.keys() == want.keys()
        for k in want: assert got[k] == pytest.approx(want[k]), (trial, k)


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp('emb')
    enc = HashingEncoder(dim=32)
    kg, recs, graphs = two_hop_dataset(24, n_distractors=20, shortcut=True)
    return enc, text_features(kg, enc, root=root), prepare_examples(recs, graphs, enc, root=root), root


def _cfg(**kw): return TrainConfig(**{**dict(epochs=4, patience=10, val_metric='gt_mrr', seed=3), **kw})


def test_training_is_deterministic_per_seed(toy):
    _, feats, exs, _ = toy
    m1, h1 = train_retriever(exs[:12], exs[12:16], feats, _cfg())
    m2, h2 = train_retriever(exs[:12], exs[12:16], feats, _cfg())
    m3, _ = train_retriever(exs[:12], exs[12:16], feats, _cfg(seed=4))
    assert h1 == h2
    assert np.array_equal(score_example(m1, exs[20], feats), score_example(m2, exs[20], feats))
    assert not np.array_equal(score_example(m1, exs[20], feats), score_example(m3, exs[20], feats))


def test_resume_after_kill_equals_uninterrupted(toy, tmp_path):
    _, feats, exs, _ = toy
    full, hist = train_retriever(exs[:12], exs[12:16], feats, _cfg(), ckpt_dir=tmp_path / 'a')
    killed, _ = train_retriever(exs[:12], exs[12:16], feats, _cfg(), ckpt_dir=tmp_path / 'b', stop_after=2)
    assert killed is None and (tmp_path / 'b' / 'last.pt').exists() and not (tmp_path / 'b' / 'best.pt').exists()
    resumed, hist_b = train_retriever(exs[:12], exs[12:16], feats, _cfg(), ckpt_dir=tmp_path / 'b')
    assert hist_b == hist
    assert np.array_equal(score_example(full, exs[20], feats), score_example(resumed, exs[20], feats))
    with pytest.raises(CheckpointMismatchError, match='other_run'):  # another config in the same folder is refused
        train_retriever(exs[:12], exs[12:16], feats, _cfg(lr=5e-4), ckpt_dir=tmp_path / 'b')


def test_checkpoint_reload_gives_identical_scores(toy, tmp_path):
    enc, feats, exs, _ = toy
    m, _ = train_retriever(exs[:12], exs[12:16], feats, _cfg(epochs=2), ckpt_dir=tmp_path)
    back, meta = load_retriever(tmp_path / 'best.pt', dim=enc.dim, encoder=enc.key)
    assert meta['encoder'] == enc.key
    for ex in exs[16:]:
        assert np.array_equal(score_example(m, ex, feats), score_example(back, ex, feats))
    with pytest.raises(CheckpointMismatchError, match='encoder_width'): load_retriever(tmp_path / 'best.pt', dim=384)
    with pytest.raises(CheckpointMismatchError, match='encoder_width'): score_example(SubgraphRAGRetriever(16), exs[0], feats)


def test_bad_input_is_named_and_nothing_is_written(toy, tmp_path):
    enc, feats, exs, root = toy
    kg, recs, graphs = two_hop_dataset(3, n_distractors=5)
    g = graphs[0]
    no_gt = QuestionGraph(g.id, g.h, g.r, g.t, np.zeros(len(g), np.uint8), g.seeds, g.answers)
    keep = ~np.isin(g.h, g.answers) & ~np.isin(g.t, g.answers)
    no_answer = QuestionGraph(g.id, g.h[keep], g.r[keep], g.t[keep], np.asarray(g.triple_scores)[keep] | 1, g.seeds, g.answers)
    empty = QuestionGraph(g.id, g.h[:0], g.r[:0], g.t[:0], np.zeros(0, np.uint8), g.seeds, g.answers)
    for bad, reason in [(no_gt, 'no_gt_triples'), (no_answer, 'answer_not_in_graph'), (empty, 'empty_graph')]:
        with pytest.raises(RetrievalInputError, match=reason) as e:
            prepare_examples([recs[1], recs[0]], [graphs[1], bad], enc, root=root)
        assert e.value.reason == reason and len(str(e.value).splitlines()) == 1
    with pytest.raises(RetrievalInputError, match='record_mismatch'): prepare_examples([recs[1]], [graphs[0]], enc, root=root)
    with pytest.raises(RetrievalInputError, match='unknown_labels'):
        train_retriever(exs[:4], exs[4:6], feats, _cfg(labels='sp:nope'), ckpt_dir=tmp_path / 'c')
    assert not (tmp_path / 'c').exists()  # refused before any checkpoint


def test_sp_labels_differ_from_gt_on_shortcut():
    kg, recs, graphs = two_hop_dataset(4, n_distractors=5, shortcut=True)
    for g in graphs:
        assert np.asarray(g.triple_scores)[:3].tolist() == [1, 1, 0]
        assert g.sp_mask('synth-kgqa')[:3].tolist() == [False, False, True]


def test_learnability_two_hop(tmp_path):
    "GT-trained retriever puts both GT triples of held-out two-hop questions in its top 10 (can fail)."
    enc = HashingEncoder(dim=64)
    kg, recs, graphs = two_hop_dataset(60)
    feats = text_features(kg, enc, root=tmp_path)
    exs = prepare_examples(recs, graphs, enc, root=tmp_path)
    m, _ = train_retriever(exs[:40], exs[40:50], feats, TrainConfig(labels='gt', epochs=15, patience=4, val_metric='gt_mrr'))
    assert mean_metric(m, exs[50:], feats, 'gt_recall@10') >= 0.95


@pytest.mark.slow
def test_sp_training_prefers_the_shortcut(tmp_path):
    "Trained on SP labels the retriever ranks the shortcut first; trained on GT it ranks the two-hop path first."
    enc = HashingEncoder(dim=64)
    kg, recs, graphs = two_hop_dataset(50, shortcut=True)
    feats = text_features(kg, enc, root=tmp_path)
    exs = prepare_examples(recs, graphs, enc, root=tmp_path)
    cfg = dict(epochs=8, val_metric=None)  # no early stopping: both arms train 8 epochs
    gt, _ = train_retriever(exs[:30], exs[30:40], feats, TrainConfig(labels='gt', **cfg))
    sp, _ = train_retriever(exs[:30], exs[30:40], feats, TrainConfig(labels='sp', **cfg))
    r_gt = mean_metric(gt, exs[40:], feats, 'gt_recall@3')
    r_sp = mean_metric(sp, exs[40:], feats, 'gt_recall@3')
    assert r_gt >= 0.9 and r_sp <= r_gt - 0.3
    assert all(int(np.argmax(score_example(sp, ex, feats))) == 2 for ex in exs[40:])  # the shortcut triple
