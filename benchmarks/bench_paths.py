"""Shortest-path labels and PPR on question-specific graphs: kgqa_nb.paths vs the networkx approach of synth-kgqa.

(1) Labels by size: question-like graphs of about 10 to 100k triples (the nearest triples around the seeds of a random
tree question, ground truth included, cut from CoDEx-M), labelled by our labeller (automatic engine choice, and each
engine forced) and by enumerating nx.all_shortest_paths on an nx.MultiGraph expanded over parallel triples (synth-kgqa's
way, graph construction included, as the library has to build it); identical label sets and path counts are asserted,
and the ratio networkx time / our time is reported per size (> 1 = we are faster). (2) The same on whole question graphs
built by `kgqa_nb.qgraphs`. (3) A stress case where enumeration explodes. (4) Personalized PageRank over each question's
k-hop neighbourhood: our sparse power iteration vs networkx.pagerank on the undirected MultiGraph (top-N overlap >= 99%).
Times are the minimum over repeats (the machine may be shared), per graph.
"""
import itertools, time

import networkx as nx
import numpy as np

from kgqa_nb.loaders import load_codex_m, load_kg
from kgqa_nb.paths import SMALL_GRAPH, shortest_path_labels, personalized_pagerank, top_k_nodes
from kgqa_nb.qgraphs import build_question_graph, record_question, random_tree_question, khop_edges, triple_ids

SIZES = (10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000)


def _big_kg():
    "The largest CoDEx-M view on this machine (the full graph has about 206k triples), else the toy world."
    try:
        kg = load_kg('codex-m')
        if kg.num_triples < 150_000:
            try: kg = load_codex_m(labelled_only=False)
            except TypeError: pass
        return kg
    except FileNotFoundError:
        return load_kg('toyworld')


def _nx_labels(h, t, seeds, answers):
    "synth-kgqa's way: MultiGraph, all_shortest_paths per pair, every parallel triple of each hop is positive."
    G = nx.MultiGraph()
    for e, (a, b) in enumerate(zip(h.tolist(), t.tolist())): G.add_edge(a, b, key=e)
    lab, count = set(), 0
    for s in seeds:
        for a in answers:
            if s not in G or a not in G or not nx.has_path(G, s, a): continue
            for p in nx.all_shortest_paths(G, s, a):
                steps = [list(G[x][y]) for x, y in zip(p, p[1:])]
                for seq in itertools.product(*steps): lab |= set(seq); count += 1
    return lab, count


def _best(f, budget: float = 0.2, max_repeats: int = 200):
    "Minimum wall time of `f()` over repeats that fit in about `budget` seconds (at least 3), and its last result."
    t0 = time.perf_counter(); out = f(); first = time.perf_counter() - t0
    times = [first]
    for _ in range(min(max_repeats, max(2, int(budget / max(first, 1e-6))))):
        t0 = time.perf_counter(); out = f(); times.append(time.perf_counter() - t0)
    return min(times), out


def _local(kg, edge_ids, seeds, answers):
    "Edge ids of the KG renumbered to local node indices: (h, t, seeds, answers, n)."
    nodes, inv = np.unique(np.concatenate([kg.head[edge_ids], kg.tail[edge_ids], seeds, answers]), return_inverse=True)
    E, S = len(edge_ids), len(seeds)
    return inv[:E], inv[E:2 * E], inv[2 * E:2 * E + S].tolist(), inv[2 * E + S:].tolist(), len(nodes)


def _sized_graph(kg, size: int, seed: int):
    "About `size` triples nearest to the seeds of a random tree question, its ground truth included."
    rec = random_tree_question(kg, n_seeds=1 + seed % 3, hops=1 + seed % 4, seed=seed, qid=seed)
    q = record_question(kg, rec)
    gt = triple_ids(kg, q['gt_triples'])
    for k in range(2, 8):
        hood, _ = khop_edges(kg, q['seeds'], k, max(size - len(gt), 0), np.random.default_rng(seed))
        if len(hood) + len(gt) >= size: break
    ids = np.unique(np.concatenate([hood, gt]))
    return _local(kg, ids, np.asarray(q['seeds']), np.asarray(q['answers']))


