"""Readers (chapter 16): the SubgraphRAG-prompt LLM reader and the LLM-only baseline against the local OpenAI-compatible
stand-in server (the same code path as a real model), the double-check turn, the oracle label of the query reader, and
the offline non-oracle reader (TextPathReader), which must answer without ever receiving the gold query, answers or type."""
import inspect
from collections.abc import Mapping
from dataclasses import fields

import pytest

import kgqa_nb.readers as readers_chapter
from kgqa_nb.dataset import QUESTION_FIELDS, question_view
from kgqa_nb.llm import LLMClient
from kgqa_nb.llm_server import OfflineChatServer
from kgqa_nb.readers import (DOUBLE_CHECK, READERS, LLMOnlyReader, QueryReader, SubgraphRAGReader, TextPathReader, make_reader,
                             subgraphrag_messages)
from kgqa_nb.retriever_study import reader_record  # what a caller hands a reader (chapter 15c: below the readers, imports flow down)

T = [('Alien (Q103569)', 'director (P57)', 'Ridley Scott (Q56005)'),
     ('Ridley Scott (Q56005)', 'place of birth (P19)', 'South Shields (Q646)')]


def client(srv): return LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache=False, backoff_base=0.01)


def test_subgraphrag_reader_answers_in_one_call_when_it_can():
    with OfflineChatServer() as srv:
        assert SubgraphRAGReader(client(srv)).answer('Who is the director of Alien', T) == ['Ridley Scott']
        assert len(srv.requests) == 1 and srv.requests[0]['n_messages'] == 4  # system, example user, example assistant, user


def test_double_check_turn_is_sent_without_the_first_reply():
    with OfflineChatServer() as srv:
        assert SubgraphRAGReader(client(srv)).answer('Who composed Alien', T) == []
        assert [r['n_messages'] for r in srv.requests] == [4, 5]  # the first reply is not inserted before the second turn
    msgs = subgraphrag_messages('Who composed Alien', T)
    assert msgs[-1]['role'] == 'user' and 'Question:\nWho composed Alien?' in msgs[-1]['content']
    assert DOUBLE_CHECK.count('ans:') == 2


def test_top_k_and_dedup_in_the_prompt():
    msgs = subgraphrag_messages('q', T + T + [('A (Q1)', 'r (P1)', 'B (Q2)')], k=2)
    assert msgs[-1]['content'].split('\n\n')[0].splitlines()[1:] == ['(Alien,director,Ridley Scott)', '(Ridley Scott,place of birth,South Shields)']


def test_llm_only_reader_sends_no_triples():
    with OfflineChatServer() as srv:
        assert LLMOnlyReader(client(srv)).answer('Who directed Alien?') == []
        assert len(srv.requests) == 1 and srv.requests[0]['n_messages'] == 2


def test_reader_labels():
    assert QueryReader().describe() == 'full-pattern recall (oracle)'
    assert make_reader('offline').describe() == 'full-pattern recall (oracle)'  # the kind name keeps working
    assert make_reader('offline-text').describe().startswith('offline (non-oracle)')
    assert make_reader('llm').describe().endswith('(SubgraphRAG prompt)')
    with pytest.raises(ValueError, match="'offline', 'offline-text', 'llm' or 'few-shot'"): make_reader('oracle')


# A record as a companion dataset holds it: the gold fields are what an oracle reads.
GOLD = ('sparql_query', 'answer_node', 'answer_subgraph', 'all_answers_wikidata', 'all_answers_wikikg2',
        'full_answer_subgraph_wikidata', 'full_answer_subgraph_wikikg2', 'n_hops', 'graph_isomorphism', 'test_type',
        'minimal_graph_isomorphism', 'minimal_seeds_and_queries', 'redundant')
INTERSECTION = [('Q1 (Q1)', 'occupation (P106)', 'writer (Q36180)'), ('Q1 (Q1)', 'place of birth (P19)', 'Rome (Q220)'),
                ('Q2 (Q2)', 'occupation (P106)', 'writer (Q36180)'), ('Q2 (Q2)', 'place of birth (P19)', 'Paris (Q90)'),
                ('Q3 (Q3)', 'occupation (P106)', 'painter (Q1028181)'), ('Q3 (Q3)', 'place of birth (P19)', 'Rome (Q220)'),
                ('Q1 (Q1)', 'field of work (P101)', 'poetry (Q482)'), ('Q3 (Q3)', 'field of work (P101)', 'fresco (Q134194)')]
CASES = [  # (question, seeds, triples, the answer a correct reading gives)
    ('Where was the director of Alien born?', ['Alien (Q103569)'], T, ['Q646']),
    ('Who directed Alien?', ['Alien (Q103569)'], T, ['Q56005']),
    ('Who was born in Rome and works as writer?', ['Rome (Q220)', 'writer (Q36180)'], INTERSECTION, ['Q1']),
    ('In which field does the person who was born in Rome and works as writer work?', ['Rome (Q220)', 'writer (Q36180)'],
     INTERSECTION, ['Q482'])]


