"""Property tests for kgqa_nb.paths: labels, path counts and metapaths equal networkx path enumeration; PPR equals networkx.pagerank."""
import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from kgqa_nb.paths import (CONVENTIONS, SMALL_GRAPH, shortest_path_labels, shortest_path_metapaths, personalized_pagerank, seppr,
                           seed_path_stats, path_statistics, gt_sp_overlap, convention_edges)

GRAPH_TYPE = {'synth-kgqa': nx.MultiGraph, 'rog': nx.Graph, 'subgraphrag': nx.DiGraph}


def nx_graph(h, r, t, n, convention):
    G = GRAPH_TYPE[convention]()
    G.add_nodes_from(range(n))
    for i, (a, b) in enumerate(zip(h, t)):
        if convention == 'synth-kgqa': G.add_edge(a, b, key=i, i=i, r=r[i])
        else: G.add_edge(a, b, i=i, r=r[i])  # a simple graph: a later triple overwrites the pair, as the code bases do
    return G


def nx_paths(G, x, y):
    try: return list(nx.all_shortest_paths(G, x, y))
    except nx.NetworkXNoPath: return []


def enumerate_labels(h, r, t, n, seeds, answers, convention):
    "Reference: enumerate every shortest path with networkx, expanded over parallel triples as each code base does."
    G = nx_graph(h, r, t, n, convention)
    edges, count = set(), 0
    for s in set(seeds):
        for a in set(answers):
            ps = nx_paths(G, s, a)
            if convention == 'subgraphrag':  # both directions; the shorter one (both when tied), else whichever exists
                back = nx_paths(G, a, s) if a != s else []  # the empty path counts once (kgqa_nb.paths decides so)
                if ps and back:
                    L = min(len(ps[0]), len(back[0])); ps = [p for p in ps + back if len(p) == L]
                else: ps = ps or back
            for p in ps:
                for seq in itertools.product(*_steps(G, p, convention)):
                    edges |= set(seq); count += 1
    return sorted(edges), count


def _steps(G, p, convention):
    if convention == 'synth-kgqa': return [[G[x][y][k]['i'] for k in G[x][y]] for x, y in zip(p, p[1:])]
    return [[G[x][y]['i']] for x, y in zip(p, p[1:])]


@st.composite
def graphs(draw, max_nodes=9, max_edges=24):
    n = draw(st.integers(1, max_nodes))
    E = draw(st.integers(0, max_edges))
    h = draw(st.lists(st.integers(0, n - 1), min_size=E, max_size=E))
    t = draw(st.lists(st.integers(0, n - 1), min_size=E, max_size=E))
    if E and draw(st.booleans()):  # force some parallel and reversed triples
        k = draw(st.integers(0, E - 1)); h += [h[k], t[k]]; t += [t[k], h[k]]
    r = draw(st.lists(st.integers(0, 3), min_size=len(h), max_size=len(h)))
    seeds = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
    answers = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
    return np.array(h, np.int64), np.array(r, np.int64), np.array(t, np.int64), n, seeds, answers


@pytest.mark.parametrize('engine', ['python', 'numpy'])
@pytest.mark.parametrize('convention', CONVENTIONS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=graphs())
def test_labels_and_counts_match_enumeration(convention, engine, g):
    h, r, t, n, seeds, answers = g
    lab = shortest_path_labels((h, r, t), seeds, answers, convention, num_nodes=n, engine=engine)
    assert (lab.edges.tolist(), lab.n_paths) == enumerate_labels(h, r, t, n, seeds, answers, convention)
    assert lab.mask.shape == (len(h),)
    # per-pair rows sum to the total
    assert int(lab.pairs.n_paths.sum()) == lab.n_paths


@pytest.mark.parametrize('convention', CONVENTIONS)
def test_graphs_above_the_small_graph_threshold_match_enumeration(convention):
    rng = np.random.default_rng(7)
    for trial in range(4):
        n = 250; E = SMALL_GRAPH + 100 + 50 * trial
        h, t, r = rng.integers(0, n, E), rng.integers(0, n, E), rng.integers(0, 4, E)
        h[:20], t[:20] = t[20:40], h[20:40]  # some reversed and parallel triples
        seeds, answers = rng.integers(0, n, 2).tolist(), rng.integers(0, n, 2).tolist()
        ref = enumerate_labels(h, r, t, n, seeds, answers, convention)
        for engine in ('auto', 'python', 'numpy'):
            lab = shortest_path_labels((h, t), seeds, answers, convention, num_nodes=n, engine=engine)
            assert (lab.edges.tolist(), lab.n_paths) == ref, (engine, trial)


@pytest.mark.parametrize('engine', ['python', 'numpy'])
@pytest.mark.parametrize('convention', CONVENTIONS)
def test_seed_is_answer_counts_the_empty_path_once(convention, engine):
    # SubgraphRAG searches q->a and a->q; for q = a both are the one empty path, which must not be counted twice
    lab = shortest_path_labels(([0, 1], [1, 2]), [1, 0], [1], convention, engine=engine)
    assert lab.rows[0] == (1, 1, 0, 1, 0, 'both' if convention != 'subgraphrag' else 'q->a')
    assert lab.n_paths == 1 + 1 and lab.edges.tolist() == [0]


def test_pair_rows_are_plain_tuples_and_the_table_is_built_on_demand():
    lab = shortest_path_labels(([0, 1, 0], [1, 2, 2]), [0], [2, 1])
    assert lab.rows == [(0, 2, 1, 1, 1, 'both'), (0, 1, 1, 1, 1, 'both')]
    assert lab.pairs.to_dict('list') == dict(seed=[0, 0], answer=[2, 1], distance=[1, 1], n_paths=[1, 1], n_triples=[1, 1],
                                             direction=['both', 'both'])


