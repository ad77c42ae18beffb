"""Question-specific graphs: ground truth always present, caps respected, labels right, cache resumable and deterministic."""
import importlib.util

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kgqa_nb.kg import KnowledgeGraph, UnknownIdError
from kgqa_nb.loaders import load_codex_m
from kgqa_nb.paths import CONVENTIONS, shortest_path_labels
from kgqa_nb.qgraphs import (QuestionGraph, QuestionGraphs, build_question_graph, build_question_graphs, load_question_graph,
                             record_question, random_tree_question, metapath_edges, triple_ids, khop_edges, ppr_prune)
import kgqa_nb.qgraphs as qgm


@pytest.fixture(scope='module')
def kg():
    if importlib.util.find_spec('kgqa_nb.toyworld') is not None:
        from kgqa_nb.toyworld import make_toyworld
        return make_toyworld()
    return load_codex_m()


@pytest.fixture(scope='module')
def records(kg):
    return [random_tree_question(kg, n_seeds=1 + i % 3, hops=1 + i % 4, seed=100 + i, qid=i) for i in range(24)]


def keys(kg, h, r, t):
    return (np.asarray(h) * kg.num_relations + np.asarray(r)) * kg.num_entities + np.asarray(t)


CAPS = dict(n_nodes=300, max_triples=2000, max_khop_edges=8000, n_confounder_max=50)


def test_ground_truth_present_and_caps_respected(kg, records):
    for rec in records:
        q = record_question(kg, rec)
        qg = build_question_graph(kg, **q, **CAPS, seed=1, qid=rec['id'])
        have = set(keys(kg, qg.h, qg.r, qg.t).tolist())
        gt = set(keys(kg, *q['gt_triples'].T).tolist()); full = set(keys(kg, *q['full_answer_triples'].T).tolist())
        assert gt <= have and full <= have
        # triple_scores marks exactly the ground-truth triples
        assert set(keys(kg, qg.h, qg.r, qg.t)[qg.triple_scores == 1].tolist()) == gt
        i = qg.info
        assert i['n_khop_edges'] <= CAPS['max_khop_edges']
        assert i['n_ppr_triples'] <= CAPS['max_triples'] and i['n_ppr_nodes'] <= CAPS['n_nodes']
        assert i['n_confounders'] <= CAPS['n_confounder_max'] * i['n_metapaths']
        assert len(qg) <= CAPS['max_triples'] + len(gt | full) + CAPS['n_confounder_max'] * i['n_metapaths'] + i['n_sp_expansion']
        assert not (qg.readded & (qg.triple_scores == 0)).any() and int(qg.readded.sum()) == i['n_gt_readded']  # only GT is re-added
        assert set(qg.seeds.tolist()) == set(q['seeds']) and qg.triple_scores_sp.any()


def test_sp_labels_match_networkx_enumeration(kg, records):
    for rec in records[:12]:
        q = record_question(kg, rec)
        qg = build_question_graph(kg, **q, n_nodes=60, max_triples=150, n_confounder_max=10, seed=2)
        G = nx.MultiGraph()
        for e, (a, b) in enumerate(zip(qg.h.tolist(), qg.t.tolist())): G.add_edge(a, b, key=e)
        ref = set()
        for s in qg.seeds.tolist():
            for a in qg.answers.tolist():
                if s in G and a in G and nx.has_path(G, s, a):
                    for p in nx.all_shortest_paths(G, s, a):
                        for x, y in zip(p, p[1:]): ref |= set(G[x][y])
        assert set(np.flatnonzero(qg.triple_scores_sp).tolist()) == ref


def test_stored_sp_labels_of_every_convention_equal_recomputed(kg, records, tmp_path):
    for rec in records[:6]:
        qg = build_question_graph(kg, **record_question(kg, rec), **CAPS, seed=3)
        back = load_question_graph(qg.save(tmp_path / 'q.npz'))
        nodes = qg.nodes; loc = lambda a: np.searchsorted(nodes, a)
        for conv in CONVENTIONS:
            lab = shortest_path_labels((loc(qg.h), loc(qg.t)), loc(qg.seeds), loc(qg.answers), conv, len(nodes))
            for g in (qg, back):
                assert np.array_equal(g.sp_mask(conv), lab.mask) and g.sp[conv].n_paths == lab.n_paths
                assert [r[:2] for r in g.sp[conv].rows] == [(int(nodes[s]), int(nodes[a])) for s, a, *_ in lab.rows]  # KG indices
                assert [r[2:] for r in g.sp[conv].rows] == [r[2:] for r in lab.rows]


