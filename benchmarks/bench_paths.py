"""Shortest-path labels and PPR on question-specific graphs: kgqa_nb.paths vs the networkx approach of synth-kgqa.

One run builds question graphs for synthetic tree questions (toyworld when available, else CoDEx-M), then on the same
graphs times (1) shortest-path labels: our BFS-distance criterion vs enumerating nx.all_shortest_paths on an
nx.MultiGraph and expanding over parallel triples (synth-kgqa), asserting identical label sets and path counts; and
(2) personalized PageRank over each question's k-hop neighbourhood: our sparse power iteration vs networkx.pagerank on
the undirected MultiGraph, asserting top-N overlap >= 99%.
"""
import importlib.util, itertools, time

import networkx as nx
import numpy as np

from kgqa_nb.kg import load_codex_m
from kgqa_nb.paths import shortest_path_labels, personalized_pagerank, top_k_nodes
from kgqa_nb.qgraphs import build_question_graph, record_question, random_tree_question, khop_edges


def _kg():
    if importlib.util.find_spec('kgqa_nb.toyworld') is not None:
        from kgqa_nb.toyworld import make_toyworld
        return make_toyworld()
    return load_codex_m()


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


def run(quick: bool = False) -> dict:
    kg = _kg()
    n_q = 6 if quick else 30
    n_nodes, max_triples = (500, 5000) if quick else (2500, 20000)
    recs = [random_tree_question(kg, n_seeds=1 + i % 3, hops=1 + i % 4, seed=1000 + i, qid=i) for i in range(n_q)]
    qs = [record_question(kg, r) for r in recs]
    t0 = time.perf_counter()
    qgs = [build_question_graph(kg, **q, n_nodes=n_nodes, max_triples=max_triples, seed=i) for i, q in enumerate(qs)]
    build_s = time.perf_counter() - t0

    # (1) shortest-path labels on the same question graphs
    ours_s = nx_s = 0.0; n_triples = 0
    for qg in qgs:
        nodes, inv = np.unique(np.concatenate([qg.h, qg.t]), return_inverse=True)
        E = len(qg); lh, lt = inv[:E], inv[E:]
        ls, la = np.searchsorted(nodes, qg.seeds), np.searchsorted(nodes, qg.answers)
        t0 = time.perf_counter(); lab = shortest_path_labels((lh, lt), ls, la, 'synth-kgqa', len(nodes)); ours_s += time.perf_counter() - t0
        t0 = time.perf_counter(); ref, cnt = _nx_labels(lh, lt, ls.tolist(), la.tolist()); nx_s += time.perf_counter() - t0
        assert set(lab.edges.tolist()) == ref and lab.n_paths == cnt, f'label mismatch on question {qg.id}'
        n_triples += E

    # (2) PPR on each question's k-hop neighbourhood (the input of the PPR step)
    ppr_ours = ppr_nx = ppr_nx_build = 0.0; overlaps, hood_sizes = [], []
    for qg, q in zip(qgs, qs):
        hood, _ = khop_edges(kg, q['seeds'], qg.info['k'])
        nodes, inv = np.unique(np.concatenate([kg.head[hood], kg.tail[hood], q['seeds']]), return_inverse=True)
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

    # (3) a stress case where enumeration explodes: L layers of width w, complete bipartite between layers
    L, w = (4, 6) if quick else (6, 8)
    layer = lambda i: np.arange(1 + i * w, 1 + (i + 1) * w)
    hs, ts = [np.zeros(w, np.int64)], [layer(0)]
    for i in range(L - 1): a, b = np.meshgrid(layer(i), layer(i + 1), indexing='ij'); hs.append(a.ravel()); ts.append(b.ravel())
    end = 1 + L * w; hs.append(layer(L - 1)); ts.append(np.full(w, end))
    sh, stt = np.concatenate(hs), np.concatenate(ts)
    t0 = time.perf_counter(); lab = shortest_path_labels((sh, stt), [0], [end]); s_ours = time.perf_counter() - t0
    t0 = time.perf_counter(); ref, cnt = _nx_labels(sh, stt, [0], [end]); s_nx = time.perf_counter() - t0
    assert set(lab.edges.tolist()) == ref and lab.n_paths == cnt == w ** L
    stress = dict(layers=L, width=w, triples=len(sh), n_paths=cnt, ours_s=round(s_ours, 4), networkx_enumeration_s=round(s_nx, 3),
                  speedup=round(s_nx / s_ours, 1))

    return dict(kg=kg.name, n_questions=n_q, n_nodes=n_nodes, max_triples=max_triples,
                build_graphs_s=round(build_s, 3), mean_graph_triples=round(n_triples / n_q, 1),
                sp_labels=dict(ours_s=round(ours_s, 4), networkx_enumeration_s=round(nx_s, 4),
                               ours_questions_per_s=round(n_q / ours_s, 1), networkx_questions_per_s=round(n_q / nx_s, 1),
                               speedup=round(nx_s / ours_s, 2), identical=True),
                sp_labels_stress=stress,
                ppr=dict(mean_neighbourhood_triples=round(float(np.mean(hood_sizes)), 1), ours_s=round(ppr_ours, 4),
                         networkx_pagerank_s=round(ppr_nx, 4), networkx_graph_build_s=round(ppr_nx_build, 4),
                         speedup=round(ppr_nx / ppr_ours, 2), speedup_incl_build=round((ppr_nx + ppr_nx_build) / ppr_ours, 2),
                         min_top_n_overlap=round(min(overlaps), 4), max_abs_diff_below_1e6=True))


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
