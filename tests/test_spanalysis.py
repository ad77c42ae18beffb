"""Shortest-path vs ground-truth analysis (kgqa_nb.spanalysis): hand-computed cases, a networkx brute force on random
question graphs, the stored SP labels being used, the dataset cache, the one-call set-up, and the Figure 4 reader check
(every question answered from its GT triples)."""
import itertools, math

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from kgqa_nb.loaders import load_kg
from kgqa_nb.metrics import answer_hit
from kgqa_nb.paths import SPLabels, UnknownConventionError, shortest_path_labels
from kgqa_nb.qgraphs import QuestionGraph
from kgqa_nb.readers import QueryReader
import kgqa_nb.spanalysis as spa
from kgqa_nb.spanalysis import (AnswerNodeError, analyse_dataset, gold_answers, hits_by_isomorphism_type, open_sp_analysis,
                                parallel_path_stats, question_path_stats, reader_triples, shortcut_stats, sp_gt_overlap_by_hops,
                                tree_source)


def qgraph(triples, gt, seeds, answers, qid='q'):
    tr = np.array(triples, np.int64).reshape(-1, 3)
    return QuestionGraph(qid, tr[:, 0], tr[:, 1], tr[:, 2], np.array(gt, np.uint8), np.array(seeds, np.int64),
                         np.array(answers, np.int64))


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
    assert qg.sp_mask('rog').tolist() == [False, True, True, True, True, True, False]


def test_stored_sp_labels_equal_recomputed():
    qg = qgraph([(1, 0, 2), (1, 5, 2), (2, 1, 4), (1, 2, 3), (3, 3, 4)], [1, 0, 1, 0, 0], [1], [4])
    row, _ = question_path_stats(qg)
    assert row['n_sp'] == int(qg.triple_scores_sp.sum()) == 5


def test_the_analysis_reads_the_labels_stored_with_the_graph(monkeypatch):
    qg = qgraph([(1, 0, 2), (2, 1, 4), (1, 2, 4)], [1, 1, 0], [1], [4])
    # stored labels that differ from what a recomputation gives: the analysis must use them, not recompute
    qg.sp['synth-kgqa'] = SPLabels(np.array([True, True, False]), 7, [(1, 4, 2, 7, 2, 'both')], 'synth-kgqa')
    import kgqa_nb.paths as pm
    monkeypatch.setattr(pm, 'shortest_path_labels', lambda *a, **k: (_ for _ in ()).throw(AssertionError('recomputed')))
    row, seeds = question_path_stats(qg)
    assert (row['pct_gt_in_sp'], row['n_sp']) == (100.0, 2) and seeds.n_sp_paths.tolist() == [7.0] and seeds.sp_hops.tolist() == [2]


def test_bad_inputs_raise_named_errors():
    qg = qgraph([(1, 0, 2), (2, 0, 3)], [1, 1], [1], [2, 3])
    with pytest.raises(AnswerNodeError, match='exactly one'): question_path_stats(qg)
    ok = qgraph([(1, 0, 2)], [1], [1], [2])
    with pytest.raises(UnknownConventionError): question_path_stats(ok, 'bfs')
    with pytest.raises(ValueError, match='unknown source'): open_sp_analysis('x', 'webqsp')
    with pytest.raises(ValueError, match='split must be'): open_sp_analysis('x', 'random-trees', split='dev')
    with pytest.raises(UnknownConventionError): open_sp_analysis('x', 'random-trees', convention='bfs')


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

def test_aggregates_by_hand():
    q = pd.DataFrame(dict(id=['a', 'b', 'c'], n_hops=[1, 2, 2], pct_gt_in_sp=[100., 50., 100.], pct_sp_in_gt=[50., 20., 40.],
                          n_gt=[1, 2, 4], n_sp=[2, 10, 6]))
    t = sp_gt_overlap_by_hops(q)
    cols = ['n_hops', 'pct_gt_in_sp', 'pct_sp_in_gt', 'n_gt', 'n_sp', 'n_questions']
    assert t[cols].values.tolist() == [[1, 100., 50., 1., 2., 1], [2, 75., 30., 3., 8., 2]]
    assert t.loc[0, ['pct_gt_in_sp_lo', 'n_sp_hi']].isna().all()  # one question: no interval
    # the 2-hop % GT in SP is 50 and 100: resampled means are 50, 75 or 100 (probabilities 1/4, 1/2, 1/4), so the 2.5th
    # and 97.5th percentiles of 2,000 of them are 50 and 100
    assert t.loc[1, ['pct_gt_in_sp_lo', 'pct_gt_in_sp_hi']].tolist() == [50., 100.]
    assert t.loc[1, ['n_gt_lo', 'n_gt_hi']].tolist() == [2., 4.]
    s = pd.DataFrame(dict(id=list('abcd'), gt_hops=[2, 2, 4, 4], sp_hops=[2, 1, 2, 4], n_sp_paths=[4., 1., 2., 32.],
                          shortcut=[False, True, True, False]))
    left = shortcut_stats(s).set_index('gt_hops')
    assert left.sp_mean.tolist() == [1.5, 3.0] and left.pct_shortcut.tolist() == [50., 50.] and left.sp_std.tolist() == [.5, 1.]
    # Wilson interval of 1 of 2: (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), z = 1.959964
    z = 1.959964; mid, half = .5 + z * z / 4, z * np.sqrt(.25 / 2 + z * z / 16)
    assert np.allclose(left.pct_shortcut_lo, 100 * (mid - half) / (1 + z * z / 2)) and np.allclose(left.pct_shortcut_hi, 100 * (mid + half) / (1 + z * z / 2))
    right = parallel_path_stats(s).set_index('sp_hops')
    assert np.allclose(right.paths_geomean, [1., np.sqrt(8.), 32.]) and right.n_seeds.tolist() == [1, 2, 1]
    assert np.allclose(right.loc[2, ['paths_geomean_lo', 'paths_geomean_hi']].tolist(), [2., 4.])  # 2 and 4 paths: log-means log 2 .. log 4
    assert np.isnan(right.loc[1, 'paths_geomean_lo']) and np.allclose(left.sp_mean_lo.tolist(), [1., 2.])


