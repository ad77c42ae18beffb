"""ULTRAG per-query latency: SEPPR pruning to a k-node subgraph (the paper's k = 30,000), building the executor's graph on it,
and executing a 2-hop and a 2-intersection-then-project query with the neural executor (UltraQuery: one projection at a
time, and with the ready projections batched, `ultrag.execute_batched`) and the symbolic one,
on a toy world of ~33k entities (quick: the 4.7k-entity default world, k = 3,000). Wall seconds and, for the neural
executor, CPU seconds of the process (2 threads), which a busy shared machine inflates less. The batched neural execution
runs twice, on the fused CPU kernel (`ultra.fused_kernel`, the default where it builds) and on the portable PyTorch path
(`KGQA_ULTRA_KERNEL=torch`), with equal fuzzy sets asserted."""
import os, time

import numpy as np
import torch

from kgqa_nb.dsl import Entity, Projection, Intersection, SymbolicExecutor
from kgqa_nb.toyworld import make_toyworld
from kgqa_nb.ultra import load_ultra, UltraQueryExecutor
from kgqa_nb.ultrag import SEPPRPruner, crisp_set, execute_batched


def _queries(kg, n, rng):
    "n (query, leaf IDs) pairs: alternately a 2-hop chain and AND of two 1-hop projections followed by a projection, on existing paths."
    out, ids, R = [], kg.entity_ids, kg.relation_ids
    while len(out) < n:
        e = int(rng.integers(kg.num_triples)); h, r1, t = kg.head[e], kg.rel[e], kg.tail[e]
        nxt = np.flatnonzero(kg.head == t)
        if not len(nxt): continue
        r2 = kg.rel[nxt[rng.integers(len(nxt))]]
        if len(out) % 2 == 0: out.append((Projection(Projection(Entity(ids[h]), R[r1]), R[r2]), [ids[h]]))
        else:
            into = np.flatnonzero((kg.tail == t) & (kg.head != h))
            if not len(into): continue
            o = into[rng.integers(len(into))]
            out.append((Projection(Intersection((Projection(Entity(ids[h]), R[r1]), Projection(Entity(ids[kg.head[o]]), R[kg.rel[o]]))), R[r2]),
                        [ids[h], ids[kg.head[o]]]))
    return out


@torch.no_grad()
def run(quick: bool = False) -> dict:
    torch.set_num_threads(2)
    kg = make_toyworld(seed=0, scale=1.0 if quick else 7.0, missing_fraction=0.0)
    k, n = (3_000, 4) if quick else (30_000, 10)
    model, pruner = load_ultra('ultraquery'), SEPPRPruner(k)
    rows = []
    for q, leaves in _queries(kg, n, np.random.default_rng(0)):
        leaf_sets = {e: crisp_set(kg, [e]) for e in leaves}
        t0 = time.perf_counter(); pr = pruner.prune(kg, leaf_sets); t1 = time.perf_counter()
        ex = UltraQueryExecutor(model, pr.kg); t2 = time.perf_counter()
        sub = {e: x[torch.as_tensor(pr.nodes)] for e, x in leaf_sets.items()}
        c0 = time.process_time(); ex.execute(q, sub); t3 = time.perf_counter(); neural_cpu = time.process_time() - c0
        c1, w1 = time.process_time(), time.perf_counter(); fused = execute_batched(ex, q, sub)
        batched_s, batched_cpu = time.perf_counter() - w1, time.process_time() - c1
        os.environ['KGQA_ULTRA_KERNEL'] = 'torch'  # the same batched execution on the portable PyTorch path
        try:
            c2, w2 = time.process_time(), time.perf_counter(); portable = execute_batched(ex, q, sub)
            portable_s, portable_cpu = time.perf_counter() - w2, time.process_time() - c2
        finally: os.environ.pop('KGQA_ULTRA_KERNEL')
        torch.testing.assert_close(fused, portable, rtol=1e-4, atol=1e-4)
        t4 = time.perf_counter()
        sym = SymbolicExecutor(pr.kg); t4b = time.perf_counter()
        sym.execute(q, sub); t5 = time.perf_counter()
        rows.append(dict(projections=sum(isinstance(x, Projection) for x in [q, q.query] + list(getattr(q.query, 'operands', ()))),
                         sub_entities=pr.kg.num_entities, sub_triples=pr.kg.num_triples, seppr_s=t1 - t0, build_graph_s=t2 - t1,
                         neural_s=t3 - t2, neural_cpu_s=neural_cpu, neural_batched_s=batched_s, neural_batched_cpu_s=batched_cpu,
                         neural_batched_portable_s=portable_s, neural_batched_portable_cpu_s=portable_cpu,
                         symbolic_build_s=t4b - t4, symbolic_s=t5 - t4b))
    med = {c: round(float(np.median([r[c] for r in rows])), 4) for c in rows[0] if c.endswith('_s')}
    from kgqa_nb.ultra import fused_kernel
    out = dict(device='cpu', threads=2, fused_kernel=fused_kernel() is not None, kg=kg.name, kg_entities=kg.num_entities, kg_triples=kg.num_triples, k=k, queries=len(rows),
               median_seconds=med, mean_sub_entities=float(np.mean([r['sub_entities'] for r in rows])),
               mean_sub_triples=float(np.mean([r['sub_triples'] for r in rows])),
               rows=[{c: round(v, 4) if isinstance(v, float) else v for c, v in r.items()} for r in rows])
    print(out['median_seconds'], flush=True)
    return out


if __name__ == '__main__':
    import json
    print(json.dumps(run(quick=True), indent=1))
