"""Text encoders, the embedding store and vector search: kgqa_nb.text vs what a user would otherwise do.

(1) Embedding strings/s with the packaged all-MiniLM-L6-v2 (on the GPU when there is one): plain `TextEncoder.encode` (no
store: every run pays again), the store cold (first run: embed + append + fsync), and the store warm, read through a fresh
store object as a new process would (keys mapped from disk, vectors memory-mapped, the model never loaded). Two kinds of
text: toy-world entity labels and verbalised triples `(subject, relation, object)` as KG-RAG embeds them. Warm vectors
are asserted identical to cold ones.
(2) Top-10 search over clustered unit vectors (a stand-in for label embeddings): numpy brute force (one matrix product and
argpartition per block of queries, the baseline), FAISS flat, and FAISS IVFPQ in the default shape with raw PQ scores and
with exact re-ranking. Queries/s, build seconds, recall@10 against the brute force; the ratio to numpy is reported.
Times are the minimum over repeats where a repeat is cheap (the machine may be shared).
"""
import tempfile, time
from pathlib import Path

import numpy as np

from kgqa_nb.loaders import load_kg
from kgqa_nb.text import EmbeddingStore, TextEncoder, VectorIndex, l2_normalize


def _best(f, repeats: int = 3):
    "Minimum wall time of `f()` over `repeats`, and its last result."
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter(); out = f(); times.append(time.perf_counter() - t0)
    return min(times), out


def embedding(n: int, batch_size: int = 64) -> dict:
    "Strings/s for plain encode, the store cold and the store warm, on n entity labels and n verbalised triples."
    kg = load_kg('toyworld')
    enc = TextEncoder()
    enc.encode(['warm-up'], progress_bar=False)  # model load is not part of the rate
    rng = np.random.default_rng(0)
    ent = [kg.entity_labels[i] for i in rng.choice(kg.num_entities, n, replace=False)]
    tri = [f'({kg.entity_labels[h]}, {kg.relation_labels[r]}, {kg.entity_labels[t]})'
           for h, r, t in kg.triples[rng.choice(kg.num_triples, n, replace=False)]]
    out = {'encoder': enc.name, 'device': str(enc.model.device), 'batch_size': batch_size}
    for what, texts in (('entity_labels', ent), ('triples', tri)):
        uniq = len(set(texts))
        plain_s, ref = _best(lambda: enc.encode(texts, batch_size=batch_size, progress_bar=False), repeats=1)
        with tempfile.TemporaryDirectory() as d:
            st = EmbeddingStore.for_encoder(enc, d)
            t0 = time.perf_counter(); cold = st.get_or_encode(enc, texts, batch_size=batch_size, progress_bar=False); cold_s = time.perf_counter() - t0
            fresh = TextEncoder()  # as in a new process: nothing loaded
            warm_s, warm = _best(lambda: EmbeddingStore(st.folder).get_or_encode(fresh, texts))
            assert np.array_equal(warm, cold) and fresh._model is None and np.allclose(cold, ref, atol=1e-5)
        out[what] = dict(texts=n, unique=uniq, mean_chars=round(float(np.mean([len(t) for t in texts])), 1),
                         encode_per_s=round(n / plain_s, 1), store_cold_per_s=round(n / cold_s, 1),
                         store_warm_per_s=round(n / warm_s, 1), warm_vs_encode=round(plain_s / warm_s, 1))
    return out


def _clustered(n, d, rng, centres=1000, spread=0.4):
    C = rng.standard_normal((centres, d)).astype(np.float32)
    return l2_normalize(C[rng.integers(0, centres, n)] + spread * rng.standard_normal((n, d)).astype(np.float32))


def _numpy_topk(X, Q, k, block=256):
    "Brute force: scores by matrix product, top k by argpartition, sorted (the baseline a user writes)."
    out = np.empty((len(Q), k), np.int64)
    for s in range(0, len(Q), block):
        S = Q[s:s + block] @ X.T
        part = np.argpartition(-S, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(S, part, 1), axis=1, kind='stable')
        out[s:s + block] = np.take_along_axis(part, order, 1)
    return out


def search(n: int, d: int, n_queries: int, k: int = 10) -> dict:
    "Queries/s and recall@k of numpy brute force, FAISS flat and IVFPQ (raw and re-ranked) on n clustered d-dim vectors."
    rng = np.random.default_rng(0)
    X = _clustered(n, d, rng)
    Q = l2_normalize(X[rng.choice(n, n_queries, replace=False)] + 0.1 * rng.standard_normal((n_queries, d)).astype(np.float32))
    np_s, exact = _best(lambda: _numpy_topk(X, Q, k), repeats=2)
    rows = {'numpy_brute_force': dict(build_s=0.0, queries_per_s=round(n_queries / np_s, 1), recall_at_10=1.0, speedup_vs_numpy=1.0)}
    t0 = time.perf_counter(); ivf = VectorIndex.build(X, kind='ivfpq'); ivf_build = time.perf_counter() - t0
    for name, build_s, ix, rerank in (('faiss_flat', None, None, 0), ('faiss_ivfpq_raw', ivf_build, ivf, 0), ('faiss_ivfpq_reranked', ivf_build, ivf, ivf.rerank)):
        if ix is None:
            t0 = time.perf_counter(); ix = VectorIndex.build(X, kind='flat'); build_s = time.perf_counter() - t0
        keep = ix.rerank; ix.rerank = rerank
        s, (_, I) = _best(lambda: ix.search(Q, k), repeats=3)
        ix.rerank = keep
        rec = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(I, exact)]))
        rows[name] = dict(build_s=round(build_s, 2), queries_per_s=round(n_queries / s, 1), recall_at_10=round(rec, 4),
                          speedup_vs_numpy=round(np_s / s, 2))
    return dict(n=n, dim=d, queries=n_queries, k=k, ivfpq=dict(ivf.params, rerank=ivf.rerank), results=rows)


def run(quick: bool = False) -> dict:
    return dict(embedding=embedding(256 if quick else 2000),
                search=[search(*s) for s in ([(20_000, 64, 500)] if quick else [(20_000, 384, 1000), (200_000, 384, 1000)])])


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