def test_path_statistics_uses_given_labels():
    h, t = np.array([0, 1, 2, 0]), np.array([1, 2, 3, 3])
    lab = shortest_path_labels((h, t), [0], [3])
    st_ = path_statistics((h, t), [True, True, True, False], [0], 3, labels=lab)
    assert (st_['n_sp'], st_['per_seed'].sp_hops.tolist(), st_['per_seed'].shortcut.tolist()) == (1, [1], [True])
    fake = type(lab)(np.array([True, True, True, False]), 1, [(0, 3, 3, 1, 3, 'both')], 'synth-kgqa')  # stored labels are trusted
    assert path_statistics((h, t), [True, True, True, False], [0], 3, labels=fake)['pct_gt_in_sp'] == 100.0


@settings(max_examples=200, deadline=None)
@given(g=graphs())
def test_pair_distances_match_networkx(g):
    h, r, t, n, seeds, answers = g
    G = nx.MultiGraph(); G.add_nodes_from(range(n)); G.add_edges_from(zip(h.tolist(), t.tolist()))
    lab = shortest_path_labels((h, t), seeds, answers, num_nodes=n)
    for row in lab.pairs.itertuples():
        ref = nx.shortest_path_length(G, row.seed, row.answer) if nx.has_path(G, row.seed, row.answer) else -1
        assert row.distance == ref


@pytest.mark.parametrize('convention', ['synth-kgqa', 'rog'])
@settings(max_examples=200, deadline=None)
@given(g=graphs())
def test_metapaths_match_enumeration(convention, g):
    h, r, t, n, seeds, answers = g
    s, a = seeds[0], answers[0]
    G = nx_graph(h, r, t, n, convention)
    ref = set()
    for p in nx_paths(G, s, a):
        for seq in itertools.product(*_steps(G, p, convention)):
            ref.add(tuple(int(r[e]) + (0 if h[e] == x else 4) for e, x in zip(seq, p)))
    got, cut = shortest_path_metapaths((h, r, t), s, a, num_relations=4, convention=convention, num_nodes=n)
    assert not cut
    assert got == sorted(ref)


def test_large_counts_do_not_overflow():
    # a chain of 70 "diamonds" with 3 parallel triples per step: 6**70 shortest paths, far beyond int64
    h, t, nxt = [], [], 1
    cur = 0
    for _ in range(70):
        a, b, c = nxt, nxt + 1, nxt + 2; nxt += 3
        for _ in range(3): h += [cur, cur]; t += [a, b]
        h += [a, b]; t += [c, c]
        cur = c
    for engine in ('auto', 'python', 'numpy'):
        lab = shortest_path_labels((np.array(h), np.array(t)), [0], [cur], engine=engine)
        assert lab.n_paths == 6 ** 70
        assert lab.mask.all()


def test_bad_input_errors():
    with pytest.raises(ValueError, match='unknown convention'): shortest_path_labels(([0], [1]), [0], [1], 'nope')
    with pytest.raises(ValueError, match='unknown engine'): shortest_path_labels(([0], [1]), [0], [1], engine='gpu')
    with pytest.raises(ValueError, match='seed index out of range'): shortest_path_labels(([0], [1]), [-1], [1], engine='python')
    with pytest.raises(ValueError, match='answer index out of range'): shortest_path_labels(([0], [1]), [0], [5])
    with pytest.raises(ValueError, match='need relation types'): shortest_path_metapaths(([0], [1]), 0, 1)
    with pytest.raises(ValueError, match='differ in shape'): gt_sp_overlap([1, 0], [1])
    with pytest.raises(ValueError, match='gt_mask has shape'): seed_path_stats(([0], [1]), [True, False], [0], 1)


@settings(max_examples=150, deadline=None)
@given(g=graphs(max_nodes=12, max_edges=40), weighted=st.booleans())
def test_ppr_matches_networkx(g, weighted):
    h, r, t, n, seeds, _ = g
    w = (r + 1).astype(float) if weighted else None
    x = personalized_pagerank((h, t), n, seeds, weights=w)
    G = nx.MultiGraph(); G.add_nodes_from(range(n))
    for i, (a, b) in enumerate(zip(h.tolist(), t.tolist())): G.add_edge(a, b, weight=float(w[i]) if weighted else 1.0)
    pers = {s: 1.0 / len(set(seeds)) for s in set(seeds)}
    ref = nx.pagerank(G, alpha=0.85, personalization=pers, weight='weight')
    np.testing.assert_allclose(x, [ref[i] for i in range(n)], atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(g=graphs(max_nodes=12, max_edges=40))
def test_ppr_directed_matches_networkx(g):
    h, r, t, n, seeds, _ = g
    x = personalized_pagerank((h, t), n, seeds, directed=True)
    G = nx.MultiDiGraph(); G.add_nodes_from(range(n)); G.add_edges_from(zip(h.tolist(), t.tolist()))
    ref = nx.pagerank(G, personalization={s: 1 for s in set(seeds)})
    np.testing.assert_allclose(x, [ref[i] for i in range(n)], atol=1e-9)


def test_seppr_dense_reference():
    rng = np.random.default_rng(3)
    n = 30; h, t = rng.integers(0, n, 90), rng.integers(0, n, 90)
    A = np.zeros((n, n))
    for a, b in zip(h, t): A[a, b] += 1; A[b, a] += 1
    deg = A.sum(1); P = np.divide(A, deg[:, None], out=np.zeros_like(A), where=deg[:, None] > 0)
    x0 = np.zeros(n); x0[[2, 5]] = 0.5; x = x0.copy()
    for _ in range(5): x = 0.85 * (x @ P) + 0.15 * x0
    np.testing.assert_allclose(seppr((h, t), n, seeds=[2, 5]), x, atol=1e-12)
