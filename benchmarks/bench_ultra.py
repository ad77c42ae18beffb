"""ULTRA inference: seconds per query batch and peak memory of our pure-PyTorch message passing (grouped CSR products,
chunked) against the baseline a user would otherwise write without the fused rspmm kernel — per-edge messages
(index_select, multiply, index_add_), which is also what the reference's PyG fallback materialises — on ILPC2022-small
and a 30k-entity toy-world subgraph, for a few batch and chunk sizes. On the CPU it also times the same layers with torch's
generic sparse product in place of the CSR row-reduction kernel that `ultra.csr_sum` uses (the previous implementation),
and checks that both give identical logits."""
import gc, time

import numpy as np
import torch
from torch.nn import functional as F

from kgqa_nb.kg import load_ilpc2022
from kgqa_nb.toyworld import make_toyworld
import kgqa_nb.ultra as ultra_mod
from kgqa_nb.ultra import Ultra, load_ultra, ultra_graph


def _per_edge_forward(model: Ultra, g, h, r):
    "Baseline: the same model with naive per-edge messages (2E x B x d materialised per layer)."
    def layer(conv, x, boundary, ei, et, rel):
        N, B, d = x.shape
        agg = boundary.reshape(N, B * d).clone()
        agg.index_add_(0, ei[0], x.reshape(N, B * d).index_select(0, ei[1]) * rel.reshape(rel.shape[0], B * d).index_select(0, et))
        return F.relu(conv.layer_norm(conv.linear(torch.cat([x, agg.view(N, B, d)], -1))))
    B, dev = len(h), h.device
    rm, em = model.relation_model, model.entity_model
    bnd = torch.zeros(g.num_relations, B, 64, device=dev); bnd[r, torch.arange(B, device=dev)] = 1
    x = bnd
    for l in rm.layers: x = layer(l, x, bnd, g.rel_edge_index, g.rel_edge_type, l.relation.weight.unsqueeze(1).expand(-1, B, -1)) + x
    R = x.transpose(0, 1); q = R[torch.arange(B, device=dev), r]
    init = torch.zeros(g.num_nodes, B, 64, device=dev); init[h, torch.arange(B, device=dev)] = q
    x = init
    for l in em.layers: x = layer(l, x, init, g.edge_index, g.edge_type, l.relation_projection(R).transpose(0, 1)) + x
    return em.mlp(torch.cat([x, q.unsqueeze(0).expand(g.num_nodes, -1, -1)], -1)).squeeze(-1).t()


def _generic_spmm_forward(model: Ultra, g, h, r):
    "The model with torch's generic CSR product instead of the row-reduction kernel (what `csr_sum` replaced on the CPU)."
    fast = ultra_mod.csr_sum
    ultra_mod.csr_sum = lambda S, x: torch.sparse.mm(S, x)
    try: return model(g, h, r)
    finally: ultra_mod.csr_sum = fast


def _rss_mib(field='VmHWM'):
    "Peak (VmHWM) or current (VmRSS) resident memory of this process in MiB (Linux); None elsewhere."
    try:
        for line in open('/proc/self/status'):
            if line.startswith(field + ':'): return int(line.split()[1]) / 1024
    except OSError: return None


def _reset_peak_rss():
    "Reset the kernel's peak-RSS counter (Linux >= 4.0), so VmHWM measures only what follows."
    try: open('/proc/self/clear_refs', 'w').write('5'); return True
    except OSError: return False


def _measure(fn, dev, reps):
    "Median seconds of `fn()` and its peak memory in MiB above the starting point (CUDA: max allocated; CPU: peak RSS)."
    fn()  # warm-up
    gc.collect()
    if dev.type == 'cuda': torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    else: _reset_peak_rss(); base = _rss_mib('VmRSS') or 0.0
    times = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn()
        if dev.type == 'cuda': torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if dev.type == 'cuda' else (_rss_mib('VmHWM') or float('nan')) - base
    return float(np.median(times)), peak


def _graphs(quick):
    sp = load_ilpc2022()
    yield 'ilpc2022-small', sp.graph, sp.test
    tw = make_toyworld(seed=0, scale=1.0 if quick else 7.0, missing_fraction=0.0)
    n = min(tw.num_entities, 5_000 if quick else 30_000)
    sub, _ = tw.induced_subgraph(np.argsort(-tw.degree(), kind='stable')[:n], name=f'toyworld[{n}]')
    yield sub.name, sub, sub.triples[np.random.default_rng(0).choice(sub.num_triples, 64, replace=False)]


@torch.no_grad()
def run(quick: bool = False) -> dict:
    dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    model = load_ultra('ultra_3g', device=dev)
    out = dict(device=str(dev), memory='peak MiB above the pre-call level: CUDA max_memory_allocated, CPU peak RSS (VmHWM after clear_refs)', rows=[])
    settings = [(4, 1 << 18), (16, 1 << 20)] if quick else [(4, 1 << 18), (16, 1 << 18), (16, 1 << 20), (32, 1 << 20)]
    for name, kg, queries in _graphs(quick):
        g = ultra_graph(kg, dev); g.adj; g.rel_adj
        for bs, chunk in settings:
            model.chunk_size = chunk
            h = torch.as_tensor(queries[:bs, 0], device=dev); r = torch.as_tensor(queries[:bs, 1], device=dev)
            ours, mem = _measure(lambda: model(g, h, r), dev, 1 if quick else 3)
            row = dict(graph=name, entities=kg.num_entities, edges=g.num_edges, batch_size=bs, chunk_size=chunk,
                       seconds_per_batch=round(ours, 3), ms_per_query=round(1000 * ours / bs, 1), peak_mib=round(mem, 1))
            if chunk == settings[-1][1] or quick:
                base, bmem = _measure(lambda: _per_edge_forward(model, g, h, r), dev, 1)
                torch.testing.assert_close(model(g, h, r), _per_edge_forward(model, g, h, r), rtol=1e-3, atol=1e-3)
                row.update(per_edge_seconds=round(base, 3), per_edge_peak_mib=round(bmem, 1), speedup_vs_per_edge=round(base / ours, 2))
                if dev.type == 'cpu':
                    gen, _ = _measure(lambda: _generic_spmm_forward(model, g, h, r), dev, 1 if quick else 3)
                    assert torch.equal(model(g, h, r), _generic_spmm_forward(model, g, h, r)), 'row-reduction and generic products differ'
                    row.update(generic_spmm_seconds=round(gen, 3), speedup_vs_generic_spmm=round(gen / ours, 2))
            out['rows'].append(row)
            print(row, flush=True)
    return out


if __name__ == '__main__':
    import json
    print(json.dumps(run(quick=True), indent=1))
