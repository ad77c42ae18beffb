"""Property tests of the isomorphism-type classifier: the name is a complete invariant of coloured answer trees."""
import random
from collections import defaultdict

import networkx as nx
import pytest
from hypothesis import given, settings, strategies as st

from kgqa_nb.isomorphism import (DUTT_IDS, GTSQA_TEMPLATES, IsomorphismError, classify_answer_subgraph, colored_trees,
                                 enumerate_types, template_edges, tree_from_name)


def colored_graph(edges, seeds, answer) -> nx.Graph:
    g = nx.Graph()
    g.add_edges_from((e[0], e[-1]) for e in edges)
    seeds = set(seeds)
    for n in g.nodes: g.nodes[n]['c'] = 'seed' if n in seeds else 'answer' if n == answer else 'mid'
    return g


def iso(a, b) -> bool:
    return nx.is_isomorphic(colored_graph(*a), colored_graph(*b), node_match=lambda x, y: x['c'] == y['c'])


def name(edges, seeds, answer) -> str:
    return classify_answer_subgraph(edges, seeds, answer).graph_isomorphism


@st.composite
def trees(draw, max_edges=8, inner_seeds=True):
    "A random coloured tree (edges, seeds, answer) that passes the data-quality rules."
    n = draw(st.integers(1, max_edges))
    parent = [None] + [draw(st.integers(0, i - 1)) for i in range(1, n + 1)]
    edges = [(i, parent[i]) for i in range(1, n + 1)]
    deg = [0] * (n + 1)
    for u, v in edges: deg[u] += 1; deg[v] += 1
    answer = draw(st.integers(0, n))
    seeds = [v for v in range(n + 1) if v != answer and (deg[v] == 1 or (inner_seeds and draw(st.booleans())))]
    return edges, seeds, answer


@st.composite
def relabelled(draw, tree):
    "The same tree with permuted node ids, shuffled triple order and randomly flipped edge directions."
    edges, seeds, answer = tree
    nodes = sorted({v for e in edges for v in e})
    ids = draw(st.permutations([f'Node {i} (Q{i + 1})' for i in range(len(nodes))]))
    m = dict(zip(nodes, ids))
    flips = draw(st.lists(st.booleans(), min_size=len(edges), max_size=len(edges)))
    out = [(m[v], 'rel (P1)', m[u]) if f else (m[u], 'rel (P1)', m[v]) for (u, v), f in zip(edges, flips)]
    out = draw(st.permutations(out))
    return list(out), [m[s] for s in seeds], m[answer]


@pytest.mark.parametrize('tname', list(GTSQA_TEMPLATES))
def test_gtsqa_templates(tname):
    edges, seeds, answer = template_edges(tname)
    r = classify_answer_subgraph(edges, seeds, answer)
    assert r.graph_isomorphism == tname
    assert r.n_hops == nx.eccentricity(nx.Graph(edges), answer)
    assert r.dutt_id == DUTT_IDS.get(tname)
    assert name(*tree_from_name(tname)) == tname


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(GTSQA_TEMPLATES)), st.data())
def test_gtsqa_templates_relabelled(tname, data):
    assert name(*data.draw(relabelled(template_edges(tname)))) == tname


@settings(max_examples=400, deadline=None)
@given(trees(), st.data())
def test_invariant_under_relabelling(tree, data):
    r0 = classify_answer_subgraph(*tree)
    r1 = classify_answer_subgraph(*data.draw(relabelled(tree)))
    assert r0 == r1
    assert r0.n_hops == nx.eccentricity(nx.Graph(tree[0]), tree[2])


@settings(max_examples=400, deadline=None)
@given(trees(max_edges=6), trees(max_edges=6))
def test_equal_names_iff_isomorphic(a, b):
    assert (name(*a) == name(*b)) == iso(a, b)


@settings(max_examples=300, deadline=None)
@given(trees())
def test_name_roundtrip(tree):
    n = name(*tree)
    rep = tree_from_name(n)
    assert name(*rep) == n
    assert iso(rep, tree)


