"""RoG and GCR (kgqa_nb.pathgen): the fine-tune learns, GCR's constrained decoding never leaves the KG-Trie (property
test over random small KGs), BFS grounding returns exactly the triples on complete walks of a path from the seeds, and
`retrieve` reads only the question and the seed entities."""
import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from kgqa_nb.core import ReasonError
from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.pathgen import (GCR, PathTrie, RoG, as_triples, gold_triples, ground_path, ground_paths, kg_paths, path_prompt,
                             path_text, tiny_generator, training_pairs)
from kgqa_nb.sr import RelGraph, relation_texts
from kgqa_nb.subgraphrag import RetrievalInputError, two_hop_dataset

torch.set_num_threads(1)
ALLOWED = {'question', 'paraphrased_question', 'seed_entities'}


def toy_records(kg, recs, qgraphs):
    "The toy records with the GTSQA gold fields of their question graphs."
    item = lambda i: f'{kg.entity_labels[i]} ({kg.entity_ids[i]})'
    rel = lambda r: f'{kg.relation_labels[r]} ({kg.relation_ids[r]})'
    return [{**rec, 'seed_entities': [item(s) for s in g.seeds], 'answer_node': item(g.answers[0]),
             'answer_subgraph': [[item(h), rel(r), item(t)] for h, r, t, s in zip(g.h, g.r, g.t, g.triple_scores) if s]}
            for rec, g in zip(recs, qgraphs)]


@pytest.fixture(scope='module')
def toy():
    kg, recs, qgraphs = two_hop_dataset(n=8, n_distractors=6, seed=0)
    train = toy_records(kg, recs, qgraphs)
    texts = [path_prompt(r['question']) for r in train] + [path_text(relation_texts(kg), p) for p in [(0, 1), (2,)]]
    return kg, train, qgraphs, texts


@pytest.fixture(scope='module')
def fitted(toy):
    kg, train, qgraphs, texts = toy
    return RoG(tiny_generator(texts), steps=60, batch_size=4, lr=3e-3).fit(train, kg)


def test_fine_tune_lowers_the_loss(toy):
    kg, train, _, texts = toy
    gen = tiny_generator(texts, seed=1)
    pairs = training_pairs(train, kg)
    with torch.no_grad(): before = float(gen.batch_loss(pairs))
    gen.fine_tune(pairs, steps=40, batch_size=4, lr=3e-3, freeze_embeddings=False)
    with torch.no_grad(): after = float(gen.batch_loss(pairs))
    assert after < before / 4, (before, after)
    assert gen.steps == 40 and len(gen.history) == 40


def test_labels_choose_the_supervision():
    kg, recs, qgraphs = two_hop_dataset(n=4, n_distractors=4, shortcut=True, seed=0)
    train = toy_records(kg, recs, qgraphs)
    gt = {t for _, t in training_pairs(train, kg, qgraphs, 'gt')}
    sp = {t for _, t in training_pairs(train, kg, qgraphs, 'sp')}
    assert gt == {' <p> parent > born in </p>'}
    assert sp == {' <p> shortcut </p>'}  # the shortcut triple is the only shortest seed-answer path


def test_bad_input_is_named(toy):
    kg, train, _, texts = toy
    with pytest.raises(RetrievalInputError, match='unknown_labels'): RoG(tiny_generator(texts), steps=1).fit(train, kg, labels='xx')
    with pytest.raises(ReasonError, match='no_training_paths'): tiny_generator(texts).fine_tune([], steps=1)


class GoldGuard(dict):
    "A record that fails the test when anything but the question, its paraphrase or the seed entities is read."
    def __getitem__(self, k):
        assert k in ALLOWED, f'retrieve read {k!r}'
        return super().__getitem__(k)
    def get(self, k, default=None):
        assert k in ALLOWED, f'retrieve read {k!r}'
        return super().get(k, default)
    def _whole(self, *a): raise AssertionError('retrieve read the whole record')
    keys = values = items = __iter__ = copy = _whole


@pytest.mark.parametrize('model', ['rog', 'gcr'])
def test_retrieve_reads_no_gold_and_returns_graph_triples(toy, fitted, model):
    kg, train, qgraphs, _ = toy
    m = fitted if model == 'rog' else GCR.from_rog(fitted, paths='relation')
    for rec, qg in zip(train[:4], qgraphs[:4]):
        graph = as_triples(qg)
        got = m.retrieve(GoldGuard(rec), kg, graph)
        assert got.dtype == np.int64 and got.shape[1] == 3 and len(got) > 0
        assert len(np.unique(got, axis=0)) == len(got)
        assert {tuple(x) for x in got.tolist()} <= {tuple(x) for x in graph.tolist()}
        assert {tuple(x) for x in gold_triples(rec, kg).tolist()} <= {tuple(x) for x in got.tolist()}
    if model == 'gcr': assert len(m.trie_seconds) == 4 and all(n > 0 for n in m.trie_sizes)
    assert m.describe().startswith('RoG (random-init' if model == 'rog' else 'GCR (random-init')


