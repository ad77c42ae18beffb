"""KG agents (ToG, PoG): each loop with scripted replies through the local OpenAI-compatible server (a malformed reply
retried then named, the depth limit honoured, ToG's fallback to an empty subgraph, PoG's backtrack on an 'insufficient'
verdict), the offline MiniLM policy on a two-hop toy question, and `retrieve` reading no gold field."""
import json

import numpy as np
import pytest

from kgqa_nb import llm
from kgqa_nb.agents import PoG, ToG, prompt_step
from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.llm import LLMClient, register_offline_model
from kgqa_nb.llm_server import OfflineChatServer

QUESTION = 'Where was the director of Night Harbour born?'
REC = {'question': QUESTION, 'seed_entities': ['Night Harbour (Q1)']}
KEEP = lambda *n: json.dumps({'keep': list(n)})
NO = '{"sufficient": false, "answer": []}'


@pytest.fixture(scope='module')
def toy():
    "A film, its director and cast, where they were born, and distractors (rows 0 and 4 are the answer path)."
    return KnowledgeGraph.from_id_triples(
        [('Q1', 'P57', 'Q2'), ('Q1', 'P161', 'Q3'), ('Q1', 'P161', 'Q4'), ('Q1', 'P136', 'Q5'), ('Q2', 'P19', 'Q6'),
         ('Q3', 'P19', 'Q7'), ('Q2', 'P27', 'Q8'), ('Q6', 'P17', 'Q8'), ('Q9', 'P57', 'Q2')],
        entity_labels=dict(Q1='Night Harbour', Q2='Ada Brenner', Q3='Tom Vale', Q4='Lia Moss', Q5='drama film', Q6='Port Ellis',
                           Q7='Greyford', Q8='Norland', Q9='Cold Light'),
        relation_labels=dict(P57='director', P161='cast member', P136='genre', P19='place of birth', P27='country of citizenship',
                             P17='country'), name='agents-toy')


@pytest.fixture
def scripted():
    "Scripted replies per agent step (the last reply of a step repeats); every prompt is logged as (step, messages)."
    saved = dict(llm._OFFLINE_MODELS)
    script, log = {}, []
    def reply(messages):
        step = prompt_step(messages); log.append((step, messages))
        queue = script[step]
        return queue.pop(0) if len(queue) > 1 else queue[0]
    register_offline_model('test-agents-scripted', matches=lambda ms: prompt_step(ms) is not None, version='test')(reply)
    yield script, log
    llm._OFFLINE_MODELS.clear(); llm._OFFLINE_MODELS.update(saved)


@pytest.fixture
def client():
    with OfflineChatServer() as srv:
        yield LLMClient('openai', model='scripted', base_url=srv.url, api_key='x', cache=False, max_retries=0)


def rows(kg, *i): return kg.triples[list(i)].tolist()


def steps(log): return [s for s, _ in log]


def test_tog_walks_the_scripted_path_and_stops_when_sufficient(toy, scripted, client):
    script, log = scripted
    script.update(relations=[KEEP(1), KEEP(2)], entities=[KEEP(1)],
                  sufficiency=[NO, '{"sufficient": true, "answer": ["Port Ellis (Q6)"]}'])
    tog = ToG(client, width=2)
    sub = tog.retrieve(REC, toy)
    assert sub.dtype == np.int64 and sub.tolist() == rows(toy, 0, 4)
    run = tog.last
    assert (run.stopped, run.rounds, run.calls, run.answer, run.fallback) == ('sufficient', 2, 6, ['Port Ellis (Q6)'], False)
    assert steps(log) == ['relations', 'entities', 'sufficiency'] * 2
    assert 'Entity: Ada Brenner (Q2)' in log[3][1][1]['content']  # round two starts at the kept entity
    assert 'Ada Brenner (Q2) | place of birth (P19) | Port Ellis (Q6)' in log[5][1][1]['content']