class GoldGuard(Mapping):
    """A record that fails the test the moment anyone reads a gold field from it."""
    def __init__(self, rec): self._rec = rec
    def __getitem__(self, k):
        assert k not in GOLD, f'the non-oracle reader read the gold field {k!r}'
        return self._rec[k]
    def __iter__(self): return iter(k for k in self._rec if k not in GOLD)
    def __len__(self): return sum(1 for _ in self)


@pytest.fixture(scope='module')
def reader(): return TextPathReader()


@pytest.mark.parametrize('question,seeds,triples,want', CASES)
def test_text_reader_answers_records_without_gold_fields(reader, question, seeds, triples, want):
    stripped = dict(question=question, seed_entities=seeds)  # every gold field removed
    assert reader.answer(question, triples, stripped) == want
    full = dict(stripped, **{k: 'GOLD' for k in GOLD})
    assert reader.answer(question, triples, GoldGuard(full)) == want  # a gold field read would fail the test


def test_text_reader_core_takes_only_question_seeds_and_triples(reader):
    assert list(inspect.signature(TextPathReader.read).parameters) == ['self', 'question', 'seeds', 'triples']
    q, seeds, tri, want = CASES[3]
    assert reader.read(q, seeds, tri) == want
    assert reader.answer(q, tri) == want  # no record at all: the seeds are the entities the question mentions


def test_text_reader_is_not_an_oracle(reader):
    # with the evidence incomplete it answers what the triples allow (here the wrong entity), as an LLM reader would
    assert reader.answer('Where was the director of Alien born?', T[:1]) == ['Q56005']
    assert QueryReader().answer('Where was the director of Alien born?', T[:1],
                                dict(sparql_query='SELECT ?answer WHERE { wd:Q103569 wdt:P57 ?d . ?d wdt:P19 ?answer . }')) == []
    assert 'non-oracle' in reader.describe() and 'oracle' in QueryReader().describe()


def test_text_reader_gives_no_answer_when_too_many_entities_tie(reader):
    q, seeds, tri, _ = CASES[2]
    many = tri + [(f'P{i} (Q{1000 + i})', 'place of birth (P19)', 'Rome (Q220)') for i in range(12)]
    assert reader.read('Who was born in Rome?', ['Rome (Q220)'], many) == []  # 14 people tie: more than 10 is not an answer
    assert len(TextPathReader(reader.encoder, max_answers=20).read('Who was born in Rome?', ['Rome (Q220)'], many)) == 14


# --- every non-oracle reader reads the question view and refuses a full record ---------------------------------------------

def _reader_classes():
    "Every class of the readers chapter that answers questions: a new reader is caught here even if READERS forgets it."
    return {c for c in vars(readers_chapter).values()
            if isinstance(c, type) and c.__module__ == 'kgqa_nb.readers' and callable(getattr(c, 'answer_many', None))}


def _build(cls):
    "A reader of `cls` on the offline LLM backend where it needs a client."
    return cls(LLMClient('offline', cache=False)) if 'client' in {f.name for f in fields(cls)} else cls()


NON_ORACLE = [c for c in READERS if not c.oracle]
QUERY = 'SELECT ?answer WHERE { wd:Q103569 wdt:P57 ?d . ?d wdt:P19 ?answer . }'
FULL = dict(id='q1', question='Where was the director of Alien born?', paraphrased_question=None, seed_entities=['Alien (Q103569)'],
            **{k: 'GOLD' for k in GOLD})


def test_readers_lists_every_reader_and_each_says_whether_it_is_an_oracle():
    assert set(READERS) == _reader_classes()
    assert all(isinstance(vars(c).get('oracle'), bool) for c in READERS)  # declared by the class itself, not inherited by accident
    assert [c.__name__ for c in READERS if c.oracle] == ['QueryReader'] and len(NON_ORACLE) == len(READERS) - 1


@pytest.mark.parametrize('cls', NON_ORACLE, ids=lambda c: c.__name__)
def test_every_nonoracle_reader_answers_from_the_question_view(cls):
    view = question_view(FULL)
    assert set(view) <= set(QUESTION_FIELDS) and not set(view) & set(GOLD)
    reader = _build(cls)
    one = reader.answer(view['question'], T, view)  # a gold field read would be a KeyError: the view has none
    assert isinstance(one, list)
    assert _build(cls).answer_many([view['question']] * 2, [T, T[:1]], [view, view])[0] == one
    assert reader_record(reader, FULL) == view


@pytest.mark.parametrize('cls', NON_ORACLE, ids=lambda c: c.__name__)
def test_every_nonoracle_reader_refuses_a_full_record(cls):
    reader = _build(cls)
    with pytest.raises(ValueError, match=r"reads only the question view .*'answer_node'"):
        reader.answer(FULL['question'], T, FULL)
    with pytest.raises(ValueError, match='reads only the question view'):
        reader.answer_many([FULL['question']] * 2, [T, T], [question_view(FULL), FULL])  # one full record among views is enough


def test_the_oracle_reads_the_full_record_and_only_it():
    full = dict(FULL, sparql_query=QUERY)
    assert reader_record(QueryReader(), full) is full
    assert QueryReader().answer(full['question'], T, reader_record(QueryReader(), full)) == ['Q646']
    with pytest.raises(KeyError, match='sparql_query'):  # the question view holds no query: the oracle cannot run on it
        QueryReader().answer(full['question'], T, question_view(full))
