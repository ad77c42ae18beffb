"Property tests of the one evaluator (kgqa_nb.metrics): every metric recomputed by brute force on random inputs."
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kgqa_nb.metrics import (answer_hit, exact_match, filtered_rank, filtered_ranks, normalize_answer, pearson,
                             ranking_metrics, set_prf)

# ---------------------------------------------------------------- filtered ranks (ties count against the target)

# few distinct values so that ties are frequent
score_rows = st.integers(1, 12).flatmap(lambda V: st.tuples(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, -3.0]), min_size=V, max_size=V),
    st.integers(0, V - 1), st.sets(st.integers(0, V - 1))))

def brute_rank(scores, target, filtered):
    "1 + #candidates c != target, c not filtered, scores[c] >= scores[target], by looping."
    return 1 + sum(1 for c, s in enumerate(scores) if c != target and c not in filtered and s >= scores[target])

@settings(max_examples=600, derandomize=True, deadline=None)
@given(score_rows)
def test_filtered_rank_equals_brute_force(row):
    scores, target, filtered = row
    assert filtered_rank(scores, target, sorted(filtered)) == brute_rank(scores, target, filtered)

@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.integers(1, 9).flatmap(lambda V: st.lists(st.tuples(
    st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=V, max_size=V), st.integers(0, V - 1), st.sets(st.integers(0, V - 1))),
    min_size=1, max_size=6)))
def test_batched_ranks_equal_one_query_at_a_time(rows):
    S = np.array([r[0] for r in rows]); T = np.array([r[1] for r in rows])
    fr = [i for i, r in enumerate(rows) for _ in r[2]]; fc = [c for r in rows for c in r[2]]
    got = filtered_ranks(S, T, fr, fc)
    assert got.tolist() == [brute_rank(s, t, f) for s, t, f in rows]

def test_rank_bounds_and_extremes():
    assert filtered_rank([1.0] * 7, 3) == 7  # all tied: worst rank
    assert filtered_rank([1.0] * 7, 3, filtered=[0, 1, 2, 4, 5, 6]) == 1  # everything else filtered
    assert filtered_rank([0.0, 2.0, 1.0], 1) == 1
    assert filtered_rank([0.0, 2.0, 1.0], 1, filtered=[1]) == 1  # the target itself is never filtered out

@pytest.mark.parametrize('call,err', [
    (lambda: filtered_rank([[0.1, 0.2]], 0), 'one vector'),
    (lambda: filtered_ranks([0.1, 0.2], [0]), 'matrix'),
    (lambda: filtered_ranks([[0.1, 0.2]], [0.0]), 'integer'),
    (lambda: filtered_ranks([[0.1, 0.2]], [0, 1]), 'integer indices'),
    (lambda: filtered_ranks([[0.1, 0.2]], [-1]), 'target outside'),
    (lambda: filtered_ranks([[0.1, 0.2]], [0], [0]), 'both'),
    (lambda: filtered_ranks([[0.1, 0.2]], [0], [0], [2]), 'outside'),
    (lambda: filtered_ranks([[0.1, 0.2]], [0], [0, 0], [1]), 'same length'),
    (lambda: filtered_ranks([[np.nan, 0.2]], [0]), 'NaN'),
])
def test_rank_input_checks(call, err):
    with pytest.raises((ValueError, IndexError), match=err): call()

# ---------------------------------------------------------------- MRR and Hits@k

@settings(max_examples=400, derandomize=True, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.sets(st.integers(1, 20), min_size=1, max_size=4))
def test_mrr_and_hits_equal_brute_force(ranks, ks):
    ks = tuple(sorted(ks))
    m = ranking_metrics(ranks, ks)
    assert m['mrr'] == pytest.approx(sum(1 / r for r in ranks) / len(ranks))
    for k in ks: assert m[f'hits@{k}'] == pytest.approx(sum(r <= k for r in ranks) / len(ranks))
    assert list(m) == ['mrr'] + [f'hits@{k}' for k in ks]

@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.lists(score_rows, min_size=1, max_size=10))
def test_ranks_then_metrics_pipeline(rows):
    "Ranks from random tied scores feed MRR/Hits@k; Hits@k never decreases in k and MRR is within (0, 1]."
    ranks = [filtered_rank(s, t, sorted(f)) for s, t, f in rows]
    m = ranking_metrics(ranks, (1, 3, 10))
    assert 0 < m['mrr'] <= 1 and m['hits@1'] <= m['hits@3'] <= m['hits@10']
    assert m['hits@1'] <= m['mrr']

@pytest.mark.parametrize('ranks,ks', [([], (1,)), ([0], (1,)), ([1, np.inf], (1,)), ([np.nan], (1,)), ([1], (0,)), ([1], (1.5,))])
def test_ranking_metrics_input_checks(ranks, ks):
    with pytest.raises(ValueError): ranking_metrics(ranks, ks)