def test_malformed_reply_is_asked_again_once_then_ends_the_run_with_its_reason(toy, scripted, client):
    script, log = scripted
    script.update(relations=['I would follow the director.', 'Still no JSON here.'])
    tog = ToG(client)
    sub = tog.retrieve(REC, toy)
    assert (tog.last.stopped, tog.last.calls, sub.shape) == ('reply:not_json', 2, (0, 3))
    retry = log[1][1]
    assert retry[-2] == dict(role='assistant', content='I would follow the director.') and 'reply:not_json' in retry[-1]['content']


def test_a_retry_mends_a_malformed_reply(toy, scripted, client):
    script, log = scripted
    script.update(relations=['{"keep": [9]}', KEEP(1), KEEP(2)], entities=[KEEP(1)],
                  sufficiency=[NO, '{"sufficient": true, "answer": ["Port Ellis (Q6)"]}'])
    tog = ToG(client, width=1)
    assert tog.retrieve(REC, toy).tolist() == rows(toy, 0, 4)
    assert 'reply:bad_number' in log[1][1][-1]['content'] and tog.last.calls == 7


def test_tog_honours_the_depth_limit_and_falls_back_to_an_empty_subgraph(toy, scripted, client):
    script, log = scripted
    script.update(relations=[KEEP(1)], entities=[KEEP(1)], sufficiency=[NO])
    tog = ToG(client, width=1, depth=2)
    sub = tog.retrieve(REC, toy)
    assert sub.shape == (0, 3) and sub.dtype == np.int64
    assert (tog.last.stopped, tog.last.rounds, tog.last.fallback, tog.last.answer) == ('depth limit', 2, True, [])
    assert steps(log) == ['relations', 'entities', 'sufficiency'] * 2  # no third round
    assert tog.last.calls == tog.prompt_budget() == 6


def test_pog_backtracks_once_after_an_insufficient_verdict(toy, scripted, client):
    script, log = scripted
    script.update(decompose=['{"sub_objectives": ["find the director", "find where the director was born"]}'],
                  relations=[KEEP(2), KEEP(1), KEEP(2)],  # cast member (a wrong branch), then director, then place of birth
                  entities=[KEEP(1)],
                  sufficiency=[NO, '{"sufficient": false, "answer": [], "covered": [1]}',
                               '{"sufficient": true, "answer": ["Port Ellis (Q6)"], "covered": [2]}'],
                  reflect=['{"backtrack": 1}', '{"backtrack": null}'])
    pog = PoG(client, width=1, depth=3)
    sub = pog.retrieve(REC, toy)
    run = pog.last
    assert sub.tolist() == rows(toy, 0, 4)  # the dropped branch (Tom Vale) is not retrieved
    assert (run.stopped, run.rounds, run.backtracks, run.answer) == ('sufficient', 3, 1, ['Port Ellis (Q6)'])
    assert steps(log) == ['decompose'] + ['relations', 'entities', 'sufficiency', 'reflect'] * 2 + ['relations', 'entities', 'sufficiency']
    second_round = log[5][1][1]['content']
    assert 'cast member' not in second_round and '→ director (P57)' in second_round  # the tried relation is not offered again
    assert 'Plan (sub-objectives):\n1. find the director' in second_round
    first, second = run.memory.values()
    assert first == ['Night Harbour (Q1) --director (P57)--> Ada Brenner (Q2)']  # settled after round two
    assert not any('Tom Vale' in p for p in first + second) and len(second) == 2


def test_pog_keeps_what_it_explored_at_the_depth_limit(toy, scripted, client):
    script, log = scripted
    script.update(decompose=['{"sub_objectives": ["find the director"]}'], relations=[KEEP(1)], entities=[KEEP(1)],
                  sufficiency=[NO], reflect=['{"backtrack": null}'])
    pog = PoG(client, width=1, depth=2)
    assert pog.retrieve(REC, toy).shape[0] == 2 and pog.last.stopped == 'depth limit' and not pog.last.fallback
    assert steps(log).count('sufficiency') == 2 and steps(log).count('reflect') == 1
    assert pog.last.calls == pog.prompt_budget() == 8


