"""Seed-subgraph sampling (Algorithm 1): determinism, the softmax(1/degree) law, excluded relations, limits, connectivity."""
import itertools, math
from collections import Counter

import numpy as np
import pytest
from scipy.stats import chisquare

from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.loaders import load_kg
from kgqa_nb.sampling import (DEFAULT_EXCLUDED_RELATIONS, inverse_degree_softmax, is_connected_sample, sample_seed_subgraph,
                              sample_seed_subgraphs, subgraph_text)


@pytest.fixture(scope='module')
def toy():
    return load_kg('toyworld')


def small_graph():
    # s has neighbours a (degree 1), b (degree 2), c (degree 4); b and c have further neighbours; one P31 edge from s
    T = [('S', 'P1', 'A'), ('S', 'P1', 'B'), ('B', 'P2', 'X'), ('S', 'P1', 'C'), ('C', 'P2', 'Y'), ('C', 'P2', 'Z'),
         ('Z', 'P2', 'C'), ('S', 'P31', 'T')]
    return KnowledgeGraph.from_id_triples(T, name='small')


def reference_law(kg, start, steps, degree_bias=True, excluded=('P31',)):
    """Exact distribution of the ordered node sequence after `steps` expansions, by enumerating Algorithm 1
    as written in the paper (z drawn from all of N, retry when z has no new neighbour)."""
    bad = {kg.relation_index[p] for p in excluded if p in kg.relation_index}
    nbrs = {v: set() for v in range(kg.num_entities)}
    for h, r, t in zip(kg.head, kg.rel, kg.tail):
        if r not in bad and h != t: nbrs[h].add(t); nbrs[t].add(h)
    deg = {v: sum(1 for h, r, t in zip(kg.head, kg.rel, kg.tail) if r not in bad and h != t and v in (h, t)) for v in nbrs}
    w = lambda v: math.exp(1 / deg[v]) if degree_bias else 1.0
    out = Counter()
    def rec(seq, p):
        if len(seq) == steps + 1: out[tuple(seq)] += p; return
        N = set(seq)
        fresh = [z for z in seq if nbrs[z] - N]
        if not fresh: out[tuple(seq)] += p; return
        Zw = sum(w(z) for z in seq); Fw = sum(w(z) for z in fresh)
        for z in fresh:
            pz = w(z) / Zw / (Fw / Zw)  # retrying until success = renormalising over nodes with new neighbours
            M = sorted(nbrs[z] - N); Mw = sum(w(m) for m in M)
            for n in M: rec(seq + [n], p * pz * w(n) / Mw)
    rec([start], 1.0)
    return out


def test_inverse_degree_softmax_values():
    p = inverse_degree_softmax([1, 2, 4])
    e = np.exp([1, 0.5, 0.25])
    np.testing.assert_allclose(p, e / e.sum())
    np.testing.assert_allclose(inverse_degree_softmax([1, 2, 4], degree_bias=False), [1 / 3] * 3)


@pytest.mark.parametrize('degree_bias', [True, False])
def test_first_neighbour_follows_softmax_inverse_degree(degree_bias):
    kg = small_graph()
    rng = np.random.default_rng(123)
    n = 20000
    second = Counter(kg.entity_ids[sample_seed_subgraph(kg, rng, start='S', max_nodes=2, degree_bias=degree_bias).nodes[1]]
                     for _ in range(n))
    assert 'T' not in second  # only reachable through P31
    d = {'A': 1, 'B': 2, 'C': 4}  # degrees without the excluded relation (C-Z twice: two triples)
    w = {k: (math.exp(1 / v) if degree_bias else 1.0) for k, v in d.items()}
    exp = np.array([w[k] / sum(w.values()) * n for k in 'ABC'])
    assert chisquare([second[k] for k in 'ABC'], exp).pvalue > 1e-3


@pytest.mark.parametrize('degree_bias', [True, False])
def test_three_step_sequences_match_exact_law(degree_bias):
    kg = small_graph()
    law = reference_law(kg, kg.entity('S'), 3, degree_bias)
    rng = np.random.default_rng(7)
    n = 20000
    seen = Counter(tuple(sample_seed_subgraph(kg, rng, start='S', max_nodes=4, degree_bias=degree_bias).nodes.tolist())
                   for _ in range(n))
    assert set(seen) <= set(law)
    keys = sorted(law)
    exp = np.array([law[k] * n for k in keys])
    assert abs(exp.sum() - n) < 1e-6
    assert chisquare([seen[k] for k in keys], exp).pvalue > 1e-3


