"""The toy world at benchmark scale (>= 1M triples), determinism across processes, inverse-pair consistency, and
property tests over seeds and small scales."""
import subprocess, sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kgqa_nb.kg import KnowledgeGraph, kg_fingerprint
from kgqa_nb.toyvocab import INVERSE_OF, RELATIONS, STRUCTURAL_RELATIONS
from kgqa_nb.toyworld import (make_toyworld,
                              missing_inverses)


@pytest.fixture(scope='module')
def million():
    "The complete world at scale 30 plus the default-incompleteness world of the same seed (built once)."
    full = make_toyworld(seed=3, scale=30, missing_fraction=0)
    kg, deleted = make_toyworld(seed=3, scale=30, return_deleted=True)
    return full, kg, deleted


def test_million_triples(million):
    full, kg, deleted = million
    assert full.num_triples >= 1_000_000
    assert full.num_triples == kg.num_triples + len(deleted)
    assert len(set(full.entity_labels)) == full.num_entities  # labels stay unique at scale
    assert len(set(full.entity_ids)) == full.num_entities
    assert all(d for d in full.entity_descriptions)
    assert (np.bincount(full.rel, minlength=full.num_relations) > 0).all()
    deg = full.degree()
    assert deg.min() > 0 and deg.max() > 100 * np.median(deg)


def test_million_inverse_consistency(million):
    full, kg, deleted = million
    assert len(missing_inverses(full)) == 0
    # the deleted facts are exactly what is missing, and never structural
    assert not set(deleted.r) & set(STRUCTURAL_RELATIONS)
    miss = missing_inverses(kg)
    assert len(miss) > 0
    E, P = np.asarray(kg.entity_ids, object), np.asarray(kg.relation_ids, object)
    back = set(zip(deleted.t, deleted.r, deleted.h))  # reversed deleted facts: inverse lookups go t -> h
    dele = {(h, t) for h, t in zip(deleted.h, deleted.t)}
    for e in miss[:2000].tolist():
        h, r, t = E[kg.head[e]], P[kg.rel[e]], E[kg.tail[e]]
        assert (t, h) in dele, (h, r, t)  # its inverse was among the deleted facts


def test_no_duplicate_triples_and_canonical_order(million):
    full = million[0]
    key = (full.head * full.num_relations + full.rel) * full.num_entities + full.tail
    assert (np.diff(key) > 0).all()
    assert not (full.head == full.tail).any()


def test_determinism_across_processes():
    "A fresh interpreter (another hash seed) builds the byte-identical world."
    code = 'from kgqa_nb.kg import kg_fingerprint; from kgqa_nb.toyworld import make_toyworld; print(kg_fingerprint(make_toyworld(seed=5, scale=0.5)))'
    outs = {subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True,
                           env={'PYTHONHASHSEED': str(s), 'PATH': ''}).stdout.strip() for s in (1, 2)}
    assert outs == {kg_fingerprint(make_toyworld(seed=5, scale=0.5))}


def test_missing_fraction_does_not_change_the_world():
    a, da = make_toyworld(seed=2, scale=0.3, missing_fraction=0.2, return_deleted=True)
    b = make_toyworld(seed=2, scale=0.3, missing_fraction=0)
    assert a.entity_ids == b.entity_ids and a.entity_labels == b.entity_labels
    assert a.num_triples + len(da) == b.num_triples


def test_bad_parameters():
    for kw, word in ((dict(seed=-3), 'seed'), (dict(seed='0'), 'seed'), (dict(scale=-1.0), 'scale'),
                     (dict(scale=float('nan')), 'scale'), (dict(missing_fraction=-0.1), 'missing_fraction')):
        with pytest.raises(ValueError, match=word): make_toyworld(**kw)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([0.05, 0.1, 0.2]), frac=st.sampled_from([0.0, 0.05, 0.3]))
def test_properties_over_seeds(seed, scale, frac):
    kg, deleted = make_toyworld(seed=seed, scale=scale, missing_fraction=frac, return_deleted=True)
    assert isinstance(kg, KnowledgeGraph) and kg.name == f'toyworld(seed={seed},scale={scale:g},missing={frac:g})'
    assert len(set(kg.entity_labels)) == kg.num_entities
    assert kg.relation_ids == list(RELATIONS)
    assert kg.relation_labels == [RELATIONS[p][0] for p in RELATIONS]
    if frac == 0: assert len(deleted) == 0 and len(missing_inverses(kg)) == 0
    # parents are people of the right gender
    g = dict(zip(kg.head[kg.rel == kg.relation('P21')].tolist(), kg.tail[kg.rel == kg.relation('P21')].tolist()))
    for p, q in (('P22', 'Q6581097'), ('P25', 'Q6581072')):
        assert {g.get(x, kg.entity(q)) for x in kg.tail[kg.rel == kg.relation(p)].tolist()} <= {kg.entity(q)}
    assert set(INVERSE_OF) <= set(kg.relation_ids)


def test_labels_stay_unique_past_the_word_lists():
    "More countries than the name space holds (a ~16M-triple world): numbered names, with numbered demonyms and languages."
    from kgqa_nb.toyworld import _World, _geography
    w = _World(np.random.default_rng(0)); geo = _geography(w, 9000, 9000)
    assert len(set(w.labels)) == len(w.labels)
    assert any(' ' in d for d in geo['demonym'])