@pytest.mark.parametrize('agent', [ToG, PoG])
def test_offline_policy_answers_a_two_hop_question_and_retrieves_its_path(toy, agent):
    a = agent()
    sub = a.retrieve(REC, toy)
    assert a.last.answer == ['Port Ellis (Q6)'] and a.last.stopped == 'sufficient' and a.last.calls == 0
    got = sub.tolist()
    assert rows(toy, 0)[0] in got and rows(toy, 4)[0] in got
    assert len({tuple(r) for r in got}) == len(got)
    assert 'offline' in a.describe() and 'width 5, depth 4' in a.describe()
    assert ('backtracks from dead ends' in a.describe()) == (agent is PoG)


class QuestionOnly(dict):
    "A record that fails the test when anything but its question or seed entities is read."
    ALLOWED = ('question', 'paraphrased_question', 'seed_entities')
    def __getitem__(self, k):
        assert k in self.ALLOWED, f'retrieve read the gold field {k!r}'
        return super().__getitem__(k)
    def get(self, k, default=None):
        assert k in self.ALLOWED, f'retrieve read the gold field {k!r}'
        return super().get(k, default)
    def __iter__(self): raise AssertionError('retrieve iterated over the record')
    def items(self): raise AssertionError('retrieve read every field')
    def values(self): raise AssertionError('retrieve read every field')


@pytest.mark.parametrize('agent', [ToG, PoG])
def test_retrieve_reads_no_gold_field(toy, agent):
    rec = QuestionOnly(question=QUESTION, seed_entities=['Night Harbour (Q1)'])
    assert len(agent().retrieve(rec, toy)) > 0


def test_a_question_graph_bounds_the_exploration(toy):
    graph = toy.triples[[0, 1, 2, 3, 5]]  # no 'place of birth' of the director
    pog = PoG()
    sub = pog.retrieve(REC, toy, graph)
    assert len(sub) and {tuple(r) for r in sub.tolist()} <= {tuple(r) for r in graph.tolist()}
    with pytest.raises(ValueError, match=r'\(m, 3\) integer array'):
        pog.retrieve(REC, toy, np.zeros((3, 2), np.int64))


def test_llm_agents_name_their_model_in_the_row_label(client):
    assert ToG(client).describe() == f'ToG (LLM {client.describe()}, width 5, depth 4)'
    assert PoG(client, width=3, depth=2).describe() == f'PoG (LLM {client.describe()}, width 3, depth 2)' and PoG.name == 'pog'
    with pytest.raises(ValueError, match='width, depth'):
        ToG(client, depth=0)


def test_a_crowded_relation_offers_a_seeded_sample_of_its_neighbours():
    from kgqa_nb.agents import entity_candidates, walkable
    star = KnowledgeGraph.from_id_triples([('Q0', 'P1', f'Q{i}') for i in range(1, 51)])
    w, hub = walkable(star), star.entity('Q0')
    got = entity_candidates(w, hub, (star.relation('P1'), True), max_candidates=20)
    assert len(got) == len({n for _, n in got}) == 20 and got == entity_candidates(w, hub, (star.relation('P1'), True), max_candidates=20)
    assert [r for r, _ in got] == sorted(r for r, _ in got) and [r for r, _ in got] != list(range(20))  # KG order, not the first 20
    assert all(star.head[r] == hub and star.tail[r] == n for r, n in got)


