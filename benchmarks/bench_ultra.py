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
disturbs least; only the ratios within one run compare.

`large_graph` (also `python benchmarks/bench_ultra.py --large-graph`, which writes
benchmarks/results/ultra_large_graph.json): one forward pass at batch 16 on one thread on a 30,000-entity graph (the
toy world at scale 7, seed 0, its 30,000 highest-degree entities: 252,139 triples), wall, user and system seconds from
`resource.getrusage` around each call and the minor page faults (system time as a share of wall time, and of CPU time,
which is what the wall share is on an idle machine: a loaded one stretches wall time), medians over interleaved repeats, for `ours` (the fused
kernel with the forward pass's scratch tensors, `ultra.ForwardBuffers`), `fused_allocating` (the same kernel allocating
every layer's tensors anew, as before the buffers; each such 120 MB tensor is a fresh mapping that the operating system
zeroes page by page) and `portable`; ours must equal fused_allocating bit for bit."""
import gc, os, resource, time
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
    def forward(self, x, boundary, adj, relation, chunk_size=None, buffers=None):  # the original kernel allocates as it did
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
    if dev.type == 'cpu' and fused: out['large_graph'] = large_graph(model, quick); print(out['large_graph'], flush=True)
    return out


def _usage(fn) -> dict:
    "Wall, user and system seconds and minor page faults of one call of `fn()` (this process, getrusage)."
    gc.collect()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(); fn()
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    return dict(wall=t1 - t0, user=r1.ru_utime - r0.ru_utime, sys=r1.ru_stime - r0.ru_stime, minor_faults=r1.ru_minflt - r0.ru_minflt)


def _allocating_forward(model, g, h, r):
    "The fused path without the forward pass's scratch tensors (every layer allocates anew), as before `ForwardBuffers`."
    fb = ultra_mod.ForwardBuffers
    ultra_mod.ForwardBuffers = lambda: None
    try: return model(g, h, r)
    finally: ultra_mod.ForwardBuffers = fb


@torch.no_grad()
def large_graph(model=None, quick: bool = False, batch_size: int = 16) -> dict:
    "System time of a forward pass on a 30,000-entity graph with one thread: ours, fused_allocating and portable (medians)."
    model = model or load_ultra('ultra_3g')
    tw = make_toyworld(seed=0, scale=7.0, missing_fraction=0.0)
    sub, _ = tw.induced_subgraph(np.argsort(-tw.degree(), kind='stable')[:30_000], name='toyworld[30000]')
    g = ultra_graph(sub); g.adj; g.rel_adj
    q = sub.triples[np.random.default_rng(0).choice(sub.num_triples, batch_size, replace=False)]
    h, r = torch.as_tensor(q[:, 0]), torch.as_tensor(q[:, 1])
    fns = dict(ours=lambda: model(g, h, r), fused_allocating=lambda: _allocating_forward(model, g, h, r),
               portable=lambda: _portable_forward(model, g, h, r))
    threads = torch.get_num_threads(); torch.set_num_threads(1)
    try:
        ref = {k: f() for k, f in fns.items()}  # also the warm-up call of each path
        runs = {k: [] for k in fns}
        for _ in range(1 if quick else 5):
            for k, f in fns.items(): runs[k].append(_usage(f))
    finally: torch.set_num_threads(threads)
    if fused_kernel() is None: raise RuntimeError('the fused kernel is not built: nothing to compare')
    med = {k: {m: float(np.median([u[m] for u in v])) for m in v[0]} for k, v in runs.items()}
    row = dict(graph=sub.name, entities=sub.num_entities, edges=g.num_edges, batch_size=batch_size, threads=1, repeats=len(runs['ours']),
               identical_to_fused_allocating=bool(torch.equal(ref['ours'], ref['fused_allocating'])),
               max_abs_diff_vs_portable=float((ref['ours'] - ref['portable']).abs().max()))
    for k, m in med.items():
        row[k] = dict(wall_s=round(m['wall'], 3), user_s=round(m['user'], 3), sys_s=round(m['sys'], 3),
                      sys_share_of_wall=round(m['sys'] / m['wall'], 3),
                      sys_share_of_cpu=round(m['sys'] / (m['user'] + m['sys']), 3), minor_faults=int(m['minor_faults']))
    row['speedup_vs_portable'] = dict(wall=round(med['portable']['wall'] / med['ours']['wall'], 2),
                                      cpu=round(sum(med['portable'][x] for x in ('user', 'sys')) / sum(med['ours'][x] for x in ('user', 'sys')), 2))
    row['speedup_vs_fused_allocating'] = dict(wall=round(med['fused_allocating']['wall'] / med['ours']['wall'], 2),
                                              cpu=round(sum(med['fused_allocating'][x] for x in ('user', 'sys')) / sum(med['ours'][x] for x in ('user', 'sys')), 2))
    return row


if __name__ == '__main__':
    import json, sys
    if '--large-graph' in sys.argv:
        from kgqa_nb.core import Timer, provenance
        with Timer() as t: res = large_graph(quick='--quick' in sys.argv)
        rec = dict(topic='ultra_large_graph', quick='--quick' in sys.argv, seconds=round(t.s, 1), results=res,
                   provenance=provenance(dict(quick='--quick' in sys.argv), benchmark='ultra_large_graph'))
        dest = Path(__file__).resolve().parent / 'results' / 'ultra_large_graph.json'
        if not rec['quick']: dest.write_text(json.dumps(rec, indent=1) + '\n')
        print(json.dumps(res, indent=1))
    else: print(json.dumps(run(quick=True), indent=1))
