"""Shortest-path vs ground-truth analysis (kgqa_nb.spanalysis): hand-computed cases, a networkx brute force on random
question graphs, the dataset cache, and the Figure 4 reader check (every question answered from its GT triples)."""
import itertools, math

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from kgqa_nb.kg import load_kg
from kgqa_nb.paths import shortest_path_labels
from kgqa_nb.qgraphs import QuestionGraph
from kgqa_nb.readers import QueryReader
from kgqa_nb.spanalysis import (AnswerNodeError, analyse_dataset, fig4_table, fig9_parallel_paths, fig9_shortcuts, load_records,
                                question_path_stats, reader_hits, sp_mask, table6)
from kgqa_nb.paths import UnknownConventionError


def qgraph(triples, gt, seeds, answers, qid='q'):
    tr = np.array(triples, np.int64).reshape(-1, 3)
    nodes, inv = np.unique(np.concatenate([tr[:, 0], tr[:, 2], seeds, answers]), return_inverse=True)
    E = len(tr)
    sp_ = shortest_path_labels((inv[:E], inv[E:2 * E]), inv[2 * E:2 * E + len(seeds)], inv[2 * E + len(seeds):], num_nodes=len(nodes))
    return QuestionGraph(qid, tr[:, 0], tr[:, 1], tr[:, 2], np.array(gt, np.uint8), sp_.mask.astype(np.uint8),
                         np.array(seeds, np.int64), np.array(answers, np.int64))


# --- hand-made cases ---------------------------------------------------------------------------------------------------

def test_shortcut_case():
    # GT: 100 -> 101 -> 102 -> 103 (3 hops); a direct triple 103 <- 100 is a shortcut; 104 is a dangling neighbour
    qg = qgraph([(100, 0, 101), (101, 1, 102), (102, 2, 103), (103, 3, 100), (101, 4, 104)], [1, 1, 1, 0, 0], [100], [103])
    row, seeds = question_path_stats(qg)
    assert (row['pct_gt_in_sp'], row['pct_sp_in_gt'], row['n_gt'], row['n_sp']) == (0.0, 0.0, 3, 1)
    assert row['gt_hops_max'] == 3 and row['any_shortcut'] and row['n_shortcut_seeds'] == 1
    assert seeds[['seed', 'gt_hops', 'sp_hops', 'n_sp_paths', 'shortcut']].values.tolist() == [[100, 3, 1, 1.0, True]]
    # directed (SubgraphRAG): 103 -> 100 is against q->a but a->q is allowed, so it is still a 1-hop shortcut
    row, seeds = question_path_stats(qg, 'subgraphrag')
    assert (row['n_sp'], seeds.sp_hops.tolist(), seeds.shortcut.tolist()) == (1, [1], [True])


def test_parallel_paths_case():
    # GT: 1 -(0)- 2 -(1)- 4 ; parallel triple 1 -(5)- 2 ; second route 1 - 3 - 4 ; two seeds: 1 (2 hops) and 5 (1 hop)
    triples = [(1, 0, 2), (1, 5, 2), (2, 1, 4), (1, 2, 3), (3, 3, 4), (5, 6, 4), (4, 7, 9)]
    qg = qgraph(triples, [1, 0, 1, 0, 0, 1, 0], [1, 5], [4])
    row, seeds = question_path_stats(qg)
    # SP triples: both 1-2 triples, 2-4, 1-3, 3-4 (seed 1: 2*1 + 1*1 = 3 paths) and 5-4 (seed 5: 1 path)
    assert (row['n_gt'], row['n_sp']) == (3, 6)
    assert row['pct_gt_in_sp'] == 100.0 and math.isclose(row['pct_sp_in_gt'], 50.0)
    assert seeds[['seed', 'gt_hops', 'sp_hops', 'n_sp_paths', 'shortcut']].values.tolist() == [[1, 2, 2, 3.0, False], [5, 1, 1, 1.0, False]]
    assert not row['any_shortcut'] and row['gt_hops_max'] == 2
    # RoG: simple undirected graph, the last of the two 1-2 triples (relation 5, not GT) wins
    row, seeds = question_path_stats(qg, 'rog')
    assert row['n_sp'] == 5 and math.isclose(row['pct_gt_in_sp'], 200 / 3) and math.isclose(row['pct_sp_in_gt'], 40.0)
    assert seeds.n_sp_paths.tolist() == [2.0, 1.0]
    assert sp_mask(qg, 'rog').tolist() == [False, True, True, True, True, True, False]