# ------------------------------------------------------------------ hypothesis: random small KGs
@st.composite
def small_kgs(draw):
    n_ent, n_rel = draw(st.integers(2, 6)), draw(st.integers(1, 3))
    tri = draw(st.lists(st.tuples(st.integers(0, n_ent - 1), st.integers(0, n_rel - 1), st.integers(0, n_ent - 1)),
                        min_size=1, max_size=14, unique=True))
    seeds = draw(st.lists(st.integers(0, n_ent - 1), min_size=1, max_size=2, unique=True))
    kg = KnowledgeGraph.from_id_triples([(f'E{h}', f'P{r}', f'E{t}') for h, r, t in tri],
                                        {f'E{i}': f'e {i}' for i in range(n_ent)}, {f'P{i}': f'rel {i}' for i in range(n_rel)})
    seeds = [kg.entity(f'E{s}') for s in seeds if f'E{s}' in kg.entity_index] or [0]
    return kg, seeds


def walks(tri: list, seeds, path, R: int) -> set:
    "Reference: the triples of every complete walk of `path` from `seeds`, by enumerating the walks."
    ends = [(s, ()) for s in seeds]
    for d in path:
        ends = [(t if d < R else h, used + ((h, r, t),)) for u, used in ends for h, r, t in tri
                if r == d % R and (h if d < R else t) == u]
    return {x for _, used in ends for x in used}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_kgs(), st.data())
def test_grounding_returns_exactly_the_triples_on_walks_from_the_seeds(kgs, data):
    kg, seeds = kgs
    R, tri = kg.num_relations, [tuple(x) for x in kg.triples.tolist()]
    path = tuple(data.draw(st.lists(st.integers(0, 2 * R - 1), min_size=1, max_size=3)))
    g = RelGraph(kg.head, kg.rel, kg.tail, R)
    got = {tuple(x) for x in ground_paths(g, seeds, [path]).tolist()}
    assert got == walks(tri, seeds, path, R)
    if got: assert all(kg.has_triples(*np.array(sorted(got)).T))
    if got: assert len(ground_path(g, seeds, path, max_nodes=0)) == 0  # a frontier over the cap retrieves nothing


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_kgs(), st.integers(1, 8), st.integers(0, 3))
def test_gcr_decoding_never_leaves_the_trie(kgs, n, seed):
    kg, seeds = kgs
    R, rel_texts = kg.num_relations, relation_texts(kg)
    g = RelGraph(kg.head, kg.rel, kg.tail, R)
    gen = tiny_generator([path_prompt('which e is it ?')] + rel_texts + ['<p> > </p>'], dim=32, seed=seed)
    trie, seq_paths, _ = gen.build_trie(g, seeds, rel_texts)
    # the trie holds exactly the realised paths of 1-2 hops (reference: walks from the seeds)
    ref = {p for k in (1, 2) for p in itertools.product(range(2 * R), repeat=k) if walks([tuple(x) for x in kg.triples.tolist()], seeds, p, R)}
    assert set(kg_paths(g, seeds)) == ref == set(seq_paths.values())
    found = gen.constrained_paths('which e is it ?', trie, n)
    assert all(s in trie for s in found)
    assert len(found) == len(set(found)) == min(n, len(trie))


@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4), min_size=1, max_size=8))
def test_trie_allows_exactly_the_next_tokens_of_its_sequences(seqs):
    trie = PathTrie(seqs)
    for s in seqs:
        assert s in trie
        for k in range(len(s)):
            want = sorted({q[k] for q in seqs if len(q) > k and q[:k] == s[:k]})
            assert trie.allowed(s[:k]) == want
    assert trie.allowed([9]) == []


def test_a_seed_outside_the_graph_retrieves_nothing(toy, fitted):
    kg, train, qgraphs, _ = toy
    other = as_triples(qgraphs[3])  # another question's graph: the seed of question 0 is not in it
    for m in (fitted, GCR.from_rog(fitted), GCR.from_rog(fitted, paths='relation')):
        got = m.retrieve(GoldGuard(train[0]), kg, other)
        assert got.shape == (0, 3) and got.dtype == np.int64


