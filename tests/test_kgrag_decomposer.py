"""KG-RAG's offline (non-oracle) decomposer (chapter 21): it reads the question's words and the KG, never MetaQA's
question-type files, and its relation chains on real MetaQA questions; the chain reader that answers its sub-questions."""
import dataclasses, pathlib

import pytest

from kgqa_nb import kgrag
from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.kgrag import (KGRAG, ChainReader, TripleRetriever, WordingDecomposer, candidate_triples, entity_by_label,
                           evaluate_kgrag, load_metaqa_questions, triple_parts, wording_relations)
from kgqa_nb.llm import LLMClient
from kgqa_nb.text import HashingEncoder

TOY = KnowledgeGraph.from_id_triples([
    ('m1', 'directed_by', 'p1'), ('m1', 'starred_actors', 'p2'), ('m2', 'starred_actors', 'p2'), ('m2', 'directed_by', 'p3'),
    ('m2', 'has_genre', 'g1'), ('m3', 'directed_by', 'p3'), ('m3', 'in_language', 'l1')],
    {'m1': 'Inception', 'm2': 'Warrior', 'm3': 'Memento', 'p1': 'Christopher Nolan', 'p2': 'Tom Hardy', 'p3': 'Gavin OConnor',
     'g1': 'Drama', 'l1': 'English'}, name='toy-movies')


def no_type_files(monkeypatch):
    "Make every way to MetaQA's question types fail: the loaders, the template table, and any read of a *qtype* file."
    def refuse(*a, **k): raise AssertionError('the non-oracle decomposer asked for the gold question types')
    monkeypatch.setattr(kgrag, 'load_metaqa_questions', refuse)
    monkeypatch.setattr(kgrag, 'metaqa_templates', refuse)
    read_text, open_ = pathlib.Path.read_text, pathlib.Path.open
    def guard(f):
        def g(self, *a, **k):
            if 'qtype' in self.name: raise AssertionError(f'read {self.name}')
            return f(self, *a, **k)
        return g
    monkeypatch.setattr(pathlib.Path, 'read_text', guard(read_text))
    monkeypatch.setattr(pathlib.Path, 'open', guard(open_))


def test_the_guard_catches_the_oracle_decomposer(monkeypatch):
    "The guard is not vacuous: with it, the oracle decomposer (gold question type) cannot decompose a MetaQA question."
    kgrag.metaqa_templates.cache_clear()
    no_type_files(monkeypatch)
    with pytest.raises(AssertionError, match='gold question types'):
        kgrag.metaqa_templates()
    system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=None), LLMClient(cache=False), n_hops=2, top_k=5)
    with pytest.raises(AssertionError): system.decompose('who directed the movies starred by [Tom Hardy]', dict(issues=[]))


def test_toy_decomposition_without_type_files(monkeypatch, tmp_path):
    "Records without their gold type, every type source refusing: the system still decomposes and answers."
    no_type_files(monkeypatch)
    q = kgrag.MetaQAQuestion('2hop-test-1', 'who directed the movies starred by [Tom Hardy]', 'Tom Hardy', ('Christopher Nolan', 'Gavin OConnor'), 2)
    assert q.qtype is None
    system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), LLMClient(cache=False), n_hops=2, top_k=5,
                   reader=ChainReader(), decomposer=WordingDecomposer(TOY))
    row = evaluate_kgrag(system, [q], 'kg-rag').iloc[0]
    assert (row.n_subquestions, row.hit_at_1, row.issue_no_subquestions) == (2, 1.0, 0)
    t = system.answer(q.question)
    assert [s['asked'] for s in t['steps']] == ['Which movies did Tom Hardy star in?', 'Who directed [answer 1]?']


@pytest.mark.data('metaqa')
def test_real_questions_decompose_without_type_files(monkeypatch):
    "Real MetaQA test questions, gold type removed, every type source refusing: one sub-question per gold hop."
    from kgqa_nb.loaders import load_kg
    qs = [dataclasses.replace(q, qtype=None) for h in (1, 2, 3) for q in load_metaqa_questions(h)[:40]]
    wd = WordingDecomposer(load_kg('metaqa'))
    no_type_files(monkeypatch)
    got = [len(wd.decompose(q.question)[1]) for q in qs]
    assert sum(n == q.hops for n, q in zip(got, qs)) >= 0.9 * len(qs), got
    assert all(n >= 1 for n in got)


@pytest.mark.data('metaqa')
@pytest.mark.parametrize('question, chain', [
    ('what films did [Michelle Trachtenberg] star in', ['starred actors']),
    ('what does [Peter Whitford] act in', ['starred actors']),
    ('the films directed by [Abhishek Jain] were in which languages', ['directed by', 'in language']),
    ('what were the release years of the movies directed by [Etan Cohen]', ['directed by', 'release year']),
    ('which films share the same director of [G.B.F.]', ['directed by', 'directed by']),
    ('the films that share actors with the film [Creepshow] were in which languages', ['starred actors', 'starred actors', 'in language']),
    ('what genres are the movies written by [Antonio das Mortes] writers', ['written by', 'written by', 'has genre']),
    ('which person wrote the movies starred by the actors in [Bride of Chucky]', ['starred actors', 'starred actors', 'written by']),
    ('who are the actors in the films written by the screenwriter of [Gods and Generals]', ['written by', 'written by', 'starred actors']),
])
def test_relation_chains_of_real_questions(question, chain):
    "Innermost relation first, read from the words (the chains are what the questions ask, written out by hand)."
    assert wording_relations(question, kgrag.topic_entity(question)) == chain


@pytest.mark.data('metaqa')
def test_real_subquestions_walk_the_right_way():
    "Whether the entity is a movie comes from the KG: a movie's chain starts forward, a person's backward."
    from kgqa_nb.loaders import load_kg
    wd = WordingDecomposer(load_kg('metaqa'))
    assert wd.decompose('which films share the same director of [G.B.F.]')[1] == ['Who directed G.B.F.?', 'Which movies did [answer 1] direct?']
    assert wd.decompose('what were the release years of the movies directed by [Etan Cohen]')[1] == [
        'Which movies did Etan Cohen direct?', 'When was [answer 1] released?']


def test_chain_reader_reads_two_hops_and_pools_alternatives():
    parts = triple_parts(TOY, candidate_triples(TOY, [entity_by_label(TOY, 'Tom Hardy')], 2).eids)
    cr = ChainReader()
    assert cr.answer('who directed the movies starred by Tom Hardy', parts) == ['Christopher Nolan', 'Gavin OConnor']
    assert cr.answer('Who directed Inception; Warrior?', parts) == ['Christopher Nolan', 'Gavin OConnor']  # pooled, not intersected
    assert cr.answer('Who directed Heat?', parts) == []  # no entity of the triples is mentioned


def test_llm_kg_and_kg_rag_share_the_reader(tmp_path):
    "LLM+KG reads its whole question with the reader that answers KG-RAG's sub-questions (one call per step)."
    calls = []
    class Spy(ChainReader):
        def answer(self, question, triples, record=None):
            calls.append(question); return super().answer(question, triples, record)
    system = KGRAG(TripleRetriever(TOY, HashingEncoder(), store_root=tmp_path), LLMClient(cache=False), n_hops=2, top_k=6,
                   reader=Spy(), decomposer=WordingDecomposer(TOY))
    assert system.answer('who directed the movies starred by [Tom Hardy]', 'llm+kg')['prediction'] == 'Christopher Nolan'
    system.answer('who directed the movies starred by [Tom Hardy]', 'kg-rag')
    assert calls[0] == 'who directed the movies starred by Tom Hardy' and len(calls) == 3
