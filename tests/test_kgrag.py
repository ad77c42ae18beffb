"""KG-RAG (chapter 21): candidate retrieval against networkx, top-K against brute force, the embedding store across
processes, and replies that ignore the format, from a local OpenAI-compatible server."""
import json, subprocess, sys, textwrap

import networkx as nx
import numpy as np
import pytest

from kgqa_nb import kgrag
from kgqa_nb.cli import main as cli_main
from kgqa_nb.core import UsageError
from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.kgrag import (ISSUES, KGRAG, MetaQAQuestion, TripleRetriever, candidate_triples, evaluate_kgrag, kgrag_cli,
                           parse_decomposition, top_k_triples, triple_texts)
from kgqa_nb.llm import LLMClient, register_offline_model
from kgqa_nb.llm_server import OfflineChatServer
from kgqa_nb.text import HashingEncoder


def random_kg(seed, n=40, e=90, r=4):
    rng = np.random.default_rng(seed)
    h, t, rel = rng.integers(0, n, e), rng.integers(0, n, e), rng.integers(0, r, e)
    return KnowledgeGraph(h, rel, t, [f'e{i}' for i in range(n)], [f'r{i}' for i in range(r)],
                          [f'Entity_{i}' for i in range(n)], [f'rel_{i}' for i in range(r)], name=f'random{seed}')


def nx_candidates(kg, seeds, n_hops, direction):
    "Reference: networkx shortest-path lengths, then every triple with an end closer than N hops."
    g = nx.MultiDiGraph(); g.add_nodes_from(range(kg.num_entities))
    for i, (h, t) in enumerate(zip(kg.head.tolist(), kg.tail.tolist())): g.add_edge(h, t, key=i)
    view = {'both': g.to_undirected(as_view=True), 'out': g, 'in': g.reverse(copy=False)}[direction]
    dist = {}
    for s in seeds:
        for v, d in nx.single_source_shortest_path_length(view, s, cutoff=n_hops - 1).items(): dist[v] = min(d, dist.get(v, d))
    out = {}
    for i, (h, t) in enumerate(zip(kg.head.tolist(), kg.tail.tolist())):
        ends = {'both': (h, t), 'out': (h,), 'in': (t,)}[direction]
        ds = [dist[x] + 1 for x in ends if x in dist]
        if ds: out[i] = min(ds)
    return out


@pytest.mark.parametrize('seed', range(12))
def test_candidates_equal_networkx_bfs(seed):
    kg = random_kg(seed, n=30 + seed * 5, e=40 + seed * 15)
    rng = np.random.default_rng(100 + seed)
    for direction in ('both', 'out', 'in'):
        for n_hops in (1, 2, 3):
            seeds = rng.choice(kg.num_entities, 1 + seed % 2, replace=False).tolist()
            c = candidate_triples(kg, seeds, n_hops, direction)
            ref = nx_candidates(kg, seeds, n_hops, direction)
            assert dict(zip(c.eids.tolist(), c.hop.tolist())) == ref, (seed, direction, n_hops)
            assert len(set(c.eids.tolist())) == len(c)  # each triple once
            assert list(c.hop) == sorted(c.hop)  # by hop


def test_top_k_triples_equals_brute_force():
    rng = np.random.default_rng(0)
    for metric, engine in (('cosine', 'numpy'), ('ip', 'numpy'), ('cosine', 'faiss'), ('ip', 'faiss')):
        for n, k in ((1, 5), (7, 3), (30, 30), (200, 10), (3000, 30)):
            x, q = rng.normal(size=(n, 16)).astype(np.float32), rng.normal(size=16).astype(np.float32)
            s, i = top_k_triples(q, x, k, metric, engine)
            xs = x / np.linalg.norm(x, axis=1, keepdims=True) if metric == 'cosine' else x
            qs = q / np.linalg.norm(q) if metric == 'cosine' else q
            ref = xs @ qs
            want = np.argsort(-ref, kind='stable')[:k]
            assert i.tolist() == want.tolist(), (metric, engine, n, k)
            np.testing.assert_allclose(s, ref[want], rtol=1e-5, atol=1e-5)


def test_select_ranks_the_candidates_by_similarity(tmp_path):
    kg = random_kg(3)
    ret = TripleRetriever(kg, HashingEncoder(), store_root=tmp_path)
    c = ret.candidates('Entity_0', 2)
    top = ret.select('Entity 0 rel 1', c, 5)
    texts = triple_texts(kg, c.eids)
    enc = HashingEncoder()
    sims = enc.encode(texts) @ enc.encode(['Entity 0 rel 1'], role='query')[0]
    np.testing.assert_allclose([x for _, x, _ in top], np.sort(sims)[::-1][:5], rtol=1e-5, atol=1e-6)  # ties may swap places
    pos = {t: j for j, t in enumerate(texts)}
    np.testing.assert_allclose([sims[pos[t]] for t, _, _ in top], [x for _, x, _ in top], rtol=1e-5, atol=1e-6)
    assert [e for _, _, e in top] == [int(c.eids[pos[t]]) for t, _, _ in top]