def test_lora_fine_tune_trains_adapters_only_and_merges_a_low_rank_change(toy):
    "LoRA (the paper profile's 7B/8B generators): the loss falls, each weight changes by a rank <= r matrix, the model is plain again."
    kg, train, qgraphs, texts = toy
    gen = tiny_generator(texts, seed=1)
    before = {n: p.detach().clone() for n, p in gen.model.named_parameters()}
    pairs = training_pairs(train, kg)
    with torch.no_grad(): l0 = float(gen.batch_loss(pairs))
    gen.fine_tune(pairs, steps=60, batch_size=4, lr=1e-2, lora_rank=2)
    with torch.no_grad(): l1 = float(gen.batch_loss(pairs))
    after = dict(gen.model.named_parameters())
    assert l1 < 0.8 * l0 and set(after) == set(before) and gen.lora_rank == 2
    changed = [n for n in before if not torch.equal(before[n], after[n].detach())]
    assert changed and all(n.endswith('proj.weight') for n in changed)          # embeddings, norms and the head stay fixed
    assert all(int(torch.linalg.matrix_rank(after[n].detach() - before[n])) <= 2 for n in changed)


def test_rog_with_lora_names_it_and_a_saved_generator_keeps_it(toy, tmp_path):
    from kgqa_nb.pathgen import load_generator
    kg, train, qgraphs, texts = toy
    rog = RoG(tiny_generator(texts), steps=5, batch_size=4, lr=1e-2, lora_rank=2).fit(train, kg)
    assert '5 steps (LoRA r=2) on GT paths' in rog.describe()
    assert load_generator(rog.gen.save(tmp_path / 'g')).lora_rank == 2
    assert GCR.from_rog(rog).lora_rank == 2


def test_benchmark_gcr_fits_its_own_generator_only_when_its_budget_names_one(toy, tmp_path):
    "GCR's relation variant shares RoG's fine-tuned generator unless the budget names another (the paper: Llama-3.1-8B for GCR, Llama-2-7B for RoG)."
    from kgqa_nb.benchmark import BenchmarkSetup, gcr_model, rog_model
    from kgqa_nb.core import UsageError
    kg, train, qgraphs, texts = toy
    folder = tmp_path / 'ckpt'
    tiny_generator(texts, seed=3).model.save_pretrained(folder); tiny_generator(texts, seed=3).tok.save_pretrained(folder)
    base = dict(train=train, train_graphs=[as_triples(g) for g in qgraphs], cache_dir=tmp_path / 'cache')
    rog = dict(generator='tiny', steps=3, batch_size=4, lr=1e-2)
    shared = gcr_model(BenchmarkSetup(kg, budgets={'rog': rog, 'gcr': dict(generator='', lora_rank=0, n_paths=4, paths='relation')}, **base))
    assert shared.n_paths == 4 and 'random-init' in shared.gen.label
    own = gcr_model(BenchmarkSetup(kg, budgets={'rog': rog, 'gcr': dict(generator=f'hf:{folder}', lora_rank=2, paths='relation')}, **base))
    assert own.gen.label == 'ckpt' and own.gen.lora_rank == 2 and 'LoRA r=2' in own.describe()
    assert len(list((tmp_path / 'cache').glob('rog*'))) == 2                    # two keyed fine-tunes, the shared one reused
    with pytest.raises(UsageError, match='tiny, gemma or hf:'):
        rog_model(BenchmarkSetup(kg, budgets={'rog': dict(rog, generator='llama')}, **base))


def test_the_fitted_generator_cache_key_follows_everything_that_changes_the_fine_tune(toy, tmp_path):
    "Seed, training questions' wording and the train graphs each give a new fine-tune; the same setup reuses the saved one (float32 on the CPU)."
    from kgqa_nb.benchmark import BenchmarkSetup, fitted_path_model
    kg, train, qgraphs, texts = toy
    graphs = [as_triples(g) for g in qgraphs]
    def fit(train=train, graphs=graphs, **b):
        return fitted_path_model(BenchmarkSetup(kg, train=train, train_graphs=graphs, cache_dir=tmp_path,
                                                budgets={'rog': dict(generator='tiny', steps=2, batch_size=4, lr=1e-2, **b)}))
    fit(); fit()
    assert len(list(tmp_path.glob('rog-*'))) == 1
    again = fit()
    assert again.gen.steps == 2 and next(again.gen.model.parameters()).dtype == torch.float32 and again.gen.device.type == 'cpu'
    fit(seed=1); fit(train=[dict(r, question=r['question'] + ' ?') for r in train]); fit(graphs=[g[:-1] for g in graphs])
    assert len(list(tmp_path.glob('rog-*'))) == 4


