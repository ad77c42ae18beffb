"""Text encoders, the embedding store and the vector index (kgqa_nb.text): what the notebook cannot hold. Vectors embedded
once are read by other processes without re-embedding; concurrent writers never duplicate or mix rows; a writer killed
mid-append or a damaged data file loses only the incomplete rows; FAISS flat search equals numpy brute force, IVFPQ recall
is high; a KG's index is built once per (KG, encoder) across processes."""
import json, os, signal, subprocess, sys, textwrap, time
from pathlib import Path

import numpy as np
import pytest

from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.loaders import load_kg
from kgqa_nb.text import (IVFPQ_MIN_TRAIN, EmbeddingStore, EncoderUnavailableError, HashingEncoder, TextEncoder, VectorIndex,
                          _HEADER, kg_vector_index, l2_normalize)

# A hashing encoder that counts what it embeds, can be slowed down, and reports through a JSON line on stdout.
PRELUDE = textwrap.dedent('''
    import json, sys, time
    import numpy as np
    from pathlib import Path
    from kgqa_nb.text import HashingEncoder, EmbeddingStore
    class Counting(HashingEncoder):
        def __init__(self, *a, delay=0.0, **kw):
            super().__init__(*a, **kw); self.calls, self.texts, self.delay = 0, 0, delay
        def _embed(self, texts):
            self.calls += 1; self.texts += len(texts); time.sleep(self.delay)
            return super()._embed(texts)
''')


class Counting(HashingEncoder):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw); self.texts = 0
    def _embed(self, texts):
        self.texts += len(texts)
        return super()._embed(texts)