def label_sweep(kg, sizes=SIZES, per_size: int = 4, max_paths: int = 100_000) -> list:
    "Per size: mean triples, our time (auto, python, numpy engines) and networkx's per graph, and the speed ratios."
    rows = []
    for size in sizes:
        t_auto = t_py = t_np = t_nx = 0.0; n_tri, done, skipped, seed = 0, 0, 0, 0
        while done < per_size and seed < 20 * per_size:
            h, t, seeds, answers, n = _sized_graph(kg, size, seed); seed += 1
            lab = shortest_path_labels((h, t), seeds, answers, 'synth-kgqa', n)
            if lab.n_paths > max_paths: skipped += 1; continue  # enumeration would take minutes
            a, lab = _best(lambda: shortest_path_labels((h, t), seeds, answers, 'synth-kgqa', n))
            p, lp = _best(lambda: shortest_path_labels((h, t), seeds, answers, 'synth-kgqa', n, engine='python'))
            q, lq = _best(lambda: shortest_path_labels((h, t), seeds, answers, 'synth-kgqa', n, engine='numpy'))
            x, (ref, cnt) = _best(lambda: _nx_labels(h, t, seeds, answers), budget=0.5, max_repeats=50)
            for l in (lab, lp, lq):
                assert set(l.edges.tolist()) == ref and l.n_paths == cnt, f'label mismatch at size {size}, graph {seed}'
            t_auto += a; t_py += p; t_np += q; t_nx += x; n_tri += len(h); done += 1
        if not done: continue
        us = lambda s: round(1e6 * s / done, 1)
        rows.append(dict(target_triples=size, mean_triples=round(n_tri / done), graphs=done, skipped_too_many_paths=skipped,
                         ours_us=us(t_auto), python_engine_us=us(t_py), numpy_engine_us=us(t_np), networkx_us=us(t_nx),
                         networkx_over_ours=round(t_nx / t_auto, 2), identical=True))
    return rows


