"""KG-RAG retrieval on the full MetaQA KB: kgqa_nb.kgrag vs what a user would otherwise write.

(1) Per question, candidate triples up to N hops (bidirectional) and the top-K of them by dot product with the question's
vector: kgqa_nb.kgrag (`candidate_triples` on the KG's CSR, then `top_k_triples`, an exact FAISS flat search over the candidates'
vectors) against the baseline, a networkx BFS (`single_source_shortest_path_length` with cutoff N-1 on the undirected
multigraph, then the edges of the reached nodes) and a numpy brute-force product + argsort. The triple vectors are a fixed
random unit matrix standing in for the stored embeddings (the retrieval cost does not depend on their values; embedding all
129k triples is (2) below). Median and p95 milliseconds per question for N = 1, 2, 3, K = 30; the candidate sets and
top-K scores of both are asserted equal; each time is the minimum of 3 repeats (the machine may be shared), and the
candidate step is also reported alone. Graph construction (CSR views, networkx graph) is timed once, separately.
(2) Embedding strings/s for verbalised MetaQA triples with the packaged all-MiniLM-L6-v2: plain encode, and the embedding
store read back warm by a fresh store object (as a second process would); the time to embed the whole KB once follows.
"""
import tempfile, time

import networkx as nx
import numpy as np

from kgqa_nb.loaders import load_kg
from kgqa_nb.kgrag import candidate_triples, entity_by_label, load_metaqa_questions, sample_questions, top_k_triples, triple_texts
from kgqa_nb.text import EmbeddingStore, TextEncoder


def _nx_candidates(G, kg, seed, n_hops):
    reached = nx.single_source_shortest_path_length(G, seed, cutoff=n_hops - 1)
    return np.unique(np.fromiter((k for _, _, k in G.edges(reached, keys=True)), np.int64))


def _numpy_top_k(X, cand, q, k):
    s = X[cand] @ q
    o = np.argsort(-s, kind='stable')[:k]
    return s[o], o


def _ms(xs): return dict(median_ms=round(float(np.median(xs)) * 1e3, 3), p95_ms=round(float(np.percentile(xs, 95)) * 1e3, 3))


def retrieval(n_questions: int, k: int = 30, dim: int = 384, repeats: int = 3) -> dict:
    "Candidate retrieval + top-K per question, ours vs networkx + numpy, by N."
    kg = load_kg('metaqa')
    t0 = time.perf_counter(); kg.und_csr; csr_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    G = nx.MultiGraph(); G.add_nodes_from(range(kg.num_entities))
    G.add_edges_from(zip(kg.head.tolist(), kg.tail.tolist(), range(kg.num_triples)))
    nx_build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    X = rng.standard_normal((kg.num_triples, dim)).astype(np.float32); X /= np.linalg.norm(X, axis=1, keepdims=True)
    qs = [q for h in (1, 2, 3) for q in sample_questions(load_metaqa_questions(h), n_questions // 3, seed=0)]
    seeds = []
    for q in qs:
        try: seeds.append(entity_by_label(kg, q.topic))
        except KeyError: pass
    Q = rng.standard_normal((len(seeds), dim)).astype(np.float32)
    out = dict(kg=repr(kg), questions=len(seeds), top_k=k, dim=dim, build_s=dict(csr=round(csr_s, 3), networkx_graph=round(nx_build_s, 2)), by_hops=[])
    for n in (1, 2, 3):
        ours, base, ours_c, base_c, sizes = [], [], [], [], []
        for s, q in zip(seeds, Q):
            def mine():
                t0 = time.perf_counter(); c = candidate_triples(kg, [s], n); t1 = time.perf_counter()
                sc, _ = top_k_triples(q, X[c.eids], k, 'ip'); return time.perf_counter() - t0, t1 - t0, c, sc
            def theirs():
                t0 = time.perf_counter(); cand = _nx_candidates(G, kg, s, n); t1 = time.perf_counter()
                bs, _ = _numpy_top_k(X, cand, q, k); return time.perf_counter() - t0, t1 - t0, cand, bs
            a = [mine() for _ in range(repeats)]; b = [theirs() for _ in range(repeats)]
            ours.append(min(x[0] for x in a)); ours_c.append(min(x[1] for x in a))
            base.append(min(x[0] for x in b)); base_c.append(min(x[1] for x in b))
            c, sc, cand, bs = a[0][2], a[0][3], b[0][2], b[0][3]
            assert np.array_equal(np.sort(c.eids), cand)
            np.testing.assert_allclose(sc, bs, rtol=1e-4, atol=1e-4)
            sizes.append(len(c))
        o, b = _ms(ours), _ms(base)
        out['by_hops'].append(dict(n_hops=n, candidates_median=float(np.median(sizes)), candidates_p95=float(np.percentile(sizes, 95)),
                                   candidates_max=int(max(sizes)), kgrag=o, networkx_numpy=b,
                                   candidates_only=dict(kgrag_csr=_ms(ours_c), networkx_bfs=_ms(base_c)),
                                   speedup_median=round(b['median_ms'] / max(o['median_ms'], 1e-9), 1),
                                   speedup_p95=round(b['p95_ms'] / max(o['p95_ms'], 1e-9), 1)))
    return out


def embedding(n: int, batch_size: int = 64) -> dict:
    "Strings/s embedding verbalised MetaQA triples: plain encode, and warm reads from the store by a fresh store object."
    kg = load_kg('metaqa')
    texts = triple_texts(kg, np.random.default_rng(1).choice(kg.num_triples, n, replace=False))
    enc = TextEncoder(); enc.encode(['warm-up'], progress_bar=False)
    t0 = time.perf_counter(); ref = enc.encode(texts, batch_size=batch_size, progress_bar=False); plain_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        st = EmbeddingStore.for_encoder(enc, d)
        t0 = time.perf_counter(); cold = st.get_or_encode(enc, texts, batch_size=batch_size, progress_bar=False); cold_s = time.perf_counter() - t0
        t0 = time.perf_counter(); warm = EmbeddingStore(st.folder).get_or_encode(TextEncoder(), texts); warm_s = time.perf_counter() - t0
        assert np.array_equal(warm, cold) and np.allclose(cold, ref, atol=1e-5)
    return dict(encoder=enc.name, device=str(enc.model.device), texts=n, batch_size=batch_size,
                encode_per_s=round(n / plain_s, 1), store_cold_per_s=round(n / cold_s, 1), store_warm_per_s=round(n / warm_s, 1),
                whole_kb_minutes_at_encode_rate=round(kg.num_triples / (n / plain_s) / 60, 1))


def run(quick: bool = False) -> dict:
    return dict(retrieval=retrieval(30 if quick else 300), embedding=embedding(256 if quick else 2048))


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