# --- datasets: cache and the reader check ------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def toy():
    return load_kg('toyworld')


def _trees(kg, n, seed=0):
    return tree_source(kg, n, seed).test.assign(split='test')


def test_dataset_cache_reuse_and_invalidation(toy, tmp_path):
    recs = _trees(toy, 8)
    q1, s1, g1 = analyse_dataset(toy, recs, tmp_path)
    stamp = {p: p.stat().st_mtime_ns for p in g1.paths}
    q2, s2, g2 = analyse_dataset(toy, recs, tmp_path)
    pd.testing.assert_frame_equal(q1, q2); pd.testing.assert_frame_equal(s1, s2)
    assert g1.paths == g2.paths and all(p.stat().st_mtime_ns == stamp[p] for p in g2.paths)
    assert [g.id for g in g1] == q1.id.tolist()
    # a different dataset (other seeds) must not reuse the first one's graphs, although its ids are the same
    other = _trees(toy, 8, seed=100)
    q3, _, g3 = analyse_dataset(toy, other, tmp_path)
    assert not set(g3.paths) & set(g1.paths) and q3.id.tolist() == q1.id.tolist()
    # another convention reuses the graphs but computes its own table
    q4, _, g4 = analyse_dataset(toy, recs, tmp_path, convention='rog')
    assert g4.paths == g1.paths and (q4.n_sp <= q1.n_sp).all()
    # a KG with the same name but other triples gets its own graphs and tables
    q5, _, g5 = analyse_dataset(toy.drop_triples([toy.num_triples - 1], name=toy.name), recs, tmp_path)
    assert not set(g5.paths) & set(g1.paths)
    with pytest.raises(ValueError, match='no records'): analyse_dataset(toy, recs.iloc[:0], tmp_path)


def test_open_sp_analysis_passes_one_kg_object_down(toy, tmp_path, monkeypatch):
    import kgqa_nb.datasources as ds
    def no_load(*a, **k): raise AssertionError('the KG was loaded again')
    monkeypatch.setattr(ds, 'load_kg', no_load)
    an = open_sp_analysis('table6_gt_vs_sp', 'random-trees', toy, n_questions=6, convention='rog', out_dir=str(tmp_path))
    assert an.kg is toy and len(an.questions) == len(an.qgraphs) == len(an.records) == 6
    assert (an.questions.convention == 'rog').all() and an.prov['params']['convention'] == 'rog'
    assert an.prov['artifact'] == 'table6_gt_vs_sp' and an.results_dir == tmp_path / 'results'


def _generated(toy, tmp_path):
    return open_sp_analysis('x', 'generated', toy, n_questions=40, out_dir=str(tmp_path))


@pytest.mark.parametrize('source', ['random-trees', 'generated'])
def test_query_reader_hits_every_question_with_gt_triples(toy, tmp_path, source):
    an = (open_sp_analysis('x', 'random-trees', toy, n_questions=24, seed=7, out_dir=str(tmp_path)) if source == 'random-trees'
          else _generated(toy, tmp_path))
    recs = an.records.to_dict('records')
    sp_sets, gt_sets = reader_triples(toy, an.qgraphs)
    reader = QueryReader(); qs = [r['question'] for r in recs]
    pred_sp, pred_gt = reader.answer_many(qs, sp_sets, recs), reader.answer_many(qs, gt_sets, recs)
    gold = [gold_answers(toy, r) for r in recs]
    hits = pd.DataFrame(dict(id=an.questions.id, hit_sp=[answer_hit(p, *g) for p, g in zip(pred_sp, gold)],
                             hit_gt=[answer_hit(p, *g) for p, g in zip(pred_gt, gold)]))
    assert hits.hit_gt.all(), hits[~hits.hit_gt]
    # the reader given only SP triples hits whenever all GT triples are among them (the query's pattern is then present)
    full = an.questions.set_index('id').pct_gt_in_sp == 100
    assert hits.set_index('id').hit_sp[full[full].index].all()
    by_type = hits_by_isomorphism_type(an.questions, hits)
    assert by_type.n_questions.sum() == len(an.questions.dropna(subset=['graph_isomorphism'])) and (by_type.hits_gt == 100).all()


def test_spanalysis_imports_no_later_chapter():
    import ast, inspect
    later = ('metrics', 'readers', 'dsl', 'ultra', 'rerun', 'cli')
    tree = ast.parse(inspect.getsource(spa))
    mods = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert not [m for m in mods if m.split('.')[-1] in later], mods


def test_wilson_interval_holds_its_share_at_0_and_1():
    """Regression: at 0 of n the Wilson lower bound came out 4.9e-17 (n = 3) instead of 0, above the share itself, which
    failed Figure 9's check on the companion questions."""
    from kgqa_nb.spanalysis import wilson_interval
    for n in range(1, 60):
        lo, hi = wilson_interval(0, n); assert lo == 0.0 < hi
        lo, hi = wilson_interval(n, n); assert lo < hi == 1.0
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n); assert 0 <= lo <= k / n <= hi <= 1