def test_deterministic_per_seed(toy):
    a = sample_seed_subgraphs(toy, 30, seed=5)
    b = sample_seed_subgraphs(toy, 30, seed=5)
    c = sample_seed_subgraphs(toy, 30, seed=6)
    assert [s.edges.tolist() for s in a] == [s.edges.tolist() for s in b]
    assert [s.nodes.tolist() for s in a] == [s.nodes.tolist() for s in b]
    assert [s.edges.tolist() for s in a] != [s.edges.tolist() for s in c]


@pytest.mark.parametrize('excluded', [DEFAULT_EXCLUDED_RELATIONS, ('P31', 'P21', 'P106', 'P27')])
def test_excluded_relations_never_sampled(toy, excluded):
    bad = {toy.relation_index[p] for p in excluded if p in toy.relation_index}
    assert bad
    for s in sample_seed_subgraphs(toy, 200, seed=1, excluded_relations=excluded):
        assert not bad & set(toy.rel[s.edges].tolist())


@pytest.mark.parametrize('max_nodes,max_edges', [(10, 30), (4, 5), (20, 8), (2, 1), (6, 100)])
def test_limits_connectivity_and_membership(toy, max_nodes, max_edges):
    for s in sample_seed_subgraphs(toy, 100, seed=2, max_nodes=max_nodes, max_edges=max_edges):
        assert len(s.nodes) <= max_nodes and 1 <= len(s.edges) <= max_edges
        assert len(set(s.nodes.tolist())) == len(s.nodes) and s.nodes[0] == s.start
        assert is_connected_sample(toy, s.edges)
        ends = set(toy.head[s.edges].tolist()) | set(toy.tail[s.edges].tolist())
        assert ends == s.node_set()  # every entity is reached through a kept triple, and no triple leaves the set
        assert np.all(np.diff(s.edges) > 0)


def test_all_induced_edges_added_when_under_limit(toy):
    # with a generous edge limit, Q is exactly the induced subgraph on N (without excluded relations and self-loops)
    bad = {toy.relation_index[p] for p in DEFAULT_EXCLUDED_RELATIONS if p in toy.relation_index}
    for s in sample_seed_subgraphs(toy, 50, seed=3, max_edges=10_000):
        inN = np.zeros(toy.num_entities, bool); inN[s.nodes] = True
        keep = inN[toy.head] & inN[toy.tail] & ~np.isin(toy.rel, list(bad)) & (toy.head != toy.tail)
        assert s.edges.tolist() == np.flatnonzero(keep).tolist()


def test_exhausted_component_stops():
    kg = KnowledgeGraph.from_id_triples([('Q1', 'P1', 'Q2'), ('Q3', 'P1', 'Q4')])
    s = sample_seed_subgraph(kg, np.random.default_rng(0), start='Q1', max_nodes=10)
    assert s.nodes.tolist() == [0, 1] and s.edges.tolist() == [0]


def test_bad_arguments():
    kg = small_graph()
    with pytest.raises(ValueError, match='max_nodes'):
        sample_seed_subgraph(kg, np.random.default_rng(0), max_nodes=1)
    only_excluded = KnowledgeGraph.from_id_triples([('Q1', 'P31', 'Q2')])
    with pytest.raises(ValueError, match='no triple outside'):
        sample_seed_subgraph(only_excluded, np.random.default_rng(0))


def test_subgraph_text_round_trips_through_parser(toy):
    from kgqa_nb.generate import parse_graph_text
    for s in sample_seed_subgraphs(toy, 50, seed=4):
        assert parse_graph_text(subgraph_text(toy, s.edges)) == [toy.triple_text(int(e)) for e in s.edges]


def test_allowed_view_is_cached_by_the_module_not_on_the_graph():
    from kgqa_nb import sampling
    kg = small_graph()
    a = sample_seed_subgraph(kg, np.random.default_rng(0))
    view = sampling._VIEWS[kg][tuple(sorted(DEFAULT_EXCLUDED_RELATIONS))]
    b = sample_seed_subgraph(kg, np.random.default_rng(0))
    assert sampling._VIEWS[kg][tuple(sorted(DEFAULT_EXCLUDED_RELATIONS))] is view  # the second sample reuses the view
    assert a.edges.tolist() == b.edges.tolist()
    assert not any('sampling' in k for k in vars(kg))  # nothing stashed on the graph
    n = len(sampling._VIEWS); del kg
    import gc; gc.collect()
    assert len(sampling._VIEWS) == n - 1  # the view goes with its graph