@settings(max_examples=200, deadline=None)
@given(trees(), st.data())
def test_rejections(tree, data):
    edges, seeds, answer = tree
    nodes = sorted({v for e in edges for v in e})
    u, v = data.draw(st.sampled_from([(a, b) for a in nodes for b in nodes if a < b]))
    if any({u, v} == set(e) for e in edges):
        par = edges + [(u, 'another relation', v)]  # a second triple on an existing edge
        with pytest.raises(IsomorphismError, match='cyclic'): classify_answer_subgraph(par, seeds, answer)
        assert classify_answer_subgraph(par, seeds, answer, collapse_parallel=True) == classify_answer_subgraph(*tree)
    else:
        with pytest.raises(IsomorphismError) as e: classify_answer_subgraph(edges + [(u, v)], seeds, answer)
        assert e.value.reason == 'cyclic'
    w = data.draw(st.sampled_from(nodes))
    with pytest.raises(IsomorphismError) as e: classify_answer_subgraph(edges + [(w, 'dangling')], seeds, answer)
    assert e.value.reason == 'hanging_branch'
    with pytest.raises(IsomorphismError) as e: classify_answer_subgraph(edges + [('x', 'y')], seeds + ['x'], answer)
    assert e.value.reason == 'disconnected'
    with pytest.raises(IsomorphismError) as e: classify_answer_subgraph(edges, seeds + [answer], answer)
    assert e.value.reason == 'answer_is_seed'


@pytest.mark.parametrize('inner_seeds', [False, True])
def test_exhaustive_up_to_7_edges(inner_seeds):
    "Every coloured tree up to 7 edges: exactly one name per isomorphism class, and no name shared by two classes."
    by_name, by_wl = defaultdict(list), defaultdict(set)
    n_trees = 0
    for n_edges in range(1, 8):
        for edges, seeds, answer in colored_trees(n_edges, inner_seeds):
            t = (edges, seeds, answer); nm = name(*t); n_trees += 1
            if nm not in by_name: by_name[nm].append(t)
            elif not iso(by_name[nm][0], t):  # a name covers only one class
                raise AssertionError(f'{nm} names two non-isomorphic trees: {by_name[nm][0]} and {t}')
            wl = nx.weisfeiler_lehman_graph_hash(colored_graph(*t), node_attr='c', iterations=4)
            by_wl[wl].add(nm)
    # isomorphic trees have equal WL hashes, so two names inside one WL bucket must name non-isomorphic trees
    for names in by_wl.values():
        for a in names:
            for b in names:
                if a < b: assert not iso(by_name[a][0], by_name[b][0]), (a, b)
    for nm in by_name: assert name(*tree_from_name(nm)) == nm
    assert n_trees > len(by_name)
    counts = [len(enumerate_types(n, inner_seeds)) for n in range(1, 8)]
    assert sum(counts) == len(by_name)
    if not inner_seeds: assert counts == [1, 2, 4, 9, 20, 48, 115]  # rooted trees with n+1 nodes (OEIS A000081)


def test_large_trees():
    chain = [(i, i + 1) for i in range(5000)]
    assert classify_answer_subgraph(chain, [0], 5000) == ('(5000)', 5000, None)
    rng = random.Random(0)
    edges = [(i, rng.randrange(i)) for i in range(1, 3000)]
    deg = defaultdict(int)
    for u, v in edges: deg[u] += 1; deg[v] += 1
    seeds = [v for v in range(1, 3000) if deg[v] == 1]
    r = classify_answer_subgraph(edges, seeds, 0)
    assert name(*tree_from_name(r.graph_isomorphism)) == r.graph_isomorphism
    perm = list(range(3000)); rng.shuffle(perm)
    assert name([(perm[v], perm[u]) for u, v in edges], [perm[s] for s in seeds], perm[0]) == r.graph_isomorphism


def test_bad_input():
    with pytest.raises(TypeError, match='single string'): classify_answer_subgraph([('s', 'A')], 's', 'A')
    with pytest.raises(ValueError, match='head, relation, tail'): classify_answer_subgraph([('s',)], ['s'], 'A')
    with pytest.raises(IsomorphismError) as e: classify_answer_subgraph([], ['s'], 'A')
    assert e.value.reason == 'empty'
    for bad in ['(1)(', 'abc', '(1)()', '((1)(1)1)']:
        with pytest.raises(ValueError, match='not a type name'): tree_from_name(bad)
