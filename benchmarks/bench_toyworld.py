"""Toy-world generation speed: make_toyworld at the default size and at >= 1M triples (seconds, triples/s), and the
undirected CSR (`KnowledgeGraph.und_csr`) of the 1M-triple world against the graph a user would otherwise build
(a networkx MultiDiGraph from the same triples; its build is timed on the same edges).
"""
import time

import numpy as np

from kgqa_nb.toyworld import make_toyworld


def _timed(f, *a, **kw):
    t = time.perf_counter(); out = f(*a, **kw); return out, time.perf_counter() - t


def run(quick: bool = False) -> dict:
    "Time the default and the large toy world, and CSR vs networkx construction on the large one."
    import networkx as nx
    res = {}
    make_toyworld(scale=0.1)  # warm up imports and caches
    for name, scale in (('default', 1.0), ('large', 3.0 if quick else 30.0)):
        kg, s = _timed(make_toyworld, scale=scale)
        res[name] = dict(scale=scale, entities=kg.num_entities, triples=kg.num_triples, seconds=round(s, 3),
                         triples_per_s=round(kg.num_triples / s))
    big = kg
    csr, s_csr = _timed(lambda: big.und_csr)
    assert csr.indptr[-1] == 2 * big.num_triples
    G, s_nx = _timed(lambda: (g := nx.MultiDiGraph(), g.add_nodes_from(range(big.num_entities)),
                              g.add_edges_from(zip(big.head.tolist(), big.tail.tolist(), big.rel.tolist())), g)[-1])
    assert G.number_of_edges() == big.num_triples
    deg = np.array([d for _, d in G.degree()])
    assert np.array_equal(deg, csr.degree())  # same graph, same degrees
    res['und_csr'] = dict(triples=big.num_triples, csr_seconds=round(s_csr, 3), networkx_seconds=round(s_nx, 3),
                          speedup_vs_networkx=round(s_nx / s_csr, 1))
    res['million_triples_reached'] = bool(res['large']['triples'] >= 1_000_000)
    return res


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
