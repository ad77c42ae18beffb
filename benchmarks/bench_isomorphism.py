"""Isomorphism-type classification speed: the canonical tree code (kgqa_nb.isomorphism) against the reference approach,
which tries each GTSQA template of the right size with `networkx.is_isomorphic(node_match=colour)`; plus the number of
SPARQL queries the minimality search runs per datapoint, against the reference's one query per non-empty seed subset."""
import random, time
from collections import defaultdict

import networkx as nx

from kgqa_nb.isomorphism import GTSQA_TEMPLATES, classify_answer_subgraph, template_edges


def gtsqa_like_trees(n: int, seed: int = 0, max_edges: int = 6):
    "n random answer trees with 1..max_edges edges, seeds at the leaves, 'Label (QID)' node ids, random directions."
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        m = rng.randint(1, max_edges)
        parent = [None] + [rng.randrange(i) for i in range(1, m + 1)]
        deg = [0] * (m + 1)
        for i in range(1, m + 1): deg[i] += 1; deg[parent[i]] += 1
        answer = rng.randrange(m + 1)
        ids = rng.sample(range(1, 10 ** 6), m + 1)
        lab = [f'Entity {q} (Q{q})' for q in ids]
        triples = [(lab[i], f'rel {i} (P{i})', lab[parent[i]]) if rng.random() < .5 else (lab[parent[i]], f'rel {i} (P{i})', lab[i])
                   for i in range(1, m + 1)]
        rng.shuffle(triples)
        seeds = [lab[v] for v in range(m + 1) if v != answer and deg[v] == 1]
        out.append((triples, seeds, lab[answer]))
    return out


def _template_graphs():
    "GRAPH_SIZE_TO_TEMPLATE as the reference builds it: (n_edges, n_seeds) -> [(name, coloured nx.Graph)]."
    by_size = defaultdict(list)
    for name in GTSQA_TEMPLATES:
        edges, seeds, ans = template_edges(name)
        by_size[len(edges), len(seeds)].append((name, _colour(nx.Graph(edges), seeds, ans)))
    return by_size


def _colour(g, seeds, answer):
    seeds = set(seeds)
    for n in g.nodes: g.nodes[n]['color'] = 'red' if n in seeds else 'green' if n == answer else 'white'
    return g


def networkx_classify(triples, seeds, answer, by_size) -> str | None:
    "The reference approach: first template of the right size that is colour-isomorphic to the subgraph, else None."
    g = nx.Graph()
    for h, _, t in triples: g.add_edge(h, t)
    _colour(g, seeds, answer)
    match = lambda a, b: a['color'] == b['color']
    for name, ref in by_size.get((len(triples), len(seeds)), []):
        if nx.is_isomorphic(g, ref, node_match=match): return name
    return None


def bench_classify(n_trees: int, n_networkx: int, seed: int = 0) -> dict:
    data = gtsqa_like_trees(n_trees, seed)
    t0 = time.perf_counter()
    ours = [classify_answer_subgraph(*d).graph_isomorphism for d in data]
    t_ours = time.perf_counter() - t0
    by_size = _template_graphs()
    sub = data[:n_networkx]
    t0 = time.perf_counter()
    ref = [networkx_classify(*d, by_size) for d in sub]
    t_nx = time.perf_counter() - t0
    named = 0
    for a, b in zip(ours, ref):
        if b is not None: named += 1; assert a == b, (a, b)
        else: assert a not in GTSQA_TEMPLATES, a  # the templates miss only types outside the 29
    per_ours, per_nx = t_ours / len(data), t_nx / len(sub)
    return dict(n_trees=len(data), n_networkx=len(sub), distinct_types=len(set(ours)),
                networkx_named_fraction=round(named / len(sub), 4), names_agree=True,
                ours_per_s=round(1 / per_ours), networkx_per_s=round(1 / per_nx),
                speedup_vs_networkx=round(per_nx / per_ours, 1))


def run(quick: bool = False) -> dict:
    res = dict(classify=bench_classify(10_000 if quick else 100_000, 1_000 if quick else 10_000))
    try:
        from kgqa_nb.minimality import bench_minimality
    except ImportError as e:  # the minimality chapter needs the SPARQL store
        res['minimality'] = f'skipped: {e}'
    else:
        res['minimality'] = bench_minimality(n_datapoints=50 if quick else 300)
    return res


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
