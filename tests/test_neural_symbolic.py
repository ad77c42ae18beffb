"""Neural vs symbolic (ULTRAG RQ1, issue 24 item 5): deleting every witness of a question's answer leaves none and makes the
symbolic executor fail, using held-back facts only; the writer-noise operators change the query, keep it valid DSL and
repeat per seed."""
import itertools

import numpy as np
import pytest

from kgqa_nb.core import UsageError
from kgqa_nb.dsl import SymbolicExecutor, parse_query, format_query, query_relations, query_entities, Intersection
from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.neural_symbolic import (SHAPES, NOISE, heldback_facts, sample_shape_questions, witness_edges, delete_witnesses,
                                     cooccurring_relations, add_noise)

TW, HELD, _ = heldback_facts('toyworld', share=0.1, seed=0)
HARD = sample_shape_questions(TW, n_per_shape=8, heldback=HELD, seed=3)
PLAIN = sample_shape_questions(TW, n_per_shape=8, seed=4)
COOC = cooccurring_relations(TW)


def chain_witness_facts(kg: KnowledgeGraph, query: str, answers) -> set:
    "Brute force for a chain query: the facts of every path from the anchor along the relations to an answer."
    q = parse_query(query)
    (anchor,), rels = query_entities(q), query_relations(q)
    paths = [([], kg.entity(anchor))]
    for rel, inv in rels:
        r, nxt = kg.relation(rel), []
        for facts, v in paths:
            e = np.flatnonzero((kg.rel == r) & ((kg.tail if inv else kg.head) == v))
            nxt += [(facts + [int(i)], int((kg.head if inv else kg.tail)[i])) for i in e]
        paths = nxt
    gold = {kg.entity(a) for a in answers}
    return {f for facts, v in paths if v in gold for f in facts}


def test_witness_edges_match_path_enumeration_on_chains():
    chains = [r for r in itertools.chain(HARD.itertuples(), PLAIN.itertuples()) if len(SHAPES[r.shape]) == 1]
    assert len(chains) >= 40
    for r in chains:
        assert set(witness_edges(TW, r.query, r.answers).tolist()) == chain_witness_facts(TW, r.query, r.answers), r.query


def test_hard_questions_need_a_heldback_fact():
    without = SymbolicExecutor(TW.drop_triples(np.flatnonzero(HELD)))
    for r in HARD.itertuples():
        assert not set(without.answers(r.query)) & set(r.answers), r.query
        assert set(SymbolicExecutor(TW).answers(r.query)) == set(r.answers)


def test_deletion_leaves_no_witness_and_the_symbolic_executor_fails():
    for r in HARD.itertuples():
        damaged, gone = delete_witnesses(TW, HELD, r.query, r.answers)
        assert len(gone) >= 1 and HELD[gone].all(), r.query  # only held-back facts are deleted
        assert damaged.num_triples == TW.num_triples - len(gone) and damaged.entity_ids == TW.entity_ids
        assert len(witness_edges(damaged, r.query, r.answers)) == 0, r.query  # no witness left
        assert not set(SymbolicExecutor(damaged).answers(r.query)) & set(r.answers), r.query


def test_deletion_refuses_a_question_with_a_pretraining_witness():
    r = next(r for r in PLAIN.itertuples() if not HELD[witness_edges(TW, r.query, r.answers)].all())
    with pytest.raises(ValueError, match='keep a witness made of pretraining facts only'):
        delete_witnesses(TW, HELD, r.query, r.answers)


def test_sampling_is_deterministic_and_counts_per_shape():
    assert HARD.equals(sample_shape_questions(TW, n_per_shape=8, heldback=HELD, seed=3))
    assert HARD['shape'].value_counts().to_dict() == {s: 8 for s in SHAPES}
    assert HARD.answers.map(len).between(1, 10).all()


