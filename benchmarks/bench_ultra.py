"""ULTRA inference on the CPU (or GPU): seconds per query batch and peak memory of our message passing against what a user
would otherwise run, on ILPC2022-small and a 30k-entity toy-world subgraph, for a few batch sizes.

Paths compared, all on the same model, graph and queries, each asserted to give the same logits:
- `fused`: the default on a CPU, `ultra.fused_relational_sum` (the small C++ kernel compiled by `ultra.fused_kernel`);
- `portable`: the pure-PyTorch grouped CSR products (`KGQA_ULTRA_KERNEL=torch`; what runs on a GPU and under autograd);
- `per_edge`: naive per-edge messages (index_select, multiply, index_add_), which is what the reference implementation's
  PyG fallback materialises;
- `original_rspmm`: the original ULTRA code's fused CPU kernel (`rspmm_add_mul_forward_cpu`), timed only when
  `ULTRA_RSPMM_SOURCE` names a folder holding the original `rspmm.cpp` with the headers it includes (the original
  repository's `ultra/rspmm/source`, plus the operator header); it is built with torch's extension loader (needs
  ninja) and the original's flags (-Ofast, OpenMP). Nothing of it is part of this project. Its CPU forward reads the
  edge count as `edge_index.size(0)` (= 2), so the last node row receives no messages; the benchmark appends an empty
  node row so that both compute the same sums.
Times are medians of repeated calls after a warm-up, taken in the same process with the paths interleaved: wall seconds
with the configured threads, and process CPU seconds with one thread (`one_thread_*`), which a busy shared machine
disturbs least; only the ratios within one run compare."""
import gc, os, time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from kgqa_nb.loaders import load_ilpc2022
from kgqa_nb.toyworld import make_toyworld
import kgqa_nb.ultra as ultra_mod
from kgqa_nb.ultra import Ultra, fused_kernel, load_ultra, ultra_graph


def _per_edge_forward(model: Ultra, g, h, r):
    "Baseline: the same model with naive per-edge messages (2E x B x d materialised per layer)."
    def layer(conv, x, boundary, ei, et, rel):
        N, B, d = x.shape
        agg = boundary.reshape(N, B * d).clone()
        agg.index_add_(0, ei[0], x.reshape(N, B * d).index_select(0, ei[1]) * rel.reshape(rel.shape[0], B * d).index_select(0, et))
        return conv.combine(x, agg.view(N, B, d))
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


class _env:
    "Set an environment variable for a block."
    def __init__(self, k, v): self.k, self.v = k, v
    def __enter__(self): self.old = os.environ.get(self.k); os.environ[self.k] = self.v
    def __exit__(self, *a):
        if self.old is None: os.environ.pop(self.k, None)
        else: os.environ[self.k] = self.old


def _portable_forward(model, g, h, r):
    with _env('KGQA_ULTRA_KERNEL', 'torch'): return model(g, h, r)


def _original_kernel():
    "The original rspmm CPU forward built from ULTRA_RSPMM_SOURCE, or (None, reason)."
    src = os.environ.get('ULTRA_RSPMM_SOURCE')
    if not src: return None, 'ULTRA_RSPMM_SOURCE not set'
    cpp = Path(src) / 'rspmm.cpp' if Path(src).is_dir() else Path(src)
    try:
        from torch.utils import cpp_extension
        mod = cpp_extension.load('ultra_rspmm_original', [str(cpp)], extra_cflags=['-Ofast', '-fopenmp', '-DAT_PARALLEL_OPENMP'])
        return mod.rspmm_add_mul_forward_cpu, None
    except Exception as e:  # a missing toolchain or source is a reason to skip the row, not a benchmark failure
        return None, f'{type(e).__name__}: {str(e).splitlines()[0][:200]}'


def _original_forward(model, g, h, r, kernel):
    "The model with the original fused kernel for every layer's message-and-sum (edges from our grouped adjacency)."
    def edges(adj):
        key = f'_orig_{id(adj)}'
        if key not in g.__dict__:
            rows = torch.repeat_interleave(torch.arange(len(adj.pair_dst)), adj.crow[1:] - adj.crow[:-1])
            ei = torch.stack([adj.pair_dst[rows], adj.col]); o = (ei[0] * (adj.num_nodes + 1) + ei[1]).argsort()
            g.__dict__[key] = (ei[:, o].contiguous(), adj.pair_type[rows][o].contiguous(), adj.val[o].contiguous())
        return g.__dict__[key]
    def forward(self, x, boundary, adj, relation, chunk_size=None):
        N, B, d = x.shape
        ei, et, w = edges(adj)
        xin = torch.cat([x.reshape(N, B * d), x.new_zeros(1, B * d)])  # an empty last row (see the module docstring)
        agg = boundary.reshape(N, B * d) + kernel(ei, et, w, relation.reshape(relation.shape[0], B * d).contiguous(), xin)[:N]
        return self.combine(x, agg.view(N, B, d))
    fwd = ultra_mod.GeneralizedRelationalConv.forward
    ultra_mod.GeneralizedRelationalConv.forward = forward
    try: return model(g, h, r)
    finally: ultra_mod.GeneralizedRelationalConv.forward = fwd


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