class Chooser:
    "A policy in code: keeps the relations and entity hops it is told to, and always backtracks to the first earlier entity offered."
    calls = 0
    def __init__(self, kg, keep_entities, relations_after=None):
        self.kg, self.keep_entities, self.relations_after, self.offered, self.earlier = kg, keep_entities, relations_after, [], []
    def describe(self): return 'chooser'
    def decompose(self, task): return ['find the director', 'find the birthplace']
    def relations(self, task, e, rels, width, used=()):
        self.offered.append((self.kg.entity_labels[e], sorted(self.kg.relation_labels[r] for r, _ in rels)))
        if self.relations_after is not None and len(self.offered) > 1: return self.relations_after(rels)
        return list(range(len(rels)))[:width]
    def entities(self, task, hops, width):
        return [i for i, (t, _, _) in enumerate(hops) if self.kg.relation_labels[int(t[1])] in self.keep_entities][:width]
    def sufficiency(self, task, triples, depth, memory=''): return dict(sufficient=False, answer=[], covered=[])
    def reflect(self, task, memory, earlier, options=None): self.earlier.append(earlier); return 0


def test_pog_backtrack_offers_again_a_relation_whose_hops_were_all_pruned(toy):
    "Relation pruning kept 'director' but entity pruning dropped its hop: after backtracking to the film, 'director' is offered again."
    from kgqa_nb.agents import Task, walkable
    pog = PoG(client=None, width=5, depth=2); pog.policy = Chooser(toy, keep_entities={'cast member'})
    run = pog.explore(Task(toy, QUESTION, [toy.entity('Q1')]), walkable(toy))
    assert pog.policy.offered[1] == ('Night Harbour', ['director', 'genre'])    # the pruned hops' relations, not the explored one
    assert run.backtracks == 1 and len(run.subgraph)                             # was: a dead end with an empty subgraph


def test_pog_picks_the_dropped_branch_up_again_when_its_backtrack_leads_nowhere(toy):
    from kgqa_nb.agents import Task, walkable
    pog = PoG(client=None, width=5, depth=3); pog.policy = Chooser(toy, keep_entities={'cast member'}, relations_after=lambda rels: [])
    run = pog.explore(Task(toy, QUESTION, [toy.entity('Q1')]), walkable(toy))
    assert run.backtracks == 1 and {toy.relation_labels[r] for r in run.subgraph[:, 1]} >= {'cast member'}


@pytest.fixture(scope='module')
def dead_end():
    "The toy film where the best-looking relation ('film director') reaches a credit with nothing behind it."
    return KnowledgeGraph.from_id_triples(
        [('Q1', 'P1431', 'Q10'), ('Q1', 'P57', 'Q2'), ('Q1', 'P136', 'Q5'), ('Q2', 'P19', 'Q6'), ('Q6', 'P17', 'Q8')],
        entity_labels=dict(Q1='Night Harbour', Q2='Ada Brenner', Q5='drama film', Q6='Port Ellis', Q8='Norland', Q10='uncredited crew'),
        relation_labels=dict(P57='director', P1431='film director', P136='genre', P19='place of birth', P17='country'), name='dead-end')


def test_offline_pog_backtracks_from_the_dead_end_where_tog_fails(dead_end):
    tog, pog = ToG(width=1), PoG(width=1)
    s_tog, s_pog = tog.retrieve(REC, dead_end), pog.retrieve(REC, dead_end)
    answer_path = rows(dead_end, 1, 3)
    assert tog.last.stopped == 'dead end' and not tog.last.answer and not all(r in s_tog.tolist() for r in answer_path)
    assert pog.last.backtracks == 1 and pog.last.answer == ['Port Ellis (Q6)'] and all(r in s_pog.tolist() for r in answer_path)


def test_the_offline_stopping_rule_is_not_a_reader(toy):
    from kgqa_nb.agents import CoverageCheck, OfflinePolicy
    from kgqa_nb.readers import READERS, TextPathReader
    pol = ToG().policy
    assert isinstance(pol.check, CoverageCheck) and not isinstance(pol.check, READERS)
    assert 'reader' not in {f for f in OfflinePolicy.__dataclass_fields__}  # no reader field to plug the scoring reader into
    assert not hasattr(pol.check, 'answer_many') and not isinstance(pol.check, TextPathReader)