# ---------------------------------------------------------------- set precision / recall / F1, exact match

ids = st.sets(st.sampled_from([f'Q{i}' for i in range(8)]), max_size=8)

@settings(max_examples=500, derandomize=True, deadline=None)
@given(ids, ids.filter(bool), st.sampled_from([list, tuple, set, sorted]))
def test_set_prf_and_exact_match_equal_brute_force(pred, gold, kind):
    p, r, f = set_prf(kind(pred), kind(gold))
    tp = sum(1 for x in pred if x in gold)
    want_p = tp / len(pred) if pred else 0.0
    want_r = tp / len(gold)
    want_f = 0.0 if tp == 0 else 2 / (1 / want_p + 1 / want_r)
    assert (p, r, f) == pytest.approx((want_p, want_r, want_f))
    assert 0 <= f <= 1 and min(p, r) - 1e-12 <= f <= max(p, r) + 1e-12
    assert exact_match(kind(pred), kind(gold)) == (pred == gold) == (f == 1.0)

@settings(max_examples=200, derandomize=True, deadline=None)
@given(ids, ids.filter(bool), st.integers(1, 3))
def test_duplicates_do_not_count_twice(pred, gold, times):
    assert set_prf(list(pred) * times, list(gold) * times) == set_prf(pred, gold)

@pytest.mark.parametrize('fn', [set_prf, exact_match])
def test_set_metric_input_checks(fn):
    with pytest.raises(ValueError, match='empty'): fn(['Q1'], [])
    with pytest.raises(TypeError, match='pred must be a collection'): fn('Q1', ['Q1'])
    with pytest.raises(TypeError, match='gold must be a collection'): fn(['Q1'], 'Q1')
    with pytest.raises(TypeError, match='gold must be a collection'): fn(['Q1'], None)
    with pytest.raises(TypeError, match='must hold strings'): fn([1], ['Q1'])

# ---------------------------------------------------------------- answer hit

words = st.sampled_from(['the', 'a', 'Paris', 'paris', 'PARIS!', 'New', 'York', 'City', 'of', 'Q1', 'Q2', '-', ''])
labels = st.lists(words, min_size=0, max_size=4).map(' '.join)

def brute_hit(pred, gold_ids, gold_labels):
    if any(p == g for p in pred for g in gold_ids): return True
    for p in pred:
        for g in gold_labels:
            a, b = normalize_answer(p), normalize_answer(g)
            if a and b and (a in b or b in a): return True
    return False

@settings(max_examples=600, derandomize=True, deadline=None)
@given(st.lists(labels, max_size=3), st.lists(st.sampled_from(['Q1', 'Q2', 'Q3']), max_size=2), st.lists(labels, max_size=3))
def test_answer_hit_equals_brute_force(pred, gold_ids, gold_labels):
    if not gold_ids and not gold_labels:
        with pytest.raises(ValueError, match='no gold answer'): answer_hit(pred, gold_ids, gold_labels)
        return
    assert answer_hit(pred, gold_ids, gold_labels) == brute_hit(pred, gold_ids, gold_labels)
    assert answer_hit(pred, set(gold_ids), tuple(gold_labels)) == brute_hit(pred, gold_ids, gold_labels)

def test_answer_hit_semantics_of_the_old_readers_is_hit():
    "The cases readers.is_hit (f3c6a22) decided, decided the same way."
    assert answer_hit(['Q646'], ['Q646'], ['South Shields'])
    assert answer_hit(['south shields'], ['Q646'], ['South Shields'])
    assert not answer_hit([], ['Q646'], ['South Shields'])
    assert not answer_hit(['Q64'], ['Q646'], ['South Shields'])  # IDs match exactly, never by containment
    assert answer_hit(['the netherlands'], {'Q55'}, ['Kingdom of the Netherlands'])
    assert not answer_hit(['the'], ['Q55'], ['The Hague'])  # a prediction that normalises to nothing matches nothing

def test_answer_hit_refuses_a_bare_string():
    "'Paris' iterated as characters would hit almost anything; the check refuses it."
    with pytest.raises(TypeError, match='pred must be a collection'): answer_hit('Paris', [], ['Paris'])
    with pytest.raises(TypeError, match='gold_labels must be a collection'): answer_hit(['Paris'], [], 'Paris')
    with pytest.raises(TypeError, match='must hold strings'): answer_hit([None], ['Q1'])

@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(max_size=30))
def test_normalize_answer_is_idempotent(s):
    n = normalize_answer(s)
    assert normalize_answer(n) == n and n == n.strip() and '  ' not in n

def test_pearson_matches_numpy():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=20), rng.normal(size=20)
    assert pearson(x, y)[0] == pytest.approx(np.corrcoef(x, y)[0, 1])
    with pytest.raises(ValueError): pearson([1, 2, 3], [1, 2])
