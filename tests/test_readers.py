"""Readers (chapter 16): the SubgraphRAG-prompt LLM reader and the LLM-only baseline against the local OpenAI-compatible
stand-in server (the same code path as a real model), the double-check turn, and the oracle label of the query reader."""
import pytest

from kgqa_nb.llm import LLMClient, OfflineChatServer
from kgqa_nb.readers import (DOUBLE_CHECK, LLMOnlyReader, QueryReader, SubgraphRAGReader, make_reader, subgraphrag_messages)

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
    assert QueryReader().describe() == 'oracle (query reader)'
    assert make_reader('llm').describe().endswith('(SubgraphRAG prompt)')
    with pytest.raises(ValueError, match="'offline', 'llm' or 'few-shot'"): make_reader('oracle')
