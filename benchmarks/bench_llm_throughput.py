"""Every LLM role at a server's rate limit (issue 41, items 1 and 7): each role's pipeline runs its questions against the
stand-in server (`OfflineChatServer`), which admits RPM requests a minute (a token bucket holding one second's worth; HTTP
429 with Retry-After beyond it) and takes LATENCY_S per answer. The roles whose next prompt reads the last reply (KG-RAG's
decomposition, sub-questions and synthesis; ToG's and PoG's steps; SubgraphRAG's double check) run their questions side
by side through `LLMClient.streams` (or two `chat_many` rounds), each question's steps in order.

Reported per role: questions, requests, wall seconds, the achieved rate as a share of the limit, calls in flight at most
(as the server counted them), HTTP 429s, and the calls lost or doubled: the pipeline's calls (the client's count, no cache)
against the requests the server admitted; and the plan's time for those requests (`kgqa_nb.plan.interactive_seconds`, the
model `kgqa rerun --plan` uses: the stated limit, the latency, and how the code sends the calls: `chat_many` at once, or
`streams` with the role's calls per question in order) beside the measured wall time. `tests/test_llm_streams.py` runs the same workloads small and checks each
role's peak in flight and that its results equal the one-by-one loop's."""
import json, time
from contextlib import contextmanager

import pandas as pd

from kgqa_nb import llm
from kgqa_nb.agents import PoG, ToG, prompt_step
from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.kgrag import KGRAG, MetaQAQuestion, TripleRetriever, evaluate_kgrag, kgrag_row
from kgqa_nb.llm import LLMClient, register_offline_model
from kgqa_nb.llm_server import OfflineChatServer
from kgqa_nb.readers import LLMOnlyReader, LLMReader, SubgraphRAGReader
from kgqa_nb.retriever_study import reader_hits, retriever_scores
from kgqa_nb.subgraphrag import prepare_examples, text_features, two_hop_dataset
from kgqa_nb.text import HashingEncoder
from kgqa_nb.datasources import load_source
from kgqa_nb.loaders import load_kg
from kgqa_nb.ultrag import LLMArbitrator, LLMQueryWriter, SEPPRPruner, SymbolicStep, Ultrag, register_oracle_queries
from kgqa_nb.ultrag_eval import evaluate_ultrag

RPM, LATENCY_S = 600, 1.0
ROLES = ('reader', 'subgraphrag-reader', 'llm-only', 'study-reader', 'ultrag', 'kg-rag', 'tog', 'pog')


def agents_kg() -> KnowledgeGraph:
    "A film, its director and cast, where they were born, and distractors (the agents' test world)."
    return KnowledgeGraph.from_id_triples(
        [('Q1', 'P57', 'Q2'), ('Q1', 'P161', 'Q3'), ('Q1', 'P161', 'Q4'), ('Q1', 'P136', 'Q5'), ('Q2', 'P19', 'Q6'),
         ('Q3', 'P19', 'Q7'), ('Q2', 'P27', 'Q8'), ('Q6', 'P17', 'Q8'), ('Q9', 'P57', 'Q2')],
        entity_labels=dict(Q1='Night Harbour', Q2='Ada Brenner', Q3='Tom Vale', Q4='Lia Moss', Q5='drama film', Q6='Port Ellis',
                           Q7='Greyford', Q8='Norland', Q9='Cold Light'),
        relation_labels=dict(P57='director', P161='cast member', P136='genre', P19='place of birth', P27='country of citizenship',
                             P17='country'), name='agents-toy')


def agent_reply(messages) -> str:
    "A deterministic agent model: keep the first option, sufficient once a place of birth is among the facts, never backtrack."
    step, body = prompt_step(messages), messages[-1]['content']
    if step == 'decompose': return '{"sub_objectives": ["find the director", "find where the director was born"]}'
    if step == 'sufficiency':
        return '{"sufficient": true, "answer": ["Port Ellis (Q6)"], "covered": [1, 2]}' if 'place of birth' in body else '{"sufficient": false, "answer": [], "covered": []}'
    if step == 'reflect': return '{"backtrack": null}'
    return '{"keep": [1]}'