STORE_SCRIPT = textwrap.dedent('''
    import json, sys, numpy as np
    from kgqa_nb.kg import KnowledgeGraph
    from kgqa_nb.kgrag import TripleRetriever, triple_texts
    from kgqa_nb.text import HashingEncoder
    class Forbidden(HashingEncoder):
        def _embed(self, texts): raise AssertionError(f're-embedded {len(texts)} texts')
    rng = np.random.default_rng(7)
    kg = KnowledgeGraph(rng.integers(0, 50, 150), rng.integers(0, 3, 150), rng.integers(0, 50, 150), [f'e{i}' for i in range(50)],
                        ['a', 'b', 'c'], [f'Thing_{i}' for i in range(50)], ['made_by', 'has_part', 'near'])
    enc = HashingEncoder() if sys.argv[2] == 'first' else Forbidden()
    ret = TripleRetriever(kg, enc, store_root=sys.argv[1])
    vecs = ret.vectors(triple_texts(kg, np.arange(kg.num_triples)))
    print(json.dumps(dict(sum=float(vecs.sum()), n=len(vecs))))
''')


def test_triple_vectors_are_reused_across_processes(tmp_path):
    run = lambda which: subprocess.run([sys.executable, '-c', STORE_SCRIPT, str(tmp_path / 'store'), which], capture_output=True, text=True)
    first = run('first'); assert first.returncode == 0, first.stderr
    second = run('second'); assert second.returncode == 0, second.stderr  # the encoder of the second process refuses to embed
    assert json.loads(first.stdout) == json.loads(second.stdout)
    empty = subprocess.run([sys.executable, '-c', STORE_SCRIPT, str(tmp_path / 'other'), 'second'], capture_output=True, text=True)
    assert empty.returncode != 0 and 're-embedded' in empty.stderr  # the check can fail: a fresh store must embed


# --- replies that ignore the format, through a real local OpenAI-compatible server --------------------------------------

TOY = KnowledgeGraph.from_id_triples(
    [('m1', 'directed_by', 'p1'), ('m1', 'starred_actors', 'p2'), ('m2', 'starred_actors', 'p2'), ('m2', 'directed_by', 'p3')],
    {'m1': 'Inception', 'm2': 'Warrior', 'p1': 'Christopher Nolan', 'p2': 'Tom Hardy', 'p3': 'Gavin O\'Connor'}, name='toy')
Q = MetaQAQuestion('2hop-test-1', 'who directed the movies starred by [Tom Hardy]', 'Tom Hardy', ('Christopher Nolan', "Gavin O'Connor"), 2)


@pytest.fixture
def scripted():
    "Replace the offline KG-RAG roles by scripted ones for one test, then restore them."
    saved = {n: m for n, m in kgrag.register_offline_model.__globals__['_OFFLINE_MODELS'].items() if n.startswith('kg-rag-')}
    def script(**replies):
        for role, fn in replies.items():
            register_offline_model(f'kg-rag-{role}', matches=lambda ms, r=role: kgrag.prompt_role(ms) == r, version='test')(fn)
    yield script
    for n, m in saved.items(): register_offline_model(n, m.matches, m.version)(m.fn)


def online(srv, **kw):
    return LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, backoff_base=0.01, **kw)


def test_bad_replies_are_named_counted_and_survived(scripted, tmp_path):
    scripted(decompose=lambda ms: 'Reasoning: go via the movies\nSub-questions:\n1. Which movies did Tom Hardy star in?\n2.\n3. Who directed [answer 1]?',
             answer=lambda ms: 'Probably someone famous, I think.' if 'directed' in ms[-1]['content'].rpartition('Question: ')[2] else 'Inception; Warrior',
             reformulate=lambda ms: '', synthesize=lambda ms: '')
    with OfflineChatServer() as srv:
        system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), online(srv), n_hops=2, top_k=5)
        t = system.answer(Q.question)
        df = evaluate_kgrag(system, [Q])
    assert [s['question'] for s in t['steps']] == ['Which movies did Tom Hardy star in?', 'Who directed Inception; Warrior?']  # reformulation fell back
    assert sorted(t['issues']) == ['empty_reply', 'empty_reply', 'empty_subquestion', 'non_entity_answer']
    assert t['prediction'] == 'Probably someone famous, I think.'  # empty synthesis: the last sub-answer
    row = df.iloc[0]
    assert (row.issue_empty_reply, row.issue_empty_subquestion, row.issue_non_entity_answer, row.hit_at_1) == (2, 1, 1, 0.0)
    assert srv.requests and all(r['params']['temperature'] == 0.3 and r['params']['max_tokens'] in (256, 512) for r in srv.requests)


