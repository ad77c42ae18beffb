"""Wikidata-sized rehearsal on one machine (issue 15): the toy world scaled towards ogbl-wikikg2's size (GTSQA's KG:
~2.4M entities, ~16M triples) through every stage the GTSQA rebuild needs, each timed with its peak memory:

1. KG build: `make_toyworld(scale)` and the undirected CSR;
2. the embedded SPARQL store on disk (`OxigraphStore.from_kg(path=...)`, built once per KG fingerprint and reused: the
   reopen is timed too);
3. Algorithm-1 seed-subgraph sampling (`sample_seed_subgraphs`, 1,000 subgraphs);
4. 1,000 offline datapoints with SPARQL validation (`run_generation`, offline writer and paraphraser);
5. 1,000 question graphs (k-hop, PPR top-N within the triple caps, GT re-added, confounders) with their SP labels
   (`build_question_graphs`), and the SP labels alone timed again on the built graphs.

The baseline a user would otherwise have is the same pipeline at the size it was written for; the point here is whether
it fits and how long GTSQA's 32,099 questions take, so `extrapolation` turns the measured per-question time into hours on a
16-core box (question graphs are independent per question: one process per core over a KG loaded once).

On demand only, never in CI: `make bench` (benchmarks/run.py without --only) skips it because of ON_DEMAND below; it takes
tens of minutes, GBs of memory and disk. Run it by name:
    KGQA_PROGRESS=0 KGQA_SCALE_TRIPLES=4000000 nice -n 10 .venv/bin/python benchmarks/run.py --only scale
and, after a full run of a size, its k-hop comparison alone: `.venv/bin/python benchmarks/bench_scale.py --khop-only` (same variables).
Environment: KGQA_SCALE_TRIPLES (KG size, default 4M; 100k with --quick), KGQA_SCALE_QUESTIONS (sampled subgraphs and offline
datapoints, default 1000), KGQA_SCALE_QGRAPHS (question graphs built from those records, default all of them),
KGQA_SCALE_STEP_QUESTIONS (questions timed step by step, default 100; the first 30 also time the k-hop step against its
previous implementation, same edge ids required), KGQA_SCALE_DIR (stores, runs and graphs; default
the scratch folder's scale/). Each size's `measured` record is kept in benchmarks/results/scale.json under `runs`, and the
extrapolation fits all sizes measured so far.
Peak memory is the process's resident-set high-water mark (VmHWM, reset before each stage through /proc/self/clear_refs).
Time per question is CPU seconds (process_time): on a shared machine wall time also counts other people's work.
"""
import gc, json, os, shutil, time
from pathlib import Path

import numpy as np

ON_DEMAND = True  # benchmarks/run.py runs this topic only when asked for by name (--only scale)
GTSQA_QUESTIONS = 30_477 + 1_622  # SynthKGQA Table 1: train + test
TRIPLES_PER_SCALE = 35_079  # toy-world triples at scale 1 (benchmarks/results/toyworld.json); linear in scale
CORES = 16
WIKIKG2_TRIPLES = 16_000_000  # GTSQA's KG: ogbl-wikikg2 filtered, ≈ 2.4M entities, ≈ 16M triples, 535 relations (issue 15)


def _status() -> dict:
    out = {}
    for line in Path('/proc/self/status').read_text().splitlines():
        k, _, v = line.partition(':')
        if k in ('VmRSS', 'VmHWM'): out[k] = int(v.split()[0]) / 1024  # MiB
    return out


def _reset_peak():
    try: Path('/proc/self/clear_refs').write_text('5')  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError: pass