def run_py(code: str, *args, timeout=120) -> dict:
    "Run PRELUDE + code in a fresh interpreter; its last stdout line is JSON."
    env = {**os.environ, 'KGQA_PROGRESS': '0', 'HF_HUB_OFFLINE': '1'}
    r = subprocess.run([sys.executable, '-c', PRELUDE + textwrap.dedent(code), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def labels(n, seed=0):
    rng = np.random.default_rng(seed)
    return [f'entity {i} ' + ''.join(rng.choice(list('abcdefghij'), 5)) for i in range(n)]


# ---- the store across processes ------------------------------------------------------------------------------------------

def test_second_process_does_not_re_embed(tmp_path):
    texts = labels(300)
    enc = Counting(64)
    store = EmbeddingStore.for_encoder(enc, tmp_path)
    first = store.get_or_encode(enc, texts)
    assert enc.texts == 300 and store.embedded == 300
    np.save(tmp_path / 'expected.npy', first)
    out = run_py('''
        enc = Counting(64)
        folder, texts = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
        st = EmbeddingStore(folder)
        v = st.get_or_encode(enc, texts)
        first = enc.texts
        enc.encode_cached(texts[:50] + ['a new label'], root=Path(folder).parent)
        print(json.dumps(dict(first=first, then=enc.texts, hits=st.hits,
                              same=bool(np.array_equal(v, np.load(Path(folder).parent / 'expected.npy'))))))
    ''', store.folder, _write(tmp_path / 'texts.json', texts))
    assert out == dict(first=0, then=1, hits=300, same=True)  # only 'a new label' was embedded


def test_default_encoder_is_not_loaded_when_everything_is_stored(tmp_path):
    "The packaged MiniLM, offline: 384-d unit vectors; a second process answers from the store without loading the model."
    enc = TextEncoder()
    assert (enc.name, enc.dim) == ('all-MiniLM-L6-v2', 384)
    texts = ['film', 'city', 'country', 'movie']
    v = enc.encode_cached(texts, root=tmp_path)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert (v[3] @ v[:3].T).argmax() == 0  # 'movie' is nearest to 'film'
    np.save(tmp_path / 'expected.npy', v)
    out = run_py('''
        from kgqa_nb.text import TextEncoder
        enc = TextEncoder()
        v = enc.encode_cached(['film', 'city', 'country', 'movie'], root=sys.argv[1])
        print(json.dumps(dict(loaded=enc._model is not None, same=bool(np.array_equal(v, np.load(Path(sys.argv[1]) / 'expected.npy'))))))
    ''', tmp_path)
    assert out == dict(loaded=False, same=True)


def _write(p: Path, texts) -> Path:
    p.write_text(json.dumps(texts)); return p


def test_concurrent_writers_share_the_work(tmp_path):
    "Two processes embedding overlapping texts at once: every text stored once, with the right vector; no text embedded twice."
    a, b = labels(120), labels(120)[60:] + labels(60, seed=1)
    code = '''
        enc = Counting(64, delay=0.02)
        st = EmbeddingStore(sys.argv[1], chunk=7)
        st.get_or_encode(enc, json.loads(Path(sys.argv[2]).read_text()), batch_size=4)
        print(json.dumps(dict(embedded=st.embedded, texts=enc.texts)))
    '''
    folder = EmbeddingStore.for_encoder(HashingEncoder(64), tmp_path).folder
    env = {**os.environ, 'KGQA_PROGRESS': '0'}
    procs = [subprocess.Popen([sys.executable, '-c', PRELUDE + textwrap.dedent(code), str(folder), str(_write(tmp_path / f'{i}.json', t))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i, t in enumerate((a, b))]
    outs = []
    for p in procs:
        o, e = p.communicate(timeout=180); assert p.returncode == 0, e[-3000:]
        outs.append(json.loads(o.strip().splitlines()[-1]))
    union = list(dict.fromkeys(a + b))
    assert sum(o['embedded'] for o in outs) == len(union) == sum(o['texts'] for o in outs)
    st = EmbeddingStore(folder)
    assert len(st) == len(union)
    np.testing.assert_array_equal(st.get_or_encode(HashingEncoder(64), union), HashingEncoder(64).encode(union))
    assert st.embedded == 0 and np.load(st.data, mmap_mode='r').shape == (len(union), 64)


def test_writer_killed_mid_run_keeps_finished_chunks(tmp_path):
    "SIGKILL while embedding: the store stays readable and correct, and a rerun embeds only what is missing."
    texts = labels(400)
    folder = EmbeddingStore.for_encoder(HashingEncoder(64), tmp_path).folder
    code = '''
        enc = Counting(64, delay=0.05)
        EmbeddingStore(sys.argv[1], chunk=10).get_or_encode(enc, json.loads(Path(sys.argv[2]).read_text()), batch_size=5)
    '''
    p = subprocess.Popen([sys.executable, '-c', PRELUDE + textwrap.dedent(code), str(folder), str(_write(tmp_path / 't.json', texts))],
                         env={**os.environ, 'KGQA_PROGRESS': '0'})
    st = EmbeddingStore(folder)
    deadline = time.monotonic() + 120
    while len(st) < 30 and time.monotonic() < deadline and p.poll() is None: time.sleep(0.05)
    p.send_signal(signal.SIGKILL); p.wait()
    done = len(st)
    assert 30 <= done < 400
    enc = Counting(64)
    v = EmbeddingStore(folder).get_or_encode(enc, texts)
    np.testing.assert_array_equal(v, HashingEncoder(64).encode(texts))
    assert enc.texts == 400 - done


# ---- damage: torn appends, orphan rows ---------------------------------------------------------------------------------------

@pytest.mark.parametrize('cut', [1, 100, 256, 257, 3 * 256, 5 * 256 - 1])
def test_truncated_data_file_loses_only_incomplete_rows(tmp_path, cut):
    "Cut `cut` bytes off the end of vectors.npy (5 rows of 256 bytes): complete rows survive, the rest is re-embedded."
    enc, texts = HashingEncoder(64), labels(5)
    st = EmbeddingStore.for_encoder(enc, tmp_path)
    st.get_or_encode(enc, texts)
    size = st.data.stat().st_size
    with open(st.data, 'ab') as f: f.truncate(size - cut)
    intact = (size - cut - _HEADER) // 256
    again = EmbeddingStore(st.folder)
    assert len(again) == intact
    c = Counting(64)
    np.testing.assert_array_equal(again.get_or_encode(c, texts), enc.encode(texts))
    assert c.texts == 5 - intact and again.hits == intact
    assert st.data.stat().st_size == size and np.load(st.data).shape == (5, 64)


def test_torn_keys_and_orphan_vectors_are_cut_back(tmp_path):
    "Half a key record, and vectors whose keys never arrived: ignored by readers, removed by the next writer."
    enc = HashingEncoder(64)
    st = EmbeddingStore.for_encoder(enc, tmp_path)
    st.get_or_encode(enc, ['a', 'b'])
    with open(st.data, 'ab') as f: f.write(np.ones((3, 64), '<f4').tobytes())  # orphans: a crash before their keys
    with open(st.keys, 'ab') as f: f.write(b'\x01' * 7)  # a torn key
    again = EmbeddingStore(st.folder)
    assert len(again) == 2
    np.testing.assert_array_equal(again.get_or_encode(enc, ['a', 'c', 'b']), enc.encode(['a', 'c', 'b']))
    assert again.embedded == 1 and len(again) == 3
    assert st.keys.stat().st_size == 3 * 16 and np.load(st.data).shape == (3, 64)


def test_store_refuses_another_encoder_and_bad_input(tmp_path):
    st = EmbeddingStore.for_encoder(HashingEncoder(64), tmp_path)
    st.get_or_encode(HashingEncoder(64), ['a'])
    with pytest.raises(ValueError, match="holds vectors of encoder 'hashing-char3-64', not 'hashing-char3-32'"):
        EmbeddingStore(st.folder).get_or_encode(HashingEncoder(32), ['a'])
    with pytest.raises(TypeError, match='wrap it in a list'): st.get_or_encode(HashingEncoder(64), 'abc')
    assert st.get_or_encode(HashingEncoder(64), []).shape == (0, 64)


def test_role_prefix_is_part_of_the_key(tmp_path):
    e5like = HashingEncoder(64, prefixes={'query': 'query: ', 'passage': 'passage: '})
    st = EmbeddingStore.for_encoder(e5like, tmp_path)
    q = st.get_or_encode(e5like, ['Paris'], role='query')
    p = st.get_or_encode(e5like, ['Paris'], role='passage')
    assert len(st) == 2 and not np.allclose(q, p)
    np.testing.assert_array_equal(q, HashingEncoder(64).encode(['query: Paris']))


# ---- encoders ------------------------------------------------------------------------------------------------------------------

def test_unavailable_model_is_one_clear_line():
    with pytest.raises(EncoderUnavailableError) as e: TextEncoder('intfloat/e5-large-v2')
    msg = str(e.value)
    assert '\n' not in msg and 'not on this machine' in msg and 'huggingface-cli download intfloat/e5-large-v2' in msg
    with pytest.raises(EncoderUnavailableError, match='no model folder at'): TextEncoder('./no/such/model')


def test_model_folder_key_follows_the_weights(tmp_path):
    "Two model folders with the same name but different weights never share stored vectors."
    for sub, blob in (('a', b'1'), ('b', b'2')):
        (tmp_path / sub / 'model').mkdir(parents=True); (tmp_path / sub / 'model' / 'model.safetensors').write_bytes(blob)
    ka, kb = (TextEncoder(str(tmp_path / s / 'model')).key for s in 'ab')
    assert ka != kb and ka.startswith('model@')


def test_encode_is_order_and_batch_invariant():
    enc = HashingEncoder(32)
    texts = labels(37)
    full = enc.encode(texts, batch_size=64)
    np.testing.assert_array_equal(enc.encode(texts, batch_size=3), full)
    np.testing.assert_array_equal(enc.encode(texts[::-1], batch_size=5), full[::-1])
    raw = enc.encode(texts, normalize=False)
    np.testing.assert_allclose(l2_normalize(raw), full, atol=1e-6)


# ---- the vector index ----------------------------------------------------------------------------------------------------------

def clustered(n, d, rng, centres=100, spread=0.4):
    C = rng.standard_normal((centres, d)).astype(np.float32)
    return l2_normalize(C[rng.integers(0, centres, n)] + spread * rng.standard_normal((n, d)).astype(np.float32))


@pytest.mark.parametrize('metric', ['cosine', 'ip'])
def test_flat_index_equals_numpy_brute_force(metric):
    rng = np.random.default_rng(1)
    X, Q = rng.standard_normal((3000, 48)).astype(np.float32), rng.standard_normal((64, 48)).astype(np.float32)
    ix = VectorIndex.build(X, metric=metric)
    assert ix.kind == 'flat'
    B = l2_normalize(Q) @ l2_normalize(X).T if metric == 'cosine' else Q @ X.T
    for k in (1, 10, 100):
        S, I = ix.search(Q, k)
        np.testing.assert_array_equal(I, np.argsort(-B, axis=1, kind='stable')[:, :k])
        np.testing.assert_allclose(S, np.take_along_axis(B, I, 1), rtol=1e-5, atol=1e-5)


def test_ivfpq_recall_and_the_size_rule(tmp_path):
    "8-bit IVFPQ (the default shape) above the 9,984 minimum: recall@10 vs brute force; auto switches exactly at the minimum."
    rng = np.random.default_rng(0)
    X = clustered(IVFPQ_MIN_TRAIN, 32, rng)
    Q = l2_normalize(X[rng.choice(len(X), 200, replace=False)] + 0.1 * rng.standard_normal((200, 32)).astype(np.float32))
    exact = np.argsort(-(Q @ X.T), axis=1)[:, :10]
    ix = VectorIndex.build(X)
    assert (ix.kind, ix.params['nlist'], ix.params['m'], ix.params['nbits']) == ('ivfpq', 256, 4, 8)
    assert VectorIndex.build(X[:-1]).kind == 'flat'
    S, I = ix.search(Q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(I, exact)])
    assert recall >= 0.8, recall
    np.testing.assert_allclose(S, np.take_along_axis(Q @ X.T, I, 1), atol=1e-5)  # re-ranked scores are exact
    back = VectorIndex.load(ix.save(tmp_path / 'ix'))
    assert all(np.array_equal(a, b) for a, b in zip(back.search(Q, 10), (S, I)))
    with pytest.raises(ValueError, match='needs >= 9,984 training vectors'): VectorIndex.build(X[:5000], kind='ivfpq')


def test_index_input_checks():
    ix = VectorIndex.build(np.eye(4, dtype=np.float32))
    with pytest.raises(ValueError, match='the index holds 4-d vectors'): ix.search(np.ones((2, 3)))
    with pytest.raises(ValueError, match='NaN'): ix.search(np.full((1, 4), np.nan))
    with pytest.raises(ValueError, match='2-D array'): VectorIndex.build(np.ones(4))
    S, I = ix.search(np.eye(4)[:1], 10)
    assert I.shape == (1, 4) and I[0, 0] == 0


# ---- a KG's index, built once --------------------------------------------------------------------------------------------------

def test_kg_index_is_built_once_across_processes(tmp_path):
    kg = load_kg('toyworld')
    enc = HashingEncoder(64)
    ix = kg_vector_index(kg, enc, 'entity_labels', root=tmp_path / 'ix', store=EmbeddingStore(tmp_path / 'emb'))
    assert (ix.kind, len(ix)) == ('flat', kg.num_entities)
    out = run_py('''
        from kgqa_nb.loaders import load_kg
        from kgqa_nb.text import VectorIndex, kg_vector_index
        def no_build(*a, **k): raise AssertionError('rebuilt')
        VectorIndex.build = classmethod(no_build)
        kg = load_kg('toyworld'); enc = Counting(64)
        ix = kg_vector_index(kg, enc, 'entity_labels', root=Path(sys.argv[1]) / 'ix', store=EmbeddingStore(Path(sys.argv[1]) / 'emb'))
        _, I = ix.search(HashingEncoder(64).encode([kg.entity_labels[7]]), 1)
        print(json.dumps(dict(n=len(ix), texts=enc.texts, top=kg.entity_labels[int(I[0, 0])] == kg.entity_labels[7])))
    ''', tmp_path)
    assert out == dict(n=kg.num_entities, texts=0, top=True)
    # another KG (one label changed) is another index; its other labels come from the store
    kg2 = KnowledgeGraph(kg.head, kg.rel, kg.tail, kg.entity_ids, kg.relation_ids, ['changed'] + kg.entity_labels[1:], kg.relation_labels, name=kg.name)
    c = Counting(64)
    kg_vector_index(kg2, c, 'entity_labels', root=tmp_path / 'ix', store=EmbeddingStore(tmp_path / 'emb'))
    assert c.texts == 1 and len(list((tmp_path / 'ix').iterdir())) == 2
    with pytest.raises(ValueError, match="pass the texts for 'triples'"): kg_vector_index(kg, enc, 'triples', root=tmp_path / 'ix')