def test_no_subquestions_falls_back_to_the_whole_question(scripted, tmp_path):
    scripted(decompose=lambda ms: "I'd be happy to help! This is an interesting question about movies.",
             synthesize=lambda ms: 'They are directed by him.')
    with OfflineChatServer() as srv:
        system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), online(srv), n_hops=2, top_k=10)
        t = system.answer(Q.question)
    assert [s['question'] for s in t['steps']] == ['who directed the movies starred by Tom Hardy']
    assert t['issues'] == ['no_subquestions', 'no_final_answer']
    assert t['prediction'] == 'They are directed by him.'


def test_sampling_parameters_reach_the_server(tmp_path):
    with OfflineChatServer() as srv:
        system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), online(srv), n_hops=2, top_k=10)
        system.answer('who directed [Inception]', 'llm+kg')
    p = srv.requests[0]['params']
    assert (p['max_tokens'], p['temperature'], p['top_k'], p['min_p'], p['repeat_penalty']) == (256, 0.3, 40, 0.05, 1.1)


def test_truncated_decomposition_is_named():
    assert parse_decomposition('Reasoning: x\nSub-questions:\n1. Who directed Heat?\n2. Wh', 'length')[2] == ['no_end_marker']
    assert parse_decomposition('Reasoning: x\nSub-questions:\n1. Who directed Heat?', 'stop')[2] == []  # the server removed <END>


def test_llm_error_is_recorded_and_the_run_goes_on(tmp_path):
    with OfflineChatServer(faults=['500'] * 4) as srv:
        system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), online(srv, max_retries=1), n_hops=2, top_k=5)
        df = evaluate_kgrag(system, [Q, Q], mode='llm+kg')
    assert df.llm_error.iloc[0] != '' and df.llm_error.iloc[1] != ''
    assert set(ISSUES) <= {c.removeprefix('issue_') for c in df.columns}


def test_unreachable_server_stops_the_run(tmp_path):
    srv = OfflineChatServer().start(); url = srv.url; srv.stop()
    llm = LLMClient('openai', model='kgqa-offline', base_url=url, cache=False, max_retries=0, timeout=2)
    system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), llm, n_hops=2, top_k=5)
    with pytest.raises(kgrag.LLMError, match='cannot reach'):
        evaluate_kgrag(system, [Q, Q], mode='llm+kg')


def test_unreachable_reader_server_stops_the_run(tmp_path):
    "A sub-question reader (the floor row's) whose server is gone stops the run like the roles' server would (before: every row an llm_error)."
    from kgqa_nb.readers import FewShotReader
    srv = OfflineChatServer().start(); url = srv.url; srv.stop()
    reader = FewShotReader(LLMClient('openai', model='kgqa-offline', base_url=url, cache=False, max_retries=0, timeout=2))
    system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), LLMClient(cache=False), n_hops=2, top_k=5, reader=reader)
    with pytest.raises(kgrag.LLMError, match='cannot reach'):
        evaluate_kgrag(system, [Q, Q], mode='kg-rag')


def test_a_reader_answers_the_subquestions_from_the_same_triples(tmp_path):
    "With a reader, each sub-question's top-K triples go to it (as labels) and the answer role is never asked."
    seen = []
    class Recorder:
        def answer(self, question, triples, record=None): seen.append((question, list(triples))); return ['Tom Hardy']
    plain = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), LLMClient(cache=False), n_hops=2, top_k=5)
    read = KGRAG(plain.retriever, LLMClient(cache=False), n_hops=2, top_k=5, reader=Recorder())
    a, b = plain.answer(Q.question), read.answer(Q.question)
    assert len(seen) == len(b['steps']) == len(a['steps']) >= 1
    assert [s['question'] for s in b['steps']][:1] == [s['question'] for s in a['steps']][:1]
    assert seen[0][1] == kgrag.triple_parts(TOY, b['steps'][0]['triple_ids'])
    assert ['(' + ', '.join(t) + ')' for t in seen[0][1]] == b['steps'][0]['triples']
    assert all(s['answer'] == 'Tom Hardy' for s in b['steps'])


def test_cli_bad_question_raises_one_line_and_prints_nothing(capsys):
    from kgqa_nb.cli import kgrag_parser
    with pytest.raises(ValueError, match='brackets, found 0'): kgrag_cli(kgrag_parser().parse_args(['ask', 'who directed Inception']))
    assert capsys.readouterr() == ('', '')  # the command prints no error itself: `kgqa` does, once