class Stage:
    "Times a block and records its wall seconds, CPU seconds, peak RSS and RSS after, in MiB."
    def __init__(self, res: dict, name: str): self.res, self.name = res, name
    def __enter__(self):
        gc.collect(); _reset_peak()
        self.rss0, self.t0, self.c0 = _status().get('VmRSS', 0.), time.perf_counter(), time.process_time()
        print(f'  {self.name} ...', flush=True); return self
    def __exit__(self, *exc):
        s = _status()
        self.res[self.name] = dict(seconds=round(time.perf_counter() - self.t0, 2), cpu_seconds=round(time.process_time() - self.c0, 2),
                                   rss_before_mib=round(self.rss0), peak_rss_mib=round(s.get('VmHWM', 0.)), rss_after_mib=round(s.get('VmRSS', 0.)),
                                   **getattr(self, 'extra', {}))
        print(f"  {self.name}: {self.res[self.name]}", flush=True)


def _dir_mib(p: Path) -> float:
    return sum(f.stat().st_size for f in p.rglob('*') if f.is_file()) / 2**20


def _steps(kg, recs, n_nodes: int, max_triples: int) -> dict:
    "Mean seconds per question of each step of `build_question_graph` (k-hop, PPR prune, confounders, SP labels) on `recs`."
    from kgqa_nb.qgraphs import (record_question, khop_edges, ppr_prune, metapath_edges, question_sp_labels, _cap_confounders,
                                 _gt_metapaths, question_seed)
    t = dict(khop=0., ppr_prune=0., confounders=0., sp_labels=0.)
    for rec in recs.to_dict('records'):
        q = record_question(kg, rec); rng = np.random.default_rng(question_seed(0, rec['id']))
        seeds, answers = np.unique(q['seeds']), np.unique(q['answers'])
        mps = _gt_metapaths(q['gt_triples'], seeds, answers, kg.num_relations)
        k = max(3, int(q['hops'] or max((len(m) for _, m in mps), default=1)))
        t0 = time.process_time(); hood, _ = khop_edges(kg, seeds, k, 500_000, rng)
        t1 = time.process_time(); kept, _ = ppr_prune(kg, hood, seeds, n_nodes, max_triples, rng=rng)
        t2 = time.process_time(); conf = [_cap_confounders(*metapath_edges(kg, s, m, rng=rng), 650, rng) for s, m in mps]
        t3 = time.process_time(); ids = np.unique(np.concatenate([kept, *conf]))
        question_sp_labels(kg.head[ids], kg.tail[ids], seeds, answers)
        t4 = time.process_time()
        for key, a, b in (('khop', t0, t1), ('ppr_prune', t1, t2), ('confounders', t2, t3), ('sp_labels', t3, t4)): t[key] += b - a
    return dict(questions=len(recs), cpu_seconds_per_question={k: round(v / max(len(recs), 1), 4) for k, v in t.items()})


def _previous_khop(kg, seeds, k, max_edges, rng):
    "The k-hop step as it was before 810fb28, the baseline: BFS frontiers de-duplicated by np.unique, three int64 passes over every triple."
    csr = kg.und_csr
    dist = np.full(kg.num_entities, -1, np.int64); frontier = np.unique(np.asarray(seeds, np.int64)); dist[frontier] = 0
    for d in range(1, k):
        starts = csr.indptr[frontier]; lens = csr.indptr[frontier + 1] - starts
        if lens.sum() == 0: break
        nxt = csr.nbr[np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())]
        frontier = np.unique(nxt[dist[nxt] < 0]); dist[frontier] = d
    big = np.iinfo(np.int64).max
    dh, dt = dist[kg.head], dist[kg.tail]
    level = np.minimum(np.where(dh >= 0, dh, big), np.where(dt >= 0, dt, big))
    edges = np.flatnonzero(level <= k - 1)
    if len(edges) <= max_edges: return edges, False
    lv = level[edges]; cum = np.cumsum(np.bincount(lv, minlength=k))
    L = int(np.searchsorted(cum, max_edges, side='right'))
    inner, last = edges[lv < L], edges[lv == L]
    return np.sort(np.concatenate([inner, rng.choice(last, max_edges - len(inner), replace=False)])), True