@pytest.mark.parametrize('kind', list(NOISE))
def test_noise_changes_the_query_keeps_valid_dsl_and_repeats_per_seed(kind):
    applied = 0
    for i, r in enumerate(PLAIN.itertuples()):
        out = add_noise(r.query, kind, i, COOC)
        assert out == add_noise(r.query, kind, i, COOC)  # deterministic per seed
        if out is None:
            assert (kind == 'branch dropped' and len(SHAPES[r.shape]) == 1) or (kind == 'hop dropped' and max(SHAPES[r.shape]) == 1), (kind, r.query)
            continue
        applied += 1
        q = parse_query(out)
        assert out != r.query and format_query(q) == out
        for rel, _ in query_relations(q): TW.relation(rel)  # every relation is in the graph
        for e in query_entities(q): TW.entity(e)
        SymbolicExecutor(TW).answers(q)  # it runs
    assert applied >= 16
    assert len({add_noise(PLAIN['query'].iloc[-1], kind, s, COOC) for s in range(20)}) >= 2  # the seed matters


def test_noise_kinds_do_what_they_say():
    q = 'AND(Q1 -> P1 -> P2, Q7 -> P3 inv)'
    cooc = {'P1': ['P9'], 'P2': ['P9'], 'P3': ['P9']}
    for s in range(10):
        sw = parse_query(add_noise(q, 'relation swapped', s, cooc))
        changed = [(a, b) for a, b in zip(query_relations(sw), query_relations(parse_query(q))) if a != b]
        assert len(changed) == 1 and changed[0][0] == ('P9', changed[0][1][1])  # one relation, swapped, direction kept
        fl = query_relations(parse_query(add_noise(q, 'direction flipped', s, cooc)))
        assert [r for r, _ in fl] == ['P1', 'P2', 'P3'] and sum(a != b for a, b in zip(fl, query_relations(parse_query(q)))) == 1
        br = parse_query(add_noise(q, 'branch dropped', s, cooc))
        assert not isinstance(br, Intersection) and format_query(br) in ('Q1 -> P1 -> P2', 'Q7 -> P3 inv')
        assert add_noise(q, 'hop dropped', s, cooc) in ('AND(Q1 -> P2, Q7 -> P3 inv)', 'AND(Q1 -> P1, Q7 -> P3 inv)')


def test_cooccurring_relations_exclude_the_relation_itself():
    assert all(r not in v and len(v) <= 5 for r, v in COOC.items())


def test_heldback_refuses_pretraining_graphs_and_bad_shares():
    with pytest.raises(UsageError, match="UltraQuery's pretraining"): heldback_facts('fb15k237')
    with pytest.raises(UsageError, match='share must be'): heldback_facts('toyworld', share=0)


@pytest.mark.data('codex')
def test_codex_heldback_is_its_valid_and_test_split():
    full, held, desc = heldback_facts('codex-m')
    assert 'valid+test' in desc and full.num_triples - held.sum() == 185_584  # the training split, every fact of it in the KG


def test_the_paired_difference_refuses_unpaired_scores():
    "A question scored by one executor only, or twice by one, is refused in one line instead of averaged or dropped."
    import pandas as pd
    from kgqa_nb.neural_symbolic import EXECUTORS, paired_difference
    a, b = EXECUTORS[:2]
    rows = [dict(id=i, n_hops=1 + i % 2, executor=e, setting='s', mrr=v) for i in range(6) for e, v in ((a, 0.5 + 0.05 * i), (b, 0.4))]
    ok = paired_difference(pd.DataFrame(rows), metrics=('mrr',))
    assert ok.n.tolist() == [6] and ok.difference.iloc[0] > 0
    with pytest.raises(ValueError, match='missing for some questions'):
        paired_difference(pd.DataFrame(rows[:-1]), metrics=('mrr',))
    with pytest.raises(ValueError):
        paired_difference(pd.DataFrame(rows + rows[:1]), metrics=('mrr',))
