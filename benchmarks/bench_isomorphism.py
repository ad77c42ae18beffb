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


def toy_kg(n_entities: int = 2000, n_relations: int = 20, n_triples: int = 10_000, seed: int = 0):
    "A random KG with Zipf-distributed relation frequencies (a few common relations, many rare ones)."
    from kgqa_nb.kg import KnowledgeGraph
    rng = random.Random(seed)
    w = [1 / (i + 1) for i in range(n_relations)]
    tri = set()
    while len(tri) < n_triples:
        h, t = rng.randrange(n_entities), rng.randrange(n_entities)
        if h != t: tri.add((f'Q{h}', f'P{rng.choices(range(n_relations), w)[0]}', f'Q{t}'))
    return KnowledgeGraph.from_id_triples(sorted(tri), name=f'random({n_entities},{n_relations},{n_triples},seed={seed})')


def sample_tree(kg, rng, max_edges: int = 6):
    "A random answer tree in the KG: grow from a random answer by adding triples that touch the tree at one end."
    E = kg.num_triples
    while True:
        e = rng.randrange(E); answer = int(kg.head[e] if rng.random() < .5 else kg.tail[e])
        nodes, edges = {answer}, []
        for _ in range(rng.randint(1, max_edges)):
            v = rng.choice(sorted(nodes))
            nbr, eid, _ = kg.und_csr(v)
            cand = [int(x) for x, n in zip(eid, nbr) if int(n) not in nodes]
            if not cand: break
            x = rng.choice(cand); edges.append(x); nodes |= {int(kg.head[x]), int(kg.tail[x])}
        if edges: break
    deg = defaultdict(int)
    for x in edges: deg[int(kg.head[x])] += 1; deg[int(kg.tail[x])] += 1
    ids = kg.entity_ids
    triples = [(ids[kg.head[x]], kg.relation_ids[kg.rel[x]], ids[kg.tail[x]]) for x in edges]
    return triples, [ids[v] for v in sorted(nodes) if v != answer and deg[v] == 1], ids[answer]


def make_store(kg):
    from kgqa_nb.sparql import OxigraphStore
    return OxigraphStore.from_kg(kg, labels=False)


def bench_minimality(n_datapoints: int, seed: int = 0) -> dict:
    "Queries per datapoint: this search (increasing size, stop at the first sufficient size, memo) vs the reference (all subsets)."
    import itertools
    from kgqa_nb.minimality import minimality, seed_paths, store_runner, subset_query
    kg = toy_kg(seed=seed); store = make_store(kg); run_q = store_runner(store)
    rng = random.Random(seed)
    ours, ref, n_seeds, redundant, disagree, secs = [], [], [], 0, 0, 0.0
    for _ in range(n_datapoints):
        triples, seeds, answer = sample_tree(kg, rng)
        paths = seed_paths(triples, seeds, answer)
        full = set(run_q(subset_query(paths, seeds)))
        t0 = time.perf_counter()
        r = minimality(store, triples, seeds, answer, full)
        secs += time.perf_counter() - t0
        ours.append(r.n_queries); n_seeds.append(len(seeds)); redundant += r.redundant
        # the reference: every non-empty subset, sufficient when it returns at most |A| distinct answers
        subsets = [s for k in range(1, len(seeds) + 1) for s in itertools.combinations(seeds, k)]
        ref.append(len(subsets))
        count_ok = [s for s in subsets if len(set(run_q(subset_query(paths, s)))) <= len(full)]
        disagree += (min(map(len, count_ok)) < len(seeds)) != r.redundant
    mean = lambda xs: sum(xs) / len(xs)
    return dict(kg=kg.name, n_datapoints=n_datapoints, mean_seeds=round(mean(n_seeds), 3),
                redundant_fraction=round(redundant / n_datapoints, 3),
                queries_per_datapoint=round(mean(ours), 3), reference_queries_per_datapoint=round(mean(ref), 3),
                query_ratio_reference_over_ours=round(mean(ref) / mean(ours), 2),
                redundant_flag_differs_from_count_rule=disagree, ms_per_datapoint=round(1000 * secs / n_datapoints, 2))


def run(quick: bool = False) -> dict:
    return dict(classify=bench_classify(10_000 if quick else 100_000, 1_000 if quick else 10_000),
                minimality=bench_minimality(50 if quick else 500))


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