def test_stored_sp_labels_equal_recomputed():
    qg = qgraph([(1, 0, 2), (1, 5, 2), (2, 1, 4), (1, 2, 3), (3, 3, 4)], [1, 0, 1, 0, 0], [1], [4])
    row, _ = question_path_stats(qg)
    assert row['n_sp'] == int(qg.triple_scores_sp.sum()) == 5


def test_bad_inputs_raise_named_errors():
    qg = qgraph([(1, 0, 2), (2, 0, 3)], [1, 1], [1], [2, 3])
    with pytest.raises(AnswerNodeError, match='exactly one'): question_path_stats(qg)
    ok = qgraph([(1, 0, 2)], [1], [1], [2])
    with pytest.raises(UnknownConventionError): question_path_stats(ok, 'bfs')
    with pytest.raises(ValueError, match='unknown source'): load_records('webqsp')
    with pytest.raises(ValueError, match='split'): load_records('random-trees', split='dev')


# --- brute force on random question graphs ----------------------------------------------------------------------------

def brute_force(qg):
    "networkx MultiGraph: all shortest node paths expanded over parallel triples (the synth-kgqa reference routine)."
    G = nx.MultiGraph()
    for i, (h, t) in enumerate(zip(qg.h.tolist(), qg.t.tolist())): G.add_edge(h, t, key=i)
    GT = nx.MultiGraph(); GT.add_edges_from((h, t) for h, t, g in zip(qg.h.tolist(), qg.t.tolist(), qg.triple_scores) if g)
    a, sp, per_seed = int(qg.answers[0]), set(), []
    for s in qg.seeds.tolist():
        paths = list(nx.all_shortest_paths(G, s, a))
        n = 0
        for p in paths:
            n += math.prod(G.number_of_edges(u, v) for u, v in zip(p, p[1:]))
            for u, v in zip(p, p[1:]): sp |= set(G[u][v])
        gt_len = nx.shortest_path_length(GT, s, a)
        per_seed.append((s, gt_len, len(paths[0]) - 1, n, len(paths[0]) - 1 < gt_len))
    gt = set(np.flatnonzero(qg.triple_scores).tolist())
    return 100 * len(gt & sp) / len(gt), 100 * len(gt & sp) / len(sp), len(sp), per_seed


@pytest.mark.parametrize('trial', range(40))
def test_matches_networkx_brute_force(trial):
    rng = np.random.default_rng(trial)
    n, E = int(rng.integers(6, 14)), int(rng.integers(8, 30))
    tr = np.stack([rng.integers(0, n, E), rng.integers(0, 3, E), rng.integers(0, n, E)], 1)
    tr = tr[tr[:, 0] != tr[:, 2]]
    # a GT path from each of 1-2 seeds to the answer, built as a chain of new triples so it always exists
    ans = 0; seeds = rng.choice(np.arange(1, n), int(rng.integers(1, 3)), replace=False)
    gt = []
    for s in seeds.tolist():
        inner = rng.choice(np.arange(1, n), int(rng.integers(0, 3)), replace=False).tolist()
        chain = [s] + [x for x in inner if x != s] + [ans]
        gt += [(u, 9, v) for u, v in zip(chain, chain[1:])]
    gt = list(dict.fromkeys(gt))
    allt = np.concatenate([tr, np.array(gt)]) if len(tr) else np.array(gt)
    flags = [0] * len(tr) + [1] * len(gt)
    qg = qgraph(allt, flags, seeds, [ans])
    # the GT chains may overlap; the GT subgraph must still give each seed a path to the answer
    row, per_seed = question_path_stats(qg)
    p_gt, p_sp, n_sp, expected = brute_force(qg)
    assert math.isclose(row['pct_gt_in_sp'], p_gt) and math.isclose(row['pct_sp_in_gt'], p_sp) and row['n_sp'] == n_sp
    got = [tuple(x) for x in per_seed[['seed', 'gt_hops', 'sp_hops', 'n_sp_paths', 'shortcut']].itertuples(index=False)]
    assert got == [(s, g, d, float(c), sc) for s, g, d, c, sc in expected]


