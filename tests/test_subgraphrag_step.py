"""The cheaper SubgraphRAG step (chapter 15, `TrainConfig` options): the default path is the reference step number for
number, the sampled loss is an unbiased estimate of the full-graph loss, several questions per step give the mean
gradient of single steps, and the options record what they did."""
import copy
import dataclasses
import tempfile
import warnings
from contextlib import nullcontext

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kgqa_nb.subgraphrag as sg
from kgqa_nb.subgraphrag import (SubgraphRAGRetriever, TrainConfig, config_record, label_key, prepare_examples, step_inputs,
                                 text_features, train_retriever, two_hop_dataset)
from kgqa_nb.text import HashingEncoder


@pytest.fixture(scope='module')
def toy():
    kg, recs, graphs = two_hop_dataset(12, n_distractors=40, seed=3)
    root, enc = tempfile.mkdtemp(), HashingEncoder(dim=16)
    return text_features(kg, enc, root=root), list(prepare_examples(recs, graphs, enc, root=root))


def reference_loop(train, val, feats, cfg):
    "SubgraphRAG's step written out on its own: one question per Adam step, mean BCE over all its triples."
    torch.manual_seed(cfg.seed)
    model = SubgraphRAGRetriever(feats.dim, cfg.hidden); opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    key, losses = label_key(cfg.labels), []
    for ep in range(cfg.epochs):
        rng = np.random.default_rng([cfg.seed, ep]); order, para = rng.permutation(len(train)), rng.random(len(train))
        model.train(); ep_losses = []
        for i in order:
            ex = train[i]; y = ex.labels[key]
            if not y.any(): continue
            row = 1 if len(ex.q) > 1 and para[i] < cfg.paraphrase_p else 0
            x = (ex.q[row], torch.as_tensor(feats.entity_vectors(ex.nodes)), torch.as_tensor(feats.has_text[ex.nodes]),
                 torch.as_tensor(feats.rel), ex.edge_index, ex.rel, ex.topic)
            loss = F.binary_cross_entropy_with_logits(model(*x), y); opt.zero_grad(); loss.backward(); opt.step()
            ep_losses.append(loss.item())
        losses.append(float(np.mean(ep_losses)))
    return model, losses


def test_default_path_is_the_reference_step(toy):
    feats, exs = toy
    cfg = TrainConfig(epochs=2, val_metric=None, seed=5)
    ref, ref_losses = reference_loop(exs[:8], exs[8:], feats, cfg)
    for c in (cfg, TrainConfig(epochs=2, val_metric=None, seed=5, neg_sample=None, questions_per_step=1, bf16=False, compile=False)):
        model, hist = train_retriever(exs[:8], exs[8:], feats, c)
        assert [h['loss'] for h in hist] == ref_losses
        assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), model.state_dict().values()))


def test_reference_run_key_and_record_are_unchanged():
    "A reference run records exactly the fields it recorded before the options existed, so its last.pt still resumes."
    assert set(config_record(TrainConfig())) == {'labels', 'seed', 'epochs', 'patience', 'lr', 'paraphrase_p', 'val_metric', 'hidden'}
    assert config_record(TrainConfig(neg_sample=100, val_subset=5))['neg_sample'] == 100


def test_sampled_loss_is_unbiased_on_a_real_question(toy):
    feats, exs = toy
    torch.manual_seed(0); model = SubgraphRAGRetriever(feats.dim)
    ent, rel = torch.cat([torch.as_tensor(feats.ent), torch.zeros(1, feats.dim)]), torch.as_tensor(feats.rel)
    it = step_inputs(exs[0], feats, 'gt')
    with torch.no_grad():
        full = sg._lever_loss(model, it, ent, rel, 0, 'cpu', None, None, nullcontext).item()
        assert full == sg._step_loss(model, it, ent, rel, 0, 'cpu').item()
        draws = [sg._lever_loss(model, it, ent, rel, 0, 'cpu', 5, np.random.default_rng(s), nullcontext).item() for s in range(3000)]
    se = np.std(draws) / np.sqrt(len(draws))
    assert abs(np.mean(draws) - full) < 4 * se + 1e-6, (np.mean(draws), full, se)
    assert np.std(draws) > 0  # the draws really differ (5 of about 40 negatives)