@contextmanager
def agent_model():
    "The deterministic agent model registered for the run, the registry restored after."
    saved = dict(llm._OFFLINE_MODELS)
    register_offline_model('bench-agent-steps', matches=lambda ms: prompt_step(ms) is not None, version='bench')(agent_reply)
    try: yield
    finally: llm._OFFLINE_MODELS.clear(); llm._OFFLINE_MODELS.update(saved)


KGRAG_KG = KnowledgeGraph.from_id_triples(
    [('m1', 'directed_by', 'p1'), ('m1', 'starred_actors', 'p2'), ('m2', 'starred_actors', 'p2'), ('m2', 'directed_by', 'p3')],
    {'m1': 'Inception', 'm2': 'Warrior', 'p1': 'Christopher Nolan', 'p2': 'Tom Hardy', 'p3': "Gavin O'Connor"}, name='toy')
READER_TRIPLES = [('Alien', 'director', 'Ridley Scott'), ('Alien', 'composer', 'Jerry Goldsmith')]


class OneByOne:
    "A reader asked one prompt after the other (the loop `reader_hits` replaced)."
    def __init__(self, reader): self.reader = reader
    def answer_many(self, qs, tris, views): return [self.reader.answer(*x) for x in zip(qs, tris, views)]


def workload(role: str, n: int, folder) -> tuple:
    "(parallel, sequential): the role's pipeline on `n` questions as it runs now, and as the one-by-one loop; each takes a client."
    if role in ('reader', 'subgraphrag-reader', 'llm-only'):
        cls = {'reader': LLMReader, 'subgraphrag-reader': SubgraphRAGReader, 'llm-only': LLMOnlyReader}[role]
        qs = [('Who is the director of Alien' if i % 2 else 'Who composed Alien') + f' (question {i})' for i in range(n)]
        return (lambda c: cls(c).answer_many(qs, [READER_TRIPLES] * n), lambda c: [cls(c).answer(q, READER_TRIPLES) for q in qs])
    if role == 'study-reader':  # the retriever study's reader: every test question at every K of one run (retriever_study.reader_hits)
        kg, recs, graphs = two_hop_dataset(n, n_distractors=4, seed=1)
        enc = HashingEncoder(dim=32)
        exs, feats = prepare_examples(recs, graphs, enc, root=folder), text_features(kg, enc, root=folder)
        recs = {r['id']: dict(r, answer_node=f"{kg.entity_labels[g.answers[0]]} ({kg.entity_ids[g.answers[0]]})") for r, g in zip(recs, graphs)}
        scores, ks = [retriever_scores('ppr', e, feats) for e in exs], (3, 10)
        return (lambda c: reader_hits(exs, scores, recs, kg, SubgraphRAGReader(c), ks),
                lambda c: reader_hits(exs, scores, recs, kg, OneByOne(SubgraphRAGReader(c)), ks))
    if role == 'ultrag':  # ULTRAG's writer and arbitrator per question, in order (ultrag_eval.evaluate_ultrag through Ultrag.map)
        tw = load_kg('toyworld')
        src = load_source('generated', kg=tw, seed=0)
        register_oracle_queries(src.all, tw)  # the offline oracle writer answers on the stand-in server
        recs = pd.concat([src.test, src.train.assign(split='train')], ignore_index=True).head(n)  # n questions, test ones first
        pipe = lambda c: Ultrag(tw, LLMQueryWriter(c, tw), SymbolicStep(), pruner=SEPPRPruner(k=500), arbitrator=LLMArbitrator(c))
        key = lambda df: df[['id', 'query', 'error', 'n_answers', 'hits', 'prompt_tokens', 'completion_tokens']].to_dict('records')
        return (lambda c: key(evaluate_ultrag(pipe(c), recs)),
                lambda c: [r for i in range(len(recs)) for r in key(evaluate_ultrag(pipe(c), recs.iloc[[i]]))])  # one question at a time
    if role == 'kg-rag':
        topics = ['Tom Hardy', 'Inception', 'Warrior']
        qs = [MetaQAQuestion(f'q{i}', f'who directed the movies starred by [{topics[i % 3]}]', topics[i % 3], ('Christopher Nolan',), 2) for i in range(n)]
        system = lambda c: KGRAG(TripleRetriever(KGRAG_KG, HashingEncoder(), store_root=folder), c, n_hops=2, top_k=5)
        rows = lambda df: df.to_dict('records')
        return (lambda c: rows(evaluate_kgrag(system(c), qs)), lambda c: [kgrag_row(s, q) for s in [system(c)] for q in qs])
    if role in ('tog', 'pog'):
        kg, cls = agents_kg(), ToG if role == 'tog' else PoG
        recs = [{'question': f'Where was the director of {t} born? ({i})', 'seed_entities': [s]}
                for i, (t, s) in enumerate([('Night Harbour', 'Night Harbour (Q1)'), ('Cold Light', 'Cold Light (Q9)')] * (n // 2 + 1))][:n]
        key = lambda r: (r.stopped, r.rounds, r.calls, r.answer, r.subgraph.tolist())
        return (lambda c: [key(r) for r in cls(c, width=2, depth=3).retrieve_many(recs, kg, [None] * n)],
                lambda c: [key(cls(c, width=2, depth=3).run(r, kg)) for r in recs])
    raise ValueError(f'role must be one of {ROLES}, got {role!r}')


def run_role(role: str, n: int, folder, parallel: bool = True, **server) -> dict:
    "One role's pipeline against a fresh limited server: its results, and what the server and the client counted."
    par, seq = workload(role, n, folder)
    with agent_model(), OfflineChatServer(**server) as srv:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, api_key='x', cache=False, backoff_base=0.05)
        c._openai()  # the openai package's one-time import is not part of the rate
        t0 = time.perf_counter(); out = (par if parallel else seq)(c); wall = time.perf_counter() - t0
    calls = c.usage_summary()['calls']
    return dict(results=out, questions=n, requests=calls, wall_s=round(wall, 2), peak_in_flight=srv.max_inflight,
                http_429=srv.throttled, server_admitted=srv.admitted, lost=max(0, calls - srv.admitted), doubled=max(0, srv.admitted - calls))


STREAMED = ('ultrag', 'kg-rag', 'tog', 'pog')  # roles whose questions run as streams of steps in order


def planned_seconds(role: str, requests: int, questions: int) -> float:
    "The plan's time for a role's requests at the stand-in's limit and latency, sent as the role's code sends them."
    from kgqa_nb.plan import PLAN_DEFAULTS, CallGroup, interactive_seconds
    g = CallGroup(role, role, 'openai', 'kgqa-offline', 'http://127.0.0.1', requests, flow='streams' if role in STREAMED else 'many',
                  chain=requests / questions if role in STREAMED else 1.)
    return interactive_seconds(requests, None, dict(rpm=RPM, tpm=None, concurrency=8), LATENCY_S, PLAN_DEFAULTS, g)[0]


def run(quick: bool = False) -> dict:
    import tempfile
    from pathlib import Path
    n = 40 if quick else 120
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for role in ROLES:
            r = run_role(role, n, Path(d) / role, rpm=RPM, delay_s=LATENCY_S, burst_s=1.0)
            r.pop('results')
            r['share_of_limit'] = round(r['requests'] / r['wall_s'] * 60 / RPM, 3)
            r['planned_s'] = round(planned_seconds(role, r['requests'], n), 1)
            r['measured_over_planned'] = round(r['wall_s'] / r['planned_s'], 3)
            out[role] = r
    return dict(server=dict(rpm=RPM, latency_s=LATENCY_S, bucket_s=1.0), roles=out)


if __name__ == '__main__': print(json.dumps(run(quick=True), indent=1))
