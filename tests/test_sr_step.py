"""The cheaper SR epoch (chapter 15b, `SRConfig.cache_frozen` / `val_subset`): off by default and then the reference run;
the frozen vectors are computed once; with the hashing encoder the cached run equals the reference number for number; the
validation subset scores the chosen epoch on all validation questions; a reference checkpoint records what it did before."""
import dataclasses
import tempfile

import numpy as np
import pytest
import torch

from kgqa_nb.sr import SRConfig, SRModel, _steps_of, load_sr, relation_texts, save_sr, sr_loss, train_sr, training_texts
from kgqa_nb.subgraphrag import config_record, mean_metric, prepare_examples, two_hop_dataset
from kgqa_nb.text import HashingEncoder


@pytest.fixture(scope='module')
def toy():
    kg, recs, graphs = two_hop_dataset(20, n_distractors=15, shortcut=True, seed=1)
    root = tempfile.mkdtemp()
    return kg, prepare_examples(recs, graphs, HashingEncoder(dim=32), root=root), root


def test_cache_frozen_alone_is_the_reference_run(toy):
    kg, exs, root = toy
    cfg = SRConfig(epochs=2, max_hop=2, tau=0.1, seed=3)
    m_ref, h_ref = train_sr(exs[:8], exs[12:18], kg, HashingEncoder(dim=32), cfg, root=root)
    m_c, h_c = train_sr(exs[:8], exs[12:18], kg, HashingEncoder(dim=32), dataclasses.replace(cfg, cache_frozen=True), root=root)
    assert [(h['loss'], h['val']) for h in h_c] == [(h['loss'], h['val']) for h in h_ref]
    assert all(torch.equal(a, b) for a, b in zip(m_ref.state_dict().values(), m_c.state_dict().values()))


def test_training_texts_are_all_a_step_embeds(toy):
    kg, exs, root = toy
    rel = relation_texts(kg); steps = _steps_of(exs[:4], 'gt', (len(rel) - 1) // 2, 20)
    model = SRModel(HashingEncoder(dim=32), rel, SRConfig(), root)
    assert model.cache_texts(training_texts(steps, rel)) > 0
    seen = set(model._vec)
    cfg = SRConfig(epochs=1, val_metric=None, max_hop=2)
    m2 = SRModel(HashingEncoder(dim=32), rel, cfg, root); m2.cache_texts(training_texts(steps, rel)); before = set(m2._vec)
    m2.train()
    sr_loss(m2, steps, np.random.default_rng(0), cfg, {}).backward()
    assert set(m2._vec) == before == seen  # no step needed a text the cache did not hold


def test_val_subset_scores_the_chosen_epoch_on_all(toy):
    kg, exs, root = toy
    cfg = SRConfig(epochs=2, max_hop=2, tau=0.1, seed=0, cache_frozen=True, val_subset=3)
    model, hist = train_sr(exs[:8], exs[12:20], kg, HashingEncoder(dim=32), cfg, root=root)
    chosen = [h for h in hist if 'full_val' in h]
    assert len(chosen) == 1 and chosen[0]['val_subset'] == 3
    assert chosen[0]['full_val'] == pytest.approx(mean_metric(model, exs[12:20], None, 'label_recall@100', 'gt'))


def test_reference_config_record_and_checkpoint(toy, tmp_path):
    kg, exs, root = toy
    assert 'cache_frozen' not in config_record(SRConfig()) and 'val_subset' not in config_record(SRConfig())
    model, _ = train_sr(exs[:4], [], kg, HashingEncoder(dim=32), SRConfig(epochs=1, val_metric=None, max_hop=2, cache_frozen=True), root=root)
    save_sr(model, tmp_path / 'sr.pt')
    back, _ = load_sr(tmp_path / 'sr.pt', HashingEncoder(dim=32), root=root)
    assert back.cfg.cache_frozen is True
    ref, _ = train_sr(exs[:4], [], kg, HashingEncoder(dim=32), SRConfig(epochs=1, val_metric=None, max_hop=2), root=root)
    assert 'cache_frozen' not in ref.config