def test_negative_sample_keeps_every_positive_and_weights_the_rest():
    y = np.zeros(100); y[[3, 50]] = 1
    idx, w = sg.negative_sample(y, 7, np.random.default_rng(0))
    assert idx[:2].tolist() == [3, 50] and len(idx) == 9 and len(set(idx.tolist())) == 9
    assert torch.allclose(w, torch.tensor([1., 1.] + [98 / 7] * 7))
    with pytest.raises(ValueError, match='neg_sample'): sg.negative_sample(y, 0, np.random.default_rng(0))


def test_several_questions_per_step_give_the_mean_gradient(toy):
    feats, exs = toy
    torch.manual_seed(1); base = SubgraphRAGRetriever(feats.dim)
    ent, rel = torch.cat([torch.as_tensor(feats.ent), torch.zeros(1, feats.dim)]), torch.as_tensor(feats.rel)
    its = [step_inputs(ex, feats, 'gt') for ex in exs[:5]]
    def grad(batch):
        m = copy.deepcopy(base); m.zero_grad()
        for it in batch: (sg._lever_loss(m, it, ent, rel, 0, 'cpu', None, None, nullcontext) / len(batch)).backward()
        return torch.cat([p.grad.flatten() for p in m.parameters()])
    torch.testing.assert_close(grad(its), torch.stack([grad([it]) for it in its]).mean(0), atol=1e-6, rtol=1e-5)


def test_one_step_of_a_batch_equals_the_training_loop(toy):
    "questions_per_step = all training questions, lr 0 -> the epoch loss is the mean of the reference losses (same order-free sum)."
    feats, exs = toy
    ref = TrainConfig(epochs=1, val_metric=None, lr=0.0, paraphrase_p=0.0)
    _, h_ref = train_retriever(exs[:6], [], feats, ref)
    _, h_bat = train_retriever(exs[:6], [], feats, dataclasses.replace(ref, questions_per_step=6))
    assert h_bat[0]['loss'] == pytest.approx(h_ref[0]['loss'], rel=1e-6)


def test_bf16_falls_back_with_a_warning_where_the_cpu_lacks_it(monkeypatch):
    monkeypatch.setattr(sg, 'cpu_bf16_units', lambda: '')
    with pytest.warns(UserWarning, match='bf16'):
        ctx, chosen = sg.forward_precision(True, 'cpu')
    assert chosen == 'float32 (bf16 unavailable)' and ctx is nullcontext


def test_validation_subset_then_full_validation_of_the_chosen_epoch(toy):
    feats, exs = toy
    cfg = TrainConfig(epochs=3, patience=5, val_metric='gt_mrr', seed=2, neg_sample=10, questions_per_step=2, val_subset=2)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore'); model, hist = train_retriever(exs[:8], exs[8:], feats, cfg)
    chosen = [h for h in hist if 'full_val' in h]
    assert len(hist) == 3 and len(chosen) == 1 and chosen[0]['val_subset'] == 2
    assert chosen[0]['epoch'] == max(h['epoch'] for h in hist if h['improved'])
    assert chosen[0]['full_val'] == pytest.approx(sg.mean_metric(model, exs[8:], feats, 'gt_mrr'))
    with pytest.raises(ValueError, match='val_subset'): train_retriever(exs[:8], exs[8:], feats, dataclasses.replace(cfg, val_subset=0))
    with pytest.raises(ValueError, match='questions_per_step'): train_retriever(exs[:8], exs[8:], feats, dataclasses.replace(cfg, questions_per_step=0))


def test_sampled_runs_are_deterministic_per_seed(toy):
    feats, exs = toy
    cfg = TrainConfig(epochs=2, val_metric=None, seed=4, neg_sample=8, questions_per_step=3)
    (a, ha), (b, hb) = train_retriever(exs[:8], [], feats, cfg), train_retriever(exs[:8], [], feats, cfg)
    assert [h['loss'] for h in ha] == [h['loss'] for h in hb]
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