def khop_versus_previous(kg, recs, max_edges: int = 500_000) -> dict:
    "CPU seconds per question of `qgraphs.khop_edges` and of the previous k-hop on the same questions; their edge ids must be equal."
    from kgqa_nb.qgraphs import record_question, khop_edges, _gt_metapaths, question_seed
    prev = now = 0.
    for rec in recs.to_dict('records'):
        q = record_question(kg, rec); seeds, answers = np.unique(q['seeds']), np.unique(q['answers'])
        k = max(3, int(q['hops'] or max((len(m) for _, m in _gt_metapaths(q['gt_triples'], seeds, answers, kg.num_relations)), default=1)))
        t0 = time.process_time(); a = _previous_khop(kg, seeds, k, max_edges, np.random.default_rng(question_seed(0, rec['id'])))
        t1 = time.process_time(); b = khop_edges(kg, seeds, k, max_edges, np.random.default_rng(question_seed(0, rec['id'])))
        t2 = time.process_time(); prev += t1 - t0; now += t2 - t1
        if a[1] != b[1] or not np.array_equal(a[0], b[0]): raise AssertionError(f'question {rec["id"]}: k-hop edges differ from the previous implementation')
    n = max(len(recs), 1)
    return dict(questions=len(recs), triples=kg.num_triples, previous_cpu_seconds_per_question=round(prev / n, 4),
                cpu_seconds_per_question=round(now / n, 4), speedup=round(prev / max(now, 1e-9), 2), identical_edges=True)


