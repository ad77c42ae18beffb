"""SynthKGQA generation throughput with LLM time excluded: validated datapoints per second for the per-candidate work
(sampling + parse + validate + classify + minimality), replies precomputed, on the toy world and CoDEx-M, with the
embedded Oxigraph store and with an rdflib store (the reference validates on a local rdflib copy of its KG) in the
same run. Both stores must accept the same candidates with the same records; the ratio is Oxigraph / rdflib.

The store is a parameter (`store_factory(kg) -> SparqlStore`): `kgqa_nb.sparql.OxigraphStore` vs `kgqa_nb.sparql.RdflibStore`,
both with thread-isolated deadlines as the pipeline uses them."""
import time

from kgqa_nb.loaders import load_codex_m
from kgqa_nb.llm import offline_reply
from kgqa_nb.sparql import OxigraphStore, RdflibStore
from kgqa_nb.synthkgqa import GenerationConfig, finish_record, plan_candidate
from kgqa_nb.toyworld import make_toyworld
from kgqa_nb.validate import FilterLog, validate_response


def oxigraph_store(kg): return OxigraphStore.from_kg(kg, isolation='thread')
def rdflib_store(kg): return RdflibStore.from_kg(kg, isolation='thread')  # same data as the Oxigraph store (labels too)


def bench_pipeline(kg, store_factory, n_candidates: int, seed: int = 0) -> dict:
    "Time the LLM-free part of the pipeline over `n_candidates` candidates (replies precomputed)."
    # a generous deadline for both engines: the comparison is of equal work (with the pipeline's 10 s default, rdflib times out
    # on some CoDEx-M hub queries that Oxigraph answers in milliseconds, and the two would validate different candidates)
    cfg = GenerationConfig(n_target=n_candidates, max_candidates=n_candidates, seed=seed, query_timeout=600.0)
    replies = [offline_reply(plan_candidate(kg, cfg, i).messages) for i in range(n_candidates)]  # the LLM, outside the clock
    t0 = time.perf_counter(); store = store_factory(kg); t_load = time.perf_counter() - t0
    flog, records, min_cache = FilterLog(), {}, {}
    t0 = time.perf_counter()
    for i, text in enumerate(replies):
        cand = plan_candidate(kg, cfg, i)  # sampling + prompt
        parsed, v = validate_response(kg, store, cand.sample, text, cfg.max_answers, cfg.query_timeout)
        if v.ok:
            rec, why = finish_record(store, cand, parsed, v, None, min_cache)
            if rec: records[i] = rec
            flog.add(why)
        else: flog.add(v)
    s = time.perf_counter() - t0
    return dict(store=type(store).__name__, candidates=n_candidates, accepted=len(records), seconds=round(s, 3),
                load_seconds=round(t_load, 3), datapoints_per_s=round(len(records) / s, 2),
                candidates_per_s=round(n_candidates / s, 2), rejected=dict(flog.rejected.most_common()), _records=records)


KGS = dict(toyworld=make_toyworld, **{'codex-m': load_codex_m})
STORES = (('oxigraph', oxigraph_store), ('rdflib', rdflib_store))


def compare_stores(sizes: dict,  # KG name (in KGS) -> work size
                   bench,  # bench(kg, store_factory, n) -> dict with the records under '_records'
                   rate: str) -> dict:  # the throughput key whose Oxigraph / rdflib ratio is reported
    "Run `bench` with both stores on each KG, check that they give the same records, and report the ratio of `rate`."
    out = {}
    for name, n in sizes.items():
        kg = KGS[name]()
        res = {label: bench(kg, f, n) for label, f in STORES}
        a, b = res['oxigraph'].pop('_records'), res['rdflib'].pop('_records')
        assert a == b, f"{name}: the stores give different records ({res['oxigraph'].get('rejected')} vs {res['rdflib'].get('rejected')})"
        out[name] = dict(kg=kg.name, triples=kg.num_triples, **res, same_records=True,
                         speedup_oxigraph_vs_rdflib=round(res['oxigraph'][rate] / max(res['rdflib'][rate], 1e-9), 2))
    return out


def run(quick: bool = False) -> dict:
    return compare_stores(dict(toyworld=60, **{'codex-m': 40}) if quick else dict(toyworld=400, **{'codex-m': 300}), bench_pipeline, 'datapoints_per_s')


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
