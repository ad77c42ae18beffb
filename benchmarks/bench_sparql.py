"""SPARQL stores: kgqa_nb.sparql.OxigraphStore vs an rdflib Graph (rdflib's SPARQL engine) on the same triples.

One run (1) builds the same KG (toyworld when available, else CoDEx-M) into an OxigraphStore and an rdflib Graph and
times the same workload on both — one-hop and two-hop SELECTs from a constant entity, two-seed intersections, and
CONSTRUCTs of those query bodies — asserting equal results query by query; (2) times loading a ~1M-triple KG into the
store (in memory and on disk) and into a KnowledgeGraph (from_id_triples), in triples per second.
"""
import importlib.util, tempfile, time
from collections import Counter

import numpy as np
import pandas as pd

from kgqa_nb.core import Timer
from kgqa_nb.kg import KnowledgeGraph, WD, WDT
from kgqa_nb.loaders import load_codex_m
from kgqa_nb.sparql import OxigraphStore, term_id

HAVE_TOYWORLD = importlib.util.find_spec('kgqa_nb.toyworld') is not None


def _kg(scale=1.0):
    if HAVE_TOYWORLD:
        from kgqa_nb.toyworld import make_toyworld
        return make_toyworld(seed=0, scale=scale)
    return load_codex_m()


def _workload(kg: KnowledgeGraph, n: int, seed: int = 0):
    "n queries (SELECT, CONSTRUCT) over existing paths of the KG, so most return something."
    rng = np.random.default_rng(seed)
    E, R = kg.entity_ids, kg.relation_ids
    out_csr = kg.out_csr
    qs = []
    kinds = ['one_hop', 'two_hop', 'intersection', 'construct']
    while len(qs) < n:
        kind = kinds[len(qs) % 4]
        e = int(rng.integers(kg.num_triples)); h, r, t = int(kg.head[e]), int(kg.rel[e]), int(kg.tail[e])
        if kind == 'one_hop':
            qs.append((kind, f'SELECT ?x WHERE {{ wd:{E[h]} wdt:{R[r]} ?x }}'))
            continue
        nbr, eid, _ = out_csr(t)
        if kind in ('two_hop', 'construct'):
            if not len(eid): continue
            r2 = int(kg.rel[eid[rng.integers(len(eid))]])
            body = f'wd:{E[h]} wdt:{R[r]} ?m . ?m wdt:{R[r2]} ?x .'
            qs.append((kind, f'SELECT ?m ?x WHERE {{ {body} }}' if kind == 'two_hop' else f'CONSTRUCT {{ {body} }} WHERE {{ {body} }}'))
            continue
        ins = np.flatnonzero(kg.tail == t)  # another triple into the same answer: a second seed
        ins = ins[kg.head[ins] != h]
        if not len(ins): continue
        e2 = int(ins[rng.integers(len(ins))])
        qs.append((kind, f'SELECT ?x WHERE {{ wd:{E[h]} wdt:{R[r]} ?x . wd:{E[int(kg.head[e2])]} wdt:{R[int(kg.rel[e2])]} ?x }}'))
    return qs


def _rdflib_id(t):
    import rdflib
    if isinstance(t, rdflib.URIRef):
        s = str(t)
        for base in (WD, WDT):
            if s.startswith(base): return s[len(base):]
        return s
    return None if t is None else str(t)


def _canon_ox(kind, res):
    if kind == 'construct': return Counter(tuple(term_id(x) for x in tr) for tr in res)
    return Counter(tuple(sorted((k, term_id(v)) for k, v in row.items())) for row in res)


def _canon_rdflib(kind, res):
    if kind == 'construct': return Counter(tuple(_rdflib_id(x) for x in tr) for tr in res)
    return Counter(tuple(sorted((str(k), _rdflib_id(v)) for k, v in row.asdict().items())) for row in res)