def run(quick: bool = False) -> dict:
    kg = _big_kg()
    sweep = label_sweep(kg, SIZES[:6] if quick else SIZES, per_size=2 if quick else 4)

    # (2) whole question graphs built by qgraphs (a smaller KG keeps the build quick)
    small_kg = load_kg('toyworld')
    n_q = 6 if quick else 30
    n_nodes, max_triples = (500, 5000) if quick else (2500, 20000)
    recs = [random_tree_question(small_kg, n_seeds=1 + i % 3, hops=1 + i % 4, seed=1000 + i, qid=i) for i in range(n_q)]
    qs = [record_question(small_kg, r) for r in recs]
    t0 = time.perf_counter()
    qgs = [build_question_graph(small_kg, **q, n_nodes=n_nodes, max_triples=max_triples, seed=i) for i, q in enumerate(qs)]
    build_s = time.perf_counter() - t0
    ours_s = nx_s = 0.0; n_triples = 0
    for qg in qgs:
        nodes, inv = np.unique(np.concatenate([qg.h, qg.t, qg.seeds, qg.answers]), return_inverse=True)
        E, S = len(qg), len(qg.seeds); lh, lt = inv[:E], inv[E:2 * E]
        ls, la = inv[2 * E:2 * E + S].tolist(), inv[2 * E + S:].tolist()
        o, lab = _best(lambda: shortest_path_labels((lh, lt), ls, la, 'synth-kgqa', len(nodes)))
        x, (ref, cnt) = _best(lambda: _nx_labels(lh, lt, ls, la), budget=0.3, max_repeats=20)
        assert set(lab.edges.tolist()) == ref and lab.n_paths == cnt, f'label mismatch on question {qg.id}'
        assert (lab.mask == qg.sp_mask('synth-kgqa')).all(), 'the labels stored with the question graph differ'
        ours_s += o; nx_s += x; n_triples += E

    # (3) a stress case where enumeration explodes: L layers of width w, complete bipartite between layers
    L, w = (4, 6) if quick else (6, 8)
    layer = lambda i: np.arange(1 + i * w, 1 + (i + 1) * w)
    hs, ts = [np.zeros(w, np.int64)], [layer(0)]
    for i in range(L - 1): a, b = np.meshgrid(layer(i), layer(i + 1), indexing='ij'); hs.append(a.ravel()); ts.append(b.ravel())
    end = 1 + L * w; hs.append(layer(L - 1)); ts.append(np.full(w, end))
    sh, stt = np.concatenate(hs), np.concatenate(ts)
    s_ours, lab = _best(lambda: shortest_path_labels((sh, stt), [0], [end]))
    t0 = time.perf_counter(); ref, cnt = _nx_labels(sh, stt, [0], [end]); s_nx = time.perf_counter() - t0
    assert set(lab.edges.tolist()) == ref and lab.n_paths == cnt == w ** L
    stress = dict(layers=L, width=w, triples=len(sh), n_paths=cnt, ours_s=round(s_ours, 4), networkx_enumeration_s=round(s_nx, 3),
                  speedup=round(s_nx / s_ours, 1))

    # (4) PPR on each question's k-hop neighbourhood (the input of the PPR step)
    ppr_ours = ppr_nx = ppr_nx_build = 0.0; overlaps, hood_sizes = [], []
    for qg, q in zip(qgs, qs):
        hood, _ = khop_edges(small_kg, q['seeds'], qg.info['k'])
        nodes, inv = np.unique(np.concatenate([small_kg.head[hood], small_kg.tail[hood], q['seeds']]), return_inverse=True)
        E = len(hood); lh, lt, ls = inv[:E], inv[E:2 * E], inv[2 * E:]
        t0 = time.perf_counter(); x = personalized_pagerank((lh, lt), len(nodes), ls); ppr_ours += time.perf_counter() - t0
        t0 = time.perf_counter()
        G = nx.MultiGraph(); G.add_nodes_from(range(len(nodes))); G.add_edges_from(zip(lh.tolist(), lt.tolist()))
        ppr_nx_build += time.perf_counter() - t0
        pers = {int(s): 1.0 / len(set(ls.tolist())) for s in set(ls.tolist())}
        t0 = time.perf_counter(); ref = nx.pagerank(G, alpha=0.85, personalization=pers); ppr_nx += time.perf_counter() - t0
        xr = np.array([ref[i] for i in range(len(nodes))])
        assert np.abs(x - xr).max() < 1e-6
        a, b = top_k_nodes(x, n_nodes, 1e-6), top_k_nodes(xr, n_nodes, 1e-6)
        overlaps.append(len(np.intersect1d(a, b)) / max(len(a), 1)); hood_sizes.append(E)
    assert min(overlaps) >= 0.99, f'top-{n_nodes} overlap {min(overlaps):.4f} < 0.99'

    return dict(kg=kg.name, kg_triples=kg.num_triples, small_graph_threshold=SMALL_GRAPH, sp_labels_by_size=sweep,
                sp_labels_faster_than_networkx_at_every_size=all(r['networkx_over_ours'] > 1 for r in sweep),
                question_graphs=dict(kg=small_kg.name, n_questions=n_q, n_nodes=n_nodes, max_triples=max_triples,
                                     build_graphs_s=round(build_s, 3), mean_graph_triples=round(n_triples / n_q, 1),
                                     ours_ms_per_graph=round(1e3 * ours_s / n_q, 3), networkx_ms_per_graph=round(1e3 * nx_s / n_q, 3),
                                     networkx_over_ours=round(nx_s / ours_s, 2), identical=True),
                sp_labels_stress=stress,
                ppr=dict(mean_neighbourhood_triples=round(float(np.mean(hood_sizes)), 1), ours_s=round(ppr_ours, 4),
                         networkx_pagerank_s=round(ppr_nx, 4), networkx_graph_build_s=round(ppr_nx_build, 4),
                         speedup=round(ppr_nx / ppr_ours, 2), speedup_incl_build=round((ppr_nx + ppr_nx_build) / ppr_ours, 2),
                         min_top_n_overlap=round(min(overlaps), 4), max_abs_diff_below_1e6=True))


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