@pytest.mark.parametrize('flag', ['--hops', '--top-k'])
def test_cli_numeric_flags_are_checked_before_any_work(flag, monkeypatch):
    from kgqa_nb.cli import kgrag_parser
    def no_work(*a, **k): raise AssertionError('the KG was loaded before the flags were checked')
    monkeypatch.setattr(kgrag, 'load_kg', no_work)
    with pytest.raises(UsageError) as e: kgrag_parser().parse_args(['ask', 'who directed [Inception]', flag, '0'])
    assert str(e.value).startswith(f'argument {flag}: must be at least 1, got 0')


def test_kgqa_kgrag_error_is_one_line_on_stderr(capsys):
    assert cli_main(['kgrag', 'ask', 'who directed [Inception]', '--hops', '-1']) == 2
    out, err = capsys.readouterr()
    assert out == '' and err.startswith('kgqa kgrag: argument --hops: must be at least 1, got -1') and err.count('\n') == 1
    assert cli_main(['kgrag', 'ask', 'q', '--top-k', 'many']) == 2
    out, err = capsys.readouterr()
    assert out == '' and err.startswith("kgqa kgrag: argument --top-k: expected a whole number, got 'many'") and err.count('\n') == 1


@pytest.mark.data('metaqa')
def test_cli_unknown_entity_is_one_line(capsys):
    assert cli_main(['kgrag', 'ask', 'who directed [No Such Film 12345]', '--encoder', 'all-MiniLM-L6-v2']) == 2
    out, err = capsys.readouterr()
    assert out == '' and err == "kgqa kgrag: no entity labelled 'No Such Film 12345' in KG 'metaqa'\n"


def test_label_lookup_is_cached_by_the_module_not_on_the_graph():
    kg = random_kg(5)
    assert kgrag.entity_by_label(kg, 'Entity_3') == 3
    first = kgrag._LABEL_INDEX[kg]
    assert kgrag.entity_by_label(kg, 'entity_7') == 7 and kgrag._LABEL_INDEX[kg] is first  # the second lookup reuses it
    assert not any('kgrag' in k for k in vars(kg))  # nothing stashed on the graph
    n = len(kgrag._LABEL_INDEX); del kg, first
    import gc; gc.collect()
    assert len(kgrag._LABEL_INDEX) == n - 1  # and it goes with the graph


def write_metaqa(root, n=30):
    for h in (1, 2, 3):
        (root / f'{h}-hop').mkdir(parents=True)
        (root / f'{h}-hop' / 'test.txt').write_text(''.join(f'question {i} of [E{h}_{i}]\tA{i}\n' for i in range(n)))
    return root


def test_metaqa_samples_is_one_grid(tmp_path):
    root = write_metaqa(tmp_path)
    grid = kgrag.metaqa_samples([1, 3], 5, [0, 1, 2], root=root)
    assert [(h, s) for h, s, _ in grid] == [(1, 0), (1, 1), (1, 2), (3, 0), (3, 1), (3, 2)]
    assert all(len(q) == 5 and all(x.hops == h for x in q) for h, _, q in grid)
    assert [[x.qid for x in q] for *_, q in grid] == [[x.qid for x in q] for *_, q in kgrag.metaqa_samples([1, 3], 5, [0, 1, 2], root=root)]
    assert grid[0][2] != grid[1][2]  # the seeds draw different samples
    with pytest.raises(ValueError, match='n_questions must be 0'): kgrag.metaqa_samples([1], -1, [0], root=root)


def test_figure_5_and_figure_6_draw_the_same_questions():
    "Both artifacts take their questions from `metaqa_samples` with the same three parameters, and draw them no other way."
    import json
    from kgqa_nb.core import project_dirs
    for nb in ('80_kgrag_hops_topk', '81_kgrag_baselines'):
        code = '\n'.join(''.join(c['source']) for c in json.loads((project_dirs.root / 'nbs' / f'{nb}.ipynb').read_text())['cells']
                         if c['cell_type'] == 'code')
        assert code.count('metaqa_samples(hop_sets, n_questions, seeds)') == 1, nb
        assert 'sample_questions' not in code and 'load_metaqa_questions' not in code, nb


@pytest.mark.data('metaqa')
def test_offline_decomposer_follows_every_test_template():
    from kgqa_nb.kgrag import load_metaqa_questions, offline_decompose, decomposition_messages, parse_decomposition, type_chain
    for h in (1, 2, 3):
        qs = load_metaqa_questions(h)[:300]
        for q in qs:
            _, subqs, issues = parse_decomposition(offline_decompose(decomposition_messages(q.question)))
            assert issues == [] and len(subqs) == len(type_chain(q.qtype)), q
