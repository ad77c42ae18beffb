"""KGQAGen generation throughput with LLM time excluded (kgqa_nb.kgqagen): verified records per second of a whole run
(seed selection, bounded 1-hop samples, expansion rounds, SPARQL verification and revision, records), with the offline
generator and reviser, on the toy world and CoDEx-M, verifying on the embedded Oxigraph store and on an rdflib store in the
same run (the reference implementation verifies against a SPARQL endpoint; rdflib is the pure-Python store a user would
otherwise reach for). The LLM's time is the sum of the per-call seconds in the run's usage ledger (`llm_calls.jsonl`),
subtracted from the wall time. Both stores must produce byte-identical records; the ratio is Oxigraph / rdflib.
"""
import json, tempfile, time
from pathlib import Path

from kgqa_nb.kgqagen import KGQAGenConfig
from kgqa_nb.kgqagen_run import run_kgqagen

from bench_generation import compare_stores  # the same two stores, KGs and record check as the SynthKGQA benchmark


def bench_run(kg, store_factory, n_target: int) -> dict:
    "One fresh offline KGQAGen run of `n_target` records; seconds with and without the LLM calls."
    cfg = KGQAGenConfig(kg=kg.name, n_target=n_target, seed=0, backend='offline', query_timeout=600.0, concurrency=1)
    t0 = time.perf_counter(); store = store_factory(kg); t_load = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        summary = run_kgqagen(Path(d) / 'run', cfg, kg=kg, store=store, verbose=False, status_every=0)
        wall = time.perf_counter() - t0
        ledger = [json.loads(l) for l in (Path(d) / 'run' / 'llm_calls.jsonl').read_text().splitlines() if l.strip()]
        records = (Path(d) / 'run' / 'records.jsonl').read_bytes()
    llm_s = sum(r.get('seconds') or 0. for r in ledger)
    s = max(wall - llm_s, 1e-9)
    return dict(store=type(store).__name__, records=summary['records'], candidates=summary['candidates_processed'],
                revised=summary['funnel'].get('accepted_after_revisions', 0), llm_calls=len(ledger), seconds=round(wall, 3),
                llm_seconds=round(llm_s, 3), load_seconds=round(t_load, 3), records_per_s=round(summary['records'] / s, 2),
                candidates_per_s=round(summary['candidates_processed'] / s, 2), _records=records)


def run(quick: bool = False) -> dict:
    return compare_stores(dict(toyworld=10, **{'codex-m': 10}) if quick else dict(toyworld=60, **{'codex-m': 30}), bench_run, 'records_per_s')


if __name__ == '__main__':
    import sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