# --- aggregates ----------------------------------------------------------------------------------------------------

def test_table6_and_fig9_aggregates_by_hand():
    q = pd.DataFrame(dict(id=['a', 'b', 'c'], n_hops=[1, 2, 2], pct_gt_in_sp=[100., 50., 100.], pct_sp_in_gt=[50., 20., 40.],
                          n_gt=[1, 2, 4], n_sp=[2, 10, 6]))
    t = table6(q)
    assert t.values.tolist() == [[1, 100., 50., 1., 2., 1], [2, 75., 30., 3., 8., 2]]
    s = pd.DataFrame(dict(id=list('abcd'), gt_hops=[2, 2, 4, 4], sp_hops=[2, 1, 2, 4], n_sp_paths=[4., 1., 2., 32.],
                          shortcut=[False, True, True, False]))
    left = fig9_shortcuts(s).set_index('gt_hops')
    assert left.sp_mean.tolist() == [1.5, 3.0] and left.pct_shortcut.tolist() == [50., 50.] and left.sp_std.tolist() == [.5, 1.]
    right = fig9_parallel_paths(s).set_index('sp_hops')
    assert np.allclose(right.paths_geomean, [1., np.sqrt(8.), 32.]) and right.n_seeds.tolist() == [1, 2, 1]


# --- datasets: cache and the reader check ------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def toy():
    return load_kg('toyworld')


def test_dataset_cache_reuse_and_invalidation(toy, tmp_path):
    recs = load_records('random-trees', toy, 8, split='all')
    q1, s1, p1 = analyse_dataset(toy, recs, tmp_path)
    stamp = {p: p.stat().st_mtime_ns for p in p1}
    q2, s2, p2 = analyse_dataset(toy, recs, tmp_path)
    pd.testing.assert_frame_equal(q1, q2); pd.testing.assert_frame_equal(s1, s2)
    assert p1 == p2 and all(p.stat().st_mtime_ns == stamp[p] for p in p2)
    # a different dataset (other seeds) must not reuse the first one's graphs, although its ids are the same
    other = load_records('random-trees', toy, 8, seed=100, split='all')
    q3, _, p3 = analyse_dataset(toy, other, tmp_path)
    assert p3[0].parent != p1[0].parent and q3.id.tolist() == q1.id.tolist()
    # another convention reuses the graphs but computes its own table
    q4, _, p4 = analyse_dataset(toy, recs, tmp_path, convention='rog')
    assert p4 == p1 and (q4.n_sp <= q1.n_sp).all()
    with pytest.raises(ValueError, match='no records'): analyse_dataset(toy, recs.iloc[:0], tmp_path)


def _generated_records():
    try: return load_records('generated', 'toyworld', 40, split='all')
    except (ImportError, NotImplementedError) as e:
        pytest.skip(f'the generation chapter (kgqa_nb.datasources) cannot build a dataset here: {type(e).__name__}: {e}')


@pytest.mark.parametrize('source', ['random-trees', 'generated'])
def test_query_reader_hits_every_question_with_gt_triples(toy, tmp_path, source):
    recs = load_records('random-trees', toy, 24, seed=7, split='all') if source == 'random-trees' else _generated_records()
    q, _, paths = analyse_dataset(toy, recs, tmp_path)
    hits = reader_hits(toy, recs, paths, QueryReader())
    assert hits.hit_gt.all(), hits[~hits.hit_gt]
    # the reader given only SP triples hits whenever all GT triples are among them (the query's pattern is then present)
    full = q.set_index('id').pct_gt_in_sp == 100
    assert hits.set_index('id').hit_sp[full[full].index].all()
    f4 = fig4_table(q, hits)
    assert f4.n_questions.sum() == len(q.dropna(subset=['graph_isomorphism'])) and (f4.hits_gt == 100).all()