def test_rog_decodes_room_for_its_longest_trained_path_and_counts_unparsed_beams(toy, tmp_path):
    "A generator remembers its longest trained target (also when saved and loaded); RoG leaves room for it and counts beams that parse to no path."
    from kgqa_nb.pathgen import load_generator
    kg, train, qgraphs, texts = toy
    rog = RoG(tiny_generator(texts), steps=3, batch_size=4, lr=1e-2, max_new_tokens=1).fit(train, kg)
    longest = max(len(rog.gen.target_ids(t)) for _, t in training_pairs(train, kg))
    assert rog.gen.max_target == longest and load_generator(rog.gen.save(tmp_path / 'g')).max_target == longest
    rog.retrieve({k: train[0][k] for k in ALLOWED}, kg)
    assert rog.n_beams == rog.beams and 0 <= rog.n_unparsed <= rog.n_beams


def test_the_registry_generator_can_be_saved_after_fine_tuning_and_loads_back_the_same(tmp_path):
    "Gemma 3 270M from its GGUF (dequantised) is a plain model: `save` writes it and `load_generator` gives the same beams (the companion caches it)."
    from kgqa_nb.llm_local import find_gguf
    from kgqa_nb.pathgen import gguf_generator, load_generator
    if find_gguf() is None: pytest.skip('the registry GGUF is not on this machine (make llm-local)')
    gen = gguf_generator()
    gen.fine_tune([('Who directed Alien?', ' <p> director </p>')], steps=1, batch_size=1, lr=1e-5)
    back = load_generator(gen.save(tmp_path / 'g'), device='cpu')
    assert back.steps == 1 and back.beam_paths('Who directed Alien?', 2, 6) == gen.beam_paths('Who directed Alien?', 2, 6)


@pytest.fixture(scope='module')
def fitted_walks(toy):
    "GCR fine-tuned on the entity-level walks of the toy training questions (entity labels in the word vocabulary)."
    from kgqa_nb.pathgen import entity_training_pairs
    kg, train, qgraphs, texts = toy
    vocab = texts + [t for _, t in entity_training_pairs(train, kg)] + [str(x) for x in kg.entity_labels] + relation_texts(kg)
    return GCR(tiny_generator(vocab), steps=60, batch_size=4, lr=3e-3).fit(train, kg)


def test_entity_gcr_retrieves_the_triples_of_its_decoded_walks_only(toy, fitted_walks):
    from kgqa_nb.pathgen import walk_entities, walk_triples
    kg, train, qgraphs, _ = toy
    m = fitted_walks
    for rec, qg in zip(train[:4], qgraphs[:4]):
        graph = as_triples(qg)
        got = m.retrieve(GoldGuard(rec), kg, graph)
        g = RelGraph(graph[:, 0], graph[:, 1], graph[:, 2], kg.num_relations)
        assert 0 < len(got) <= 2 * m.n_paths and got.tolist() == walk_triples(g, m.last_paths).tolist()
        assert all(1 <= len(w[1]) <= m.max_hops and walk_entities(g, w)[0] in set(g.h.tolist()) | set(g.t.tolist()) for w in m.last_paths)
        assert {tuple(x) for x in gold_triples(rec, kg).tolist()} <= {tuple(x) for x in got.tolist()}  # trained on these questions
    assert 'KG-Trie of entity paths' in m.describe() and m.run_info()['trie_walks'] >= m.run_info()['trie_paths'] > 0


def test_entity_walks_are_every_walk_of_the_graph(toy):
    "The walks of 1-2 steps from a seed, each edge at most once, against a brute-force listing."
    from kgqa_nb.pathgen import entity_walks
    kg, _, qgraphs, _ = toy
    g = RelGraph(qgraphs[0].h, qgraphs[0].r, qgraphs[0].t, kg.num_relations)
    s = int(qgraphs[0].seeds[0]); E = range(len(g.h))
    ends = lambda e, x: [(e, int(g.r[e]), int(g.t[e]))] * int(g.h[e] == x) + [(e, int(g.r[e]) + g.R, int(g.h[e]))] * int(g.t[e] == x)
    one = [((e, d),) for e in E for e, d, _ in ends(e, s)]
    two = [((e, d), (f, c)) for e in E for e, d, n in ends(e, s) for f in E if f != e for f, c, _ in ends(f, n)]
    assert sorted(w for _, w in entity_walks(g, [s])) == sorted(one + two)


def test_random_trie_paths_are_a_control_of_the_same_trie(toy, fitted_walks):
    kg, train, qgraphs, _ = toy
    rnd = GCR.from_rog(fitted_walks, paths='entity', decode='random')
    graph = as_triples(qgraphs[0])
    got = rnd.retrieve(GoldGuard(train[0]), kg, graph)
    assert 0 < len(got) <= 2 * rnd.n_paths and {tuple(x) for x in got.tolist()} <= {tuple(x) for x in graph.tolist()}
    assert 'random trie paths (control)' in rnd.describe()
    with pytest.raises(ValueError, match="decode must be"): GCR(fitted_walks.gen, decode='best')