def run(quick: bool = False) -> dict:
    "Every rehearsal stage at KGQA_SCALE_TRIPLES triples (default 4M; 100k with quick), and the GTSQA extrapolation."
    from kgqa_nb.core import git_state, project_dirs
    from kgqa_nb.kg import kg_fingerprint
    from kgqa_nb.toyworld import make_toyworld
    from kgqa_nb.sparql import OxigraphStore
    from kgqa_nb.sampling import sample_seed_subgraphs
    from kgqa_nb.synthkgqa import GenerationConfig, run_generation
    from kgqa_nb.qgraphs import build_question_graphs, question_sp_labels, _kg_index
    import pandas as pd

    target = int(os.environ.get('KGQA_SCALE_TRIPLES', 100_000 if quick else 4_000_000))
    n_q = int(os.environ.get('KGQA_SCALE_QUESTIONS', 100 if quick else 1000))
    n_g = min(n_q, int(os.environ.get('KGQA_SCALE_QGRAPHS', n_q)))  # question graphs built (of the n_q records)
    n_steps = min(n_g, int(os.environ.get('KGQA_SCALE_STEP_QUESTIONS', 100)))  # questions timed step by step
    n_nodes, max_triples = 2500, 20_000  # the paper's question-graph sizes (PPR entities, triple budget)
    scale = round(target / TRIPLES_PER_SCALE, 2)
    root = Path(os.environ.get('KGQA_SCALE_DIR') or project_dirs.scratch / 'scale')
    commit = (git_state()['commit'] or '')[:12]  # the code that runs: read now, not after tens of minutes
    st: dict = {}
    res = dict(target_triples=target, scale=scale, questions=n_q, question_graphs=n_g, n_nodes=n_nodes, max_triples=max_triples, stages=st,
               machine=dict(cpus=os.cpu_count(), load_average=os.getloadavg(), note='run under nice -n 10 on a machine shared with other work: CPU seconds, not wall seconds, are the basis'))

    with Stage(st, 'kg_build') as s:
        kg = make_toyworld(scale=scale)
        csr = kg.und_csr
        s.extra = dict(entities=kg.num_entities, relations=kg.num_relations, triples=kg.num_triples)
    res.update(entities=kg.num_entities, triples=kg.num_triples, relations=kg.num_relations)
    fp = kg_fingerprint(kg)[:16]

    path = root / f'oxigraph-{fp}'
    with Stage(st, 'store_load') as s:
        reused = path.is_dir() and any(path.iterdir())
        store = OxigraphStore.open(path, read_only=False, isolation='thread') if reused else OxigraphStore.from_kg(kg, path=path, isolation='thread')
        s.extra = dict(reused=reused, quads=len(store), disk_mib=round(_dir_mib(path)))
    del store; gc.collect()
    with Stage(st, 'store_reopen') as s:
        store = OxigraphStore.open(path, read_only=True, isolation='thread')
        s.extra = dict(quads=len(store))

    with Stage(st, 'sampling') as s:
        subs = sample_seed_subgraphs(kg, n_q, seed=0)
        s.extra = dict(subgraphs=len(subs), mean_edges=round(float(np.mean([len(x.edges) for x in subs])), 2))
    del subs

    out = root / f'generation-{fp}-{n_q}'
    shutil.rmtree(out, ignore_errors=True)  # timed from scratch (the store above is reused on purpose)
    with Stage(st, 'generation') as s:
        summary = run_generation(out, GenerationConfig(kg='toyworld', n_target=n_q, backend='offline', early_stop=0), kg=kg, store=store,
                                 verbose=False, status_every=0)
        s.extra = dict(records=summary['records'], candidates=summary['candidates'], acceptance_rate=round(summary['acceptance_rate'], 3))
    recs = pd.read_json(out / 'records.jsonl', lines=True, dtype={'id': str}).head(n_g)
    del store; gc.collect()

    with Stage(st, 'qgraph_indexes') as s:  # built once per KG and shared by every question: kept out of the per-question time
        kg_fingerprint(kg); _kg_index(kg); kg.und_csr
    cache = root / 'qgraphs'
    shutil.rmtree(cache, ignore_errors=True)
    with Stage(st, 'question_graphs') as s:
        qgs = build_question_graphs(kg, recs, cache, seed=0, n_nodes=n_nodes, max_triples=max_triples)
        s.extra = dict(graphs=len(qgs))
    infos = [qgs[i].info for i in range(len(qgs))]
    st['question_graphs'].update(
        per_question_seconds=round(st['question_graphs']['seconds'] / max(len(qgs), 1), 4),
        mean_triples=round(float(np.mean([i['n_triples'] for i in infos])), 1), max_triples_seen=int(max(i['n_triples'] for i in infos)),
        mean_khop_edges=round(float(np.mean([i['n_khop_edges'] for i in infos])), 1),
        khop_capped=int(sum(bool(i['khop_capped']) for i in infos)), over_budget=int(sum(i['n_ppr_triples'] > max_triples for i in infos)))

    graphs = [qgs[i] for i in range(len(qgs))]
    with Stage(st, 'sp_labels') as s:
        for g in graphs: question_sp_labels(g.h, g.t, g.seeds, g.answers)
        s.extra = dict(graphs=len(graphs), per_question_seconds=round((time.perf_counter() - s.t0) / max(len(graphs), 1), 5))

    st['question_graph_steps'] = _steps(kg, recs.head(n_steps), n_nodes, max_triples)
    st['khop_versus_previous'] = khop_versus_previous(kg, recs.head(min(n_steps, 30)))

    qg = st['question_graphs']
    qg['per_question_cpu_seconds'] = round(qg['cpu_seconds'] / max(len(qgs), 1), 4)
    worker_mib = max(qg['peak_rss_mib'] - qg['rss_before_mib'], 0)
    res['measured'] = dict(triples=kg.num_triples, per_question_cpu_seconds=qg['per_question_cpu_seconds'], worker_peak_mib=worker_mib,
                           kg_resident_mib=st['qgraph_indexes']['rss_after_mib'] - st['kg_build']['rss_before_mib'],  # KG + indexes, interpreter excluded
                           commit=commit, load_average=[round(x, 2) for x in os.getloadavg()])  # which code, how busy
    res['runs'] = _earlier_runs(kg.num_triples) + [res['measured']]
    res['extrapolation'] = _extrapolate(res['runs'])
    return res


def _earlier_runs(triples: int) -> list:
    "The `measured` records of the other sizes already in benchmarks/results/scale.json (one per size)."
    f = Path(__file__).resolve().parent / 'results' / 'scale.json'
    try: runs = json.loads(f.read_text())['results'].get('runs', [])
    except (OSError, ValueError, KeyError): return []
    return [r for r in runs if r.get('triples') != triples]