def test_loading_never_recomputes_stored_labels(kg, records, tmp_path, monkeypatch):
    qg = build_question_graph(kg, **record_question(kg, records[2]), **CAPS)
    p = qg.save(tmp_path / 'q.npz')
    monkeypatch.setattr(qgm, 'shortest_path_labels', lambda *a, **k: (_ for _ in ()).throw(AssertionError('recomputed')))
    assert np.array_equal(load_question_graph(p).triple_scores_sp, qg.triple_scores_sp)


def test_a_file_without_stored_labels_still_loads(kg, records, tmp_path):
    qg = build_question_graph(kg, **record_question(kg, records[2]), **CAPS)
    p = tmp_path / 'old.npz'  # the layout before SP labels of every convention were stored
    np.savez(p, id=np.array(qg.id), h=qg.h, r=qg.r, t=qg.t, triple_scores=qg.triple_scores, triple_scores_sp=qg.triple_scores_sp,
             seeds=qg.seeds, answers=qg.answers, info=np.array('{}'))
    old = load_question_graph(p)
    assert all(np.array_equal(old.sp_mask(c), qg.sp_mask(c)) for c in CONVENTIONS)


def test_khop_cap_prefers_near_triples(kg, records):
    s = record_question(kg, records[3])['seeds']
    full, _ = khop_edges(kg, s, 3)
    capped, cut = khop_edges(kg, s, 3, max_edges=len(full) // 2, rng=np.random.default_rng(0))
    assert cut and len(capped) == len(full) // 2 and set(capped.tolist()) <= set(full.tolist())
    one, _ = khop_edges(kg, s, 1)
    if len(one) <= len(full) // 2: assert set(one.tolist()) <= set(capped.tolist())


@settings(max_examples=40, deadline=None)
@given(st.integers(5, 60), st.integers(0, 200), st.integers(1, 4), st.integers(0, 10_000))
def test_khop_equals_networkx(n, m, k, seed):
    "The k-hop neighbourhood is every triple with an end within k - 1 undirected hops of a seed (networkx BFS, multigraph)."
    r = np.random.default_rng(seed)
    h, t = r.integers(0, n, m), r.integers(0, n, m)
    g = KnowledgeGraph(h, np.zeros(m, np.int64), t, [f'Q{i}' for i in range(n)], ['P1'])
    seeds = np.unique(r.integers(0, n, 1 + seed % 3))
    G = nx.MultiGraph(); G.add_nodes_from(range(n)); G.add_edges_from(zip(h.tolist(), t.tolist()))
    near = set()
    for s in seeds.tolist(): near |= set(nx.single_source_shortest_path_length(G, s, cutoff=k - 1))
    want = [e for e in range(m) if h[e] in near or t[e] in near]
    got, cut = khop_edges(g, seeds, k)
    assert got.tolist() == want and not cut
    if len(want) > 2:  # under a cap: every triple of the levels that fit, and a sample of the first level that does not
        d = {}
        for s in seeds.tolist():
            for v, dv in nx.single_source_shortest_path_length(G, s, cutoff=k - 1).items(): d[v] = min(d.get(v, dv), dv)
        lvl = {e: min(d.get(int(h[e]), k), d.get(int(t[e]), k)) for e in want}
        cap = len(want) // 2
        capped, cut = khop_edges(g, seeds, k, max_edges=cap, rng=np.random.default_rng(seed))
        L = min(l for l in range(k) if sum(v <= l for v in lvl.values()) > cap)
        assert cut and len(capped) == cap and len(set(capped.tolist())) == cap
        assert {e for e, v in lvl.items() if v < L} <= set(capped.tolist()) <= {e for e, v in lvl.items() if v <= L}


def test_ppr_prune_keeps_only_edges_among_ranked(kg, records):
    s = record_question(kg, records[0])['seeds']
    hood, _ = khop_edges(kg, s, 2)
    kept, ranked = ppr_prune(kg, hood, s, n_nodes=100, max_triples=300, drop_block=10, min_nodes=20)
    assert len(kept) <= 300 and len(ranked) <= 100
    ok = np.isin(kg.head[kept], ranked) & np.isin(kg.tail[kept], ranked)
    assert ok.all() or len(ranked) < 30  # sampling fallback only when few entities are left


def test_ground_truth_missing_from_kg_is_added(kg, records):
    q = record_question(kg, records[1])
    dropped = kg.drop_triples(triple_ids(kg, q['gt_triples'][:1]))  # the first GT triple is gone from this KG
    qg = build_question_graph(dropped, q['seeds'], q['answers'], q['gt_triples'], **CAPS)
    assert qg.info['n_gt_missing_from_kg'] == 1
    assert set(keys(kg, *q['gt_triples'].T).tolist()) <= set(keys(kg, qg.h, qg.r, qg.t).tolist())


def test_bad_records(kg, records):
    with pytest.raises(UnknownIdError, match='unknown relation'):
        record_question(kg, {**records[0], 'answer_subgraph': [[records[0]['seed_entities'][0], 'nope (P0)', records[0]['answer_node']]]})
    with pytest.raises(ValueError, match='lacks'): record_question(kg, {**records[0], 'answer_node': None})
    with pytest.raises(ValueError, match='at least one seed'): build_question_graph(kg, [], [0], np.zeros((0, 3)))


def test_cache_resumable_deterministic_atomic(kg, records, tmp_path, monkeypatch):
    recs = records[:8]
    qgs = build_question_graphs(kg, recs, tmp_path / 'a', **CAPS)
    assert isinstance(qgs, QuestionGraphs) and len(qgs) == len(recs)
    assert [g.id for g in qgs] == [str(r['id']) for r in recs] and isinstance(qgs[0], QuestionGraph)
    paths = qgs.paths; folder = paths[0].parent
    assert [p.name.split('-')[0] for p in paths] == [str(r['id']) for r in recs]
    before = {p: p.stat().st_mtime_ns for p in paths}
    paths[3].unlink()  # an interrupted run: one question missing
    built = []
    orig = qgm.build_question_graph
    monkeypatch.setattr(qgm, 'build_question_graph', lambda *a, **k: built.append(k['qid']) or orig(*a, **k))
    paths2 = build_question_graphs(kg, recs, tmp_path / 'a', **CAPS).paths
    assert built == [str(recs[3]['id'])] and paths2 == paths
    assert all(p.stat().st_mtime_ns == before[p] for p in paths2 if p != paths[3])
    # a fresh folder, questions in another order: identical graphs
    other = build_question_graphs(kg, recs[::-1], tmp_path / 'b', **CAPS)[::-1]
    for a, b in zip(build_question_graphs(kg, recs, tmp_path / 'a', **CAPS), other):
        for f in ('h', 'r', 't', 'triple_scores', 'triple_scores_sp'): assert np.array_equal(getattr(a, f), getattr(b, f))
    # other parameters: another folder, the first untouched
    built.clear()
    assert build_question_graphs(kg, recs[:1], tmp_path / 'a', **{**CAPS, 'n_nodes': 10}).paths[0].parent != folder
    assert built == [str(recs[0]['id'])]
    # the same id with another question (another dataset) is another file
    changed = {**recs[0], 'answer_subgraph': recs[1]['answer_subgraph'], 'seed_entities': recs[1]['seed_entities'],
               'answer_node': recs[1]['answer_node'], 'full_answer_subgraph_wikikg2': recs[1]['full_answer_subgraph_wikikg2']}
    assert build_question_graphs(kg, [changed], tmp_path / 'a', **CAPS).paths[0] not in paths
    # a crash while writing leaves no file behind
    names = sorted(x.name for x in folder.iterdir())
    monkeypatch.setattr(qgm.np, 'savez', lambda *a, **k: (_ for _ in ()).throw(OSError('disk full')))
    with pytest.raises(OSError): build_question_graphs(kg, records[8:9], tmp_path / 'a', **CAPS)
    assert sorted(x.name for x in folder.iterdir()) == names


def test_a_kg_with_the_same_name_but_other_triples_gets_other_graphs(kg, records, tmp_path):
    recs = records[:2]
    a = build_question_graphs(kg, recs, tmp_path, **CAPS)
    other = kg.drop_triples(np.array([kg.num_triples - 1]), name=kg.name)  # same name, one triple fewer
    assert other.name == kg.name
    b = build_question_graphs(other, recs, tmp_path, **CAPS)
    assert a.paths[0].parent != b.paths[0].parent


def test_to_pyg(kg, records):
    q = record_question(kg, records[5]); qg = build_question_graph(kg, **q, **CAPS)
    d = qg.to_pyg()
    assert d.edge_index.shape == (2, len(qg)) and d.num_nodes == len(qg.nodes)
    assert np.array_equal(d.node_ids[d.edge_index[1]].numpy(), qg.t) and np.array_equal(d.edge_type.numpy(), qg.r)
    assert int(d.y.sum()) == int(qg.triple_scores.sum()) and int(d.answer_mask.sum()) == len(qg.answers)


def brute_metapath(kg, start, mp):
    "Reference: list every walk from start following mp (small KGs only)."
    R = kg.num_relations
    walks = [((), start)]
    complete, partial = set(), set()
    for depth, code in enumerate(mp):
        nxt = []
        for used, v in walks:
            for e in range(kg.num_triples):
                if kg.rel[e] != code % R: continue
                a, b = (kg.head[e], kg.tail[e]) if code < R else (kg.tail[e], kg.head[e])
                if a == v: nxt.append((used + (e,), b))
        walks = nxt
        for used, _ in walks: partial |= set(used)
    for used, _ in walks: complete |= set(used)
    return sorted(complete), sorted(partial - complete)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 8), E=st.integers(1, 25), data=st.data())