def compare_engines(kg: KnowledgeGraph, n_queries: int) -> dict:
    import rdflib
    from kgqa_nb.kg import SPARQL_PREFIXES
    with Timer() as t_ox: store = OxigraphStore.from_kg(kg)
    nt = ''.join(kg.iter_ntriples())
    with Timer() as t_rl:
        g = rdflib.Graph(); g.parse(data=nt, format='nt')
    qs = _workload(kg, n_queries)
    store.select(qs[0][1]); list(g.query(qs[0][1], initNs=SPARQL_PREFIXES))  # warm-up: first-query parser set-up
    ox_s, rl_s, rows = Counter(), Counter(), 0
    for kind, q in qs:
        t0 = time.perf_counter()
        a = store.construct(q) if kind == 'construct' else store.select(q)
        ox_s[kind] += time.perf_counter() - t0
        t0 = time.perf_counter()
        b = g.query(q, initNs=SPARQL_PREFIXES)
        b = list(b)
        rl_s[kind] += time.perf_counter() - t0
        ca, cb = _canon_ox(kind, a), _canon_rdflib(kind, b)
        assert ca == cb, f'results differ for {q}: {len(a)} vs {len(b)}'
        rows += len(a)
    tot_ox, tot_rl = sum(ox_s.values()), sum(rl_s.values())
    return dict(kg=kg.name, kg_triples=kg.num_triples, rdf_triples=len(store), n_queries=len(qs), result_rows=rows,
                queries_by_kind=dict(Counter(k for k, _ in qs)), results_equal=True,
                oxigraph_s=round(tot_ox, 4), rdflib_s=round(tot_rl, 4), speedup_vs_rdflib=round(tot_rl / tot_ox, 1),
                oxigraph_s_by_kind={k: round(v, 4) for k, v in ox_s.items()}, rdflib_s_by_kind={k: round(v, 4) for k, v in rl_s.items()},
                load_oxigraph_s=round(t_ox.s, 3), load_rdflib_s=round(t_rl.s, 3), load_ratio=round(t_rl.s / t_ox.s, 1))


def load_speed(target_triples: int) -> dict:
    "Time loading a KG of about `target_triples` triples into the store (memory, disk) and into a KnowledgeGraph."
    if HAVE_TOYWORLD:
        from kgqa_nb.toyworld import make_toyworld
        base = make_toyworld(seed=0, scale=1.0).num_triples
        with Timer() as tg: kg = make_toyworld(seed=0, scale=target_triples / base)
    else:  # a synthetic random KG of the requested size
        rng = np.random.default_rng(0); V, R = max(1000, target_triples // 10), 50
        with Timer() as tg:
            kg = KnowledgeGraph(rng.integers(V, size=target_triples), rng.integers(R, size=target_triples), rng.integers(V, size=target_triples),
                                [f'Q{i + 1}' for i in range(V)], [f'P{i + 1}' for i in range(R)], name=f'random({target_triples})')
    E = kg.num_triples
    ids = pd.DataFrame(dict(h=np.asarray(kg.entity_ids, dtype=object)[kg.head], r=np.asarray(kg.relation_ids, dtype=object)[kg.rel],
                            t=np.asarray(kg.entity_ids, dtype=object)[kg.tail]))
    with Timer() as tk: KnowledgeGraph.from_id_triples(ids)
    with Timer() as tm: mem = OxigraphStore.from_kg(kg)
    n_rdf = len(mem); del mem
    with Timer() as tf: facts_only = OxigraphStore.from_kg(kg, labels=False)
    del facts_only
    with tempfile.TemporaryDirectory() as d:
        with Timer() as td: disk = OxigraphStore.from_kg(kg, f'{d}/store')
        del disk
    return dict(kg=kg.name, kg_triples=E, rdf_triples_with_labels=n_rdf, make_kg_s=round(tg.s, 2),
                from_id_triples_s=round(tk.s, 3), from_id_triples_triples_per_s=round(E / tk.s),
                oxigraph_memory_s=round(tm.s, 3), oxigraph_memory_rdf_triples_per_s=round(n_rdf / tm.s),
                oxigraph_memory_facts_only_s=round(tf.s, 3), oxigraph_memory_facts_only_triples_per_s=round(E / tf.s),
                oxigraph_disk_s=round(td.s, 3), oxigraph_disk_rdf_triples_per_s=round(n_rdf / td.s))


def run(quick: bool = False) -> dict:
    kg = _kg(0.3 if quick else 1.0)
    return dict(queries=compare_engines(kg, 40 if quick else 200), load=load_speed(50_000 if quick else 1_000_000))


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