def _peak(fn, dev):
    "Peak memory of one call of `fn()` in MiB above the starting point (CUDA: max allocated; CPU: peak RSS)."
    gc.collect()
    if dev.type == 'cuda': torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    else: _reset_peak_rss(); base = _rss_mib('VmRSS') or 0.0
    fn()
    return (torch.cuda.max_memory_allocated() - base) / 2**20 if dev.type == 'cuda' else (_rss_mib('VmHWM') or float('nan')) - base


def _interleaved(fns: dict, dev, reps: int) -> tuple:
    "Median wall and process-CPU seconds per path, the paths called in turn `reps` times after one warm-up call each."
    for f in fns.values(): f()
    wall, cpu = {k: [] for k in fns}, {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            if dev.type == 'cuda': torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time(); f()
            if dev.type == 'cuda': torch.cuda.synchronize()
            wall[k].append(time.perf_counter() - t0); cpu[k].append(time.process_time() - c0)
    med = lambda d: {k: float(np.median(v)) for k, v in d.items()}
    return med(wall), med(cpu)


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
    fused = dev.type == 'cpu' and fused_kernel() is not None
    orig, why = _original_kernel() if dev.type == 'cpu' else (None, 'CPU kernel only')
    out = dict(device=str(dev), threads=torch.get_num_threads(), fused_kernel=fused, original_rspmm=why or 'built from ULTRA_RSPMM_SOURCE',
               memory='peak MiB above the pre-call level: CUDA max_memory_allocated, CPU peak RSS (VmHWM after clear_refs)', rows=[])
    for name, kg, queries in _graphs(quick):
        g = ultra_graph(kg, dev); g.adj; g.rel_adj
        for bs in ([4, 16] if quick or kg.num_entities > 10_000 else [4, 16, 32]):
            h = torch.as_tensor(queries[:bs, 0], device=dev); r = torch.as_tensor(queries[:bs, 1], device=dev)
            fns = dict(ours=lambda: model(g, h, r))
            if fused: fns['portable'] = lambda: _portable_forward(model, g, h, r)
            if orig is not None: fns['original_rspmm'] = lambda: _original_forward(model, g, h, r, orig)
            small = kg.num_entities < 10_000 or bs <= 4
            if small: fns['per_edge'] = lambda: _per_edge_forward(model, g, h, r)
            ref = fns['ours']()
            for k, f in fns.items(): torch.testing.assert_close(f(), ref, rtol=1e-4, atol=1e-4, msg=lambda m: f'{k}: {m}')
            sec, _ = _interleaved(fns, dev, 1 if quick else 3)
            row = dict(graph=name, entities=kg.num_entities, edges=g.num_edges, batch_size=bs, path='fused' if fused else 'portable',
                       seconds_per_batch=round(sec['ours'], 3), ms_per_query=round(1000 * sec['ours'] / bs, 1),
                       peak_mib=round(_peak(fns['ours'], dev), 1))
            for k in ('portable', 'original_rspmm', 'per_edge'):
                if k in sec: row.update({f'{k}_seconds': round(sec[k], 3), f'speedup_vs_{k}': round(sec[k] / sec['ours'], 2)})
            if dev.type == 'cpu':  # one thread, process CPU time: the comparison that a busy shared machine disturbs least
                threads = torch.get_num_threads(); torch.set_num_threads(1)
                try: _, cpu = _interleaved({k: f for k, f in fns.items() if k != 'per_edge'}, dev, 1 if quick else 3)
                finally: torch.set_num_threads(threads)
                row['one_thread_cpu_seconds'] = {k: round(v, 3) for k, v in cpu.items()}
                row['one_thread_speedup'] = {f'vs_{k}': round(v / cpu['ours'], 2) for k, v in cpu.items() if k != 'ours'}
            if 'portable' in fns: row['portable_peak_mib'] = round(_peak(fns['portable'], dev), 1)
            out['rows'].append(row)
            print(row, flush=True)
    return out


if __name__ == '__main__':
    import json
    print(json.dumps(run(quick=True), indent=1))