def _extrapolate(runs: list, target_triples: float = WIKIKG2_TRIPLES) -> dict:
    "GTSQA rebuild hours on CORES cores: per-question CPU seconds at the largest size, and a fit a + b * triples over all sizes."
    runs = sorted(runs, key=lambda r: r['triples']); big = runs[-1]
    per_q = big['per_question_cpu_seconds']
    if big['triples'] >= target_triples:  # measured at the target size or above: nothing to extrapolate in size
        at_target = per_q; how = f'measured at {big["triples"]:,} triples (at least the target): per-question time as measured'
    elif len(runs) >= 2:  # linear in the KG size through the two largest sizes (the k-hop step scans every triple once)
        (x0, y0), (x1, y1) = [(r['triples'], r['per_question_cpu_seconds']) for r in runs[-2:]]
        b = max((y1 - y0) / (x1 - x0), 0.); a = y1 - b * x1
        at_target = a + b * target_triples; how = f'linear through the two largest sizes ({x0:,} and {x1:,} triples)'
    else:
        at_target = per_q * target_triples / big['triples']; how = 'proportional to the KG size from one size (an upper bound)'
    at_target = max(at_target, per_q)
    hours = lambda s: round(s * GTSQA_QUESTIONS / CORES / 3600, 3)
    kg_mib = big['kg_resident_mib'] * target_triples / big['triples']
    return dict(questions=GTSQA_QUESTIONS, cores=CORES, target_hours=2.0, target_triples=int(target_triples),
                measured_triples=big['triples'], per_question_cpu_seconds_measured=per_q,
                question_graph_hours_at_measured_size=hours(per_q),
                per_question_cpu_seconds_at_target=round(at_target, 4), question_graph_hours_at_target=hours(at_target),
                fits_target=bool(hours(at_target) <= 2.0), method=how,
                basis=f'CPU seconds per question graph (k-hop, PPR top-N within the triple caps, GT re-added, confounders, SP labels; '
                      f'one-time KG indexes excluded) x {GTSQA_QUESTIONS:,} questions / {CORES} worker processes: questions are '
                      f'independent, each worker handles one at a time over a KG loaded once',
                memory_gib_at_target=round((kg_mib + CORES * big['worker_peak_mib'] * target_triples / big['triples']) / 1024, 1),
                memory_note=f'KG and its indexes ({kg_mib / 1024:.1f} GiB scaled to the target) shared read-only by forked workers '
                            f'(copy-on-write), plus each worker\'s per-question arrays (measured {big["worker_peak_mib"]} MiB at '
                            f'{big["triples"]:,} triples, scaled linearly: they hold per-triple masks of the whole KG)')


def khop_only() -> dict:
    "`--khop-only`: the k-hop comparison alone, on the KG and records of an earlier full run of this size (its scratch folder)."
    from kgqa_nb.core import project_dirs
    from kgqa_nb.kg import kg_fingerprint
    from kgqa_nb.toyworld import make_toyworld
    import pandas as pd
    target = int(os.environ.get('KGQA_SCALE_TRIPLES', 4_000_000)); n_q = int(os.environ.get('KGQA_SCALE_QUESTIONS', 1000))
    kg = make_toyworld(scale=round(target / TRIPLES_PER_SCALE, 2)); kg.und_csr
    root = Path(os.environ.get('KGQA_SCALE_DIR') or project_dirs.scratch / 'scale')
    f = root / f'generation-{kg_fingerprint(kg)[:16]}-{n_q}' / 'records.jsonl'
    if not f.exists(): raise SystemExit(f'{f} is missing: run the full rehearsal at this size first (--only scale)')
    return khop_versus_previous(kg, pd.read_json(f, lines=True, dtype={'id': str}).head(30))


if __name__ == '__main__':
    import sys
    print(json.dumps(khop_only() if '--khop-only' in sys.argv else run(quick='--quick' in sys.argv), indent=1))