def test_metapath_edges_match_walk_enumeration(n, E, data):
    h = data.draw(st.lists(st.integers(0, n - 1), min_size=E, max_size=E))
    t = data.draw(st.lists(st.integers(0, n - 1), min_size=E, max_size=E))
    r = data.draw(st.lists(st.integers(0, 2), min_size=E, max_size=E))
    kg = KnowledgeGraph(h, r, t, [f'Q{i}' for i in range(n)], ['P1', 'P2', 'P3'])
    mp = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    start = data.draw(st.integers(0, n - 1))
    comp, part = metapath_edges(kg, start, mp)
    assert (comp.tolist(), part.tolist()) == brute_metapath(kg, start, mp)


def test_sp_expansion_keeps_every_shortest_path_of_the_neighbourhood(kg, records):
    for rec in records[:8]:
        q = record_question(kg, rec)
        hood, capped = khop_edges(kg, q['seeds'], max(3, q['hops']))
        qg = build_question_graph(kg, **q, n_nodes=40, max_triples=100, n_confounder_max=10, seed=4)  # pruned hard
        lab = shortest_path_labels((kg.head[hood], kg.tail[hood]), q['seeds'], q['answers'], 'synth-kgqa', kg.num_entities)
        have = set(keys(kg, qg.h, qg.r, qg.t).tolist())
        assert set(keys(kg, kg.head[hood], kg.rel[hood], kg.tail[hood])[lab.mask].tolist()) <= have  # every SP triple kept
        if not capped and not qg.info['n_gt_missing_from_kg']: assert qg.info['sp_as_neighbourhood']
        off = build_question_graph(kg, **q, n_nodes=40, max_triples=100, n_confounder_max=10, seed=4, sp_expand=False)
        assert off.info['n_sp_expansion'] == 0 and off.info['sp_as_neighbourhood'] is None


def test_readded_flags_ground_truth_that_pruning_dropped(kg, records, tmp_path):
    q = record_question(kg, records[7])
    qg = build_question_graph(kg, **q, n_nodes=5, max_triples=10, n_confounder_max=0, seed=5, sp_expand=False)  # little survives pruning
    assert qg.readded.any() and (qg.triple_scores[qg.readded] == 1).all()
    back = load_question_graph(qg.save(tmp_path / 'q.npz'))
    assert np.array_equal(back.readded, qg.readded)
