"""Candidate validation: a corpus of bad LLM outputs, each rejected with its own reason, on a small hand-made KG."""
import numpy as np
import pytest

from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.sampling import SampledSubgraph
from kgqa_nb.sparql import OxigraphStore
from kgqa_nb.validate import (VALIDATION_REASONS, FilterLog, Validation, reason_family, read_query, construct_query,
                              validate_response)

# A small film world. F1 and F2 are directed by D1; F1 stars A1 and A2; A1 and A2 are both born in C1; C1 in country K1.
TRIPLES = [
    ('Q1', 'P57', 'Q10'), ('Q2', 'P57', 'Q10'), ('Q1', 'P161', 'Q11'), ('Q1', 'P161', 'Q12'),
    ('Q11', 'P19', 'Q20'), ('Q12', 'P19', 'Q20'), ('Q20', 'P17', 'Q30'), ('Q2', 'P495', 'Q30'), ('Q1', 'P495', 'Q30'),
    ('Q3', 'P57', 'Q13'), ('Q3', 'P161', 'Q11'),
] + [(f'Q{100 + i}', 'P19', 'Q20') for i in range(12)]  # twelve more people born in C1
LABELS = {'Q1': 'Film One', 'Q2': 'Film Two', 'Q3': 'Film Three', 'Q10': 'Dora Director', 'Q11': 'Alan Actor',
          'Q12': 'Ada Actress', 'Q13': 'Dan Other', 'Q20': 'Cityville', 'Q30': 'Kountry',
          **{f'Q{100 + i}': f'Person {i}' for i in range(12)}}
RELS = {'P57': 'director', 'P161': 'cast member', 'P19': 'place of birth', 'P17': 'country', 'P495': 'country of origin'}


@pytest.fixture(scope='module')
def world():
    kg = KnowledgeGraph.from_id_triples(TRIPLES, LABELS, RELS, name='films')
    store = OxigraphStore.from_kg(kg, isolation='thread')
    sample_edges = np.arange(11)  # everything except the twelve extra births
    nodes = np.unique(np.concatenate([kg.head[sample_edges], kg.tail[sample_edges]]))
    return kg, store, SampledSubgraph(nodes, sample_edges, int(nodes[0]))


def reply(question='Which film directed by Dora Director stars Ada Actress?',
          nodes='Dora Director (Q10); Ada Actress (Q12)', answer='Film One (Q1)',
          triples='Film One (Q1)-director (P57)-Dora Director (Q10);Film One (Q1)-cast member (P161)-Ada Actress (Q12)',
          sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . }', drop=()):
    fields = dict(Question=question, **{'Nodes mentioned in the question': nodes}, Answer=answer,
                  **{'Triples used': triples}, **{'SPARQL query': sparql})
    return '\n'.join(f'{k}: {v}' for k, v in fields.items() if k not in drop)


def check(world, text):
    kg, store, sample = world
    parsed, v = validate_response(kg, store, sample, text)
    assert isinstance(v, Validation)
    return v


def test_good_candidate_is_accepted(world):
    v = check(world, reply())
    assert v.ok and v.reason is None, v.details
    assert v.all_answers == ['Q1']
    assert v.details['graph_isomorphism'] == '(1)(1)' and v.details['n_hops'] == 1
    assert sorted(map(tuple, v.full_answer_subgraph)) == [('Q1', 'P161', 'Q12'), ('Q1', 'P57', 'Q10')]
    assert v.answer_subgraph == [['Film One (Q1)', 'director (P57)', 'Dora Director (Q10)'],
                                 ['Film One (Q1)', 'cast member (P161)', 'Ada Actress (Q12)']]


def test_labels_are_case_and_space_insensitive(world):
    v = check(world, reply(nodes='dora  director (Q10); ADA ACTRESS (Q12)'))
    assert v.ok, v.details
    assert v.details['seed_entities'] == ['Dora Director (Q10)', 'Ada Actress (Q12)']  # rewritten in KG text


BAD = {
    'missing answer field': (dict(drop=('Answer',)), 'parse:missing_field:Answer'),
    'missing query field': (dict(drop=('SPARQL query',)), 'parse:missing_field:SPARQL query'),
    'empty reply': (None, 'parse:empty_response'),
    'wrong QID for the answer': (dict(answer='Film One (Q999)'), 'unknown_entity'),
    'wrong PID in a triple': (dict(triples='Film One (Q1)-director (P999)-Dora Director (Q10);Film One (Q1)-cast member (P161)-Ada Actress (Q12)'), 'unknown_relation'),
    'label mismatch': (dict(nodes='Dora Director (Q10); Ada Lovelace (Q12)'), 'label_mismatch'),
    'relation label mismatch': (dict(triples='Film One (Q1)-producer (P57)-Dora Director (Q10);Film One (Q1)-cast member (P161)-Ada Actress (Q12)'), 'label_mismatch'),
    'seed outside the sample': (dict(nodes='Dora Director (Q10); Person 0 (Q100)'), 'seed_not_in_sample'),
    'triple not in the KG (reversed)': (dict(triples='Dora Director (Q10)-director (P57)-Film One (Q1);Film One (Q1)-cast member (P161)-Ada Actress (Q12)'), 'triple_not_in_kg'),
    'INSERT': (dict(sparql='INSERT DATA { wd:Q1 wdt:P57 wd:Q12 }'), 'parse:sparql_not_select'),
    'SELECT then DELETE': (dict(sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . } ; DELETE WHERE { ?s ?p ?o }'), 'unsafe_query'),
    'DELETE inside': (dict(sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . DELETE }'), 'unsafe_query'),
    'SERVICE clause': (dict(sparql='SELECT ?answer WHERE { SERVICE <https://query.wikidata.org/sparql> { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 } }'), 'unsafe_query'),
    'unparsable SPARQL': (dict(sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 ?answer wdt:P161 . wd:Q12 }'), 'sparql_syntax'),
    'unbalanced braces': (dict(sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 .'), 'unsafe_query'),
    'OPTIONAL': (dict(sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . OPTIONAL { ?answer wdt:P161 wd:Q12 } }'), 'sparql_unsupported'),
    'two projected variables': (dict(sparql='SELECT ?answer ?d WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . }'), 'sparql_projection'),
    'rdfs:label lookup': (dict(sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . ?answer rdfs:label "Film One"@en . }'), 'rdfs_in_query'),
    'constants != seeds (extra constant)': (dict(sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . ?answer wdt:P495 wd:Q30 . }'), 'constants_not_seeds'),
    'constants != seeds (seed missing)': (dict(sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 ?x . }'), 'constants_not_seeds'),
    'answer not in the query result': (dict(answer='Film Two (Q2)', triples='Film Two (Q2)-director (P57)-Dora Director (Q10)',
                                            nodes='Dora Director (Q10); Ada Actress (Q12)'), 'answer_not_in_results'),
    'too many answers': (dict(question='Who was born where Alan Actor was born?', nodes='Alan Actor (Q11)', answer='Ada Actress (Q12)',
                              triples='Alan Actor (Q11)-place of birth (P19)-Cityville (Q20);Ada Actress (Q12)-place of birth (P19)-Cityville (Q20)',
                              sparql='SELECT ?answer WHERE { wd:Q11 wdt:P19 ?c . ?answer wdt:P19 ?c . }'), 'too_many_answers'),
    'triple used but not realised by the query': (dict(triples='Film One (Q1)-director (P57)-Dora Director (Q10);Film One (Q1)-cast member (P161)-Ada Actress (Q12);Film One (Q1)-country of origin (P495)-Kountry (Q30)'),
                                                  'triple_not_in_full_subgraph'),
    'cyclic answer subgraph': (dict(question='Which film was made in the country of the birthplace of Alan Actor, who stars in it?',
                                    nodes='Alan Actor (Q11)', answer='Film One (Q1)',
                                    triples='Alan Actor (Q11)-place of birth (P19)-Cityville (Q20);Cityville (Q20)-country (P17)-Kountry (Q30);Film One (Q1)-country of origin (P495)-Kountry (Q30);Film One (Q1)-cast member (P161)-Alan Actor (Q11)',
                                    sparql='SELECT ?answer WHERE { wd:Q11 wdt:P19 ?c . ?c wdt:P17 ?k . ?answer wdt:P495 ?k . ?answer wdt:P161 wd:Q11 . }'), 'cyclic'),
    'hanging branch': (dict(question='Which film stars Ada Actress and has a director?', nodes='Ada Actress (Q12)',
                            triples='Film One (Q1)-director (P57)-Dora Director (Q10);Film One (Q1)-cast member (P161)-Ada Actress (Q12)',
                            sparql='SELECT ?answer WHERE { ?answer wdt:P57 ?d . ?answer wdt:P161 wd:Q12 . }'), 'hanging_branch'),
    'answer is a seed': (dict(nodes='Dora Director (Q10); Ada Actress (Q12); Film One (Q1)',
                              sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . FILTER(?answer = wd:Q1) }'), 'answer_is_seed'),
}


@pytest.mark.parametrize('name', list(BAD))
def test_bad_output_is_rejected_with_its_reason(world, name):
    change, reason = BAD[name]
    v = check(world, '' if change is None else reply(**change))
    assert not v.ok and v.reason == reason, (name, v.reason, v.details)
    assert reason_family(v.reason) in VALIDATION_REASONS


UPDATES = ['INSERT DATA { wd:Q1 wdt:P57 wd:Q12 }', 'DELETE WHERE { ?s ?p ?o }', 'LOAD <http://evil.example/data.ttl>',
           'CLEAR ALL', 'DROP GRAPH <http://x>', 'DELETE { ?s ?p ?o } INSERT { ?s ?p wd:Q1 } WHERE { ?s ?p ?o }',
           'SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . } ; LOAD <http://evil.example/x>',
           'SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . ?answer wdt:P161 wd:Q12 . SERVICE <http://x/sparql> { ?a ?b ?c } }']


@pytest.mark.parametrize('query', UPDATES)
def test_updates_are_refused_before_anything_runs(world, query):
    from kgqa_nb.generate import parse_datapoint_response
    from kgqa_nb.validate import validate_candidate
    kg, store, sample = world
    parsed = parse_datapoint_response(reply())
    parsed.sparql = query  # bypass the reply parser: the validator itself must refuse it
    n = len(store)
    v = validate_candidate(kg, store, sample, parsed)
    assert v.reason == 'unsafe_query', (query, v.reason, v.details)
    assert len(store) == n


def test_every_reason_family_is_known(world):
    for change, reason in BAD.values(): assert reason_family(reason) in VALIDATION_REASONS


def test_garbage_never_raises(world):
    rng = np.random.default_rng(0)
    pieces = ['Question:', 'Answer:', 'Triples used:', 'SPARQL query:', 'Nodes mentioned in the question:', 'Film One (Q1)',
              'director (P57)', '-', ';', '{', '}', 'SELECT', '?answer', 'wd:Q10', 'wdt:P57', '.', '\n', 'FILTER', '(', ')',
              'NOT EXISTS', 'COUNT', 'Q', '(P', '"', '<', '>', 'PREFIX', 'LIMIT 3', 'Ada Actress (Q12)']
    log = FilterLog()
    for _ in range(400):
        text = ' '.join(rng.choice(pieces, size=rng.integers(1, 40)))
        log.add(check(world, text))
    for _ in range(200):  # mutate a good reply one character at a time
        t = list(reply())
        for _ in range(rng.integers(1, 4)): t[rng.integers(len(t))] = str(rng.choice(list('{}().;:?-<>"Q P0')))
        log.add(check(world, ''.join(t)))
    assert log.total == 600 and 'internal_error' not in log.rejected and 'parse:internal_error' not in log.rejected, log.rejected


def test_aggregation_queries(world):
    count = reply(question='How many films did Dora Director direct?', nodes='Dora Director (Q10)', answer='Film One (Q1)',
                  triples='Film One (Q1)-director (P57)-Dora Director (Q10);Film Two (Q2)-director (P57)-Dora Director (Q10)',
                  sparql='SELECT (COUNT(DISTINCT ?answer) AS ?count) WHERE { ?answer wdt:P57 wd:Q10 . }')
    v = check(world, count)
    assert v.ok, v.details
    assert v.details['kind'] == 'count' and v.details['count'] == 2 and v.all_answers == ['Q1', 'Q2']
    bad = check(world, count.replace('Film One (Q1)', 'Film Three (Q3)', 1))
    assert bad.reason == 'answer_not_in_results'
    neg = reply(question='Which film by Dora Director does not star Ada Actress?', nodes='Dora Director (Q10); Ada Actress (Q12)',
                answer='Film Two (Q2)', triples='Film Two (Q2)-director (P57)-Dora Director (Q10)',
                sparql='SELECT ?answer WHERE { ?answer wdt:P57 wd:Q10 . FILTER NOT EXISTS { ?answer wdt:P161 wd:Q12 . } }')
    v = check(world, neg)
    assert v.ok and v.details['kind'] == 'not_exists' and v.all_answers == ['Q2'], v.details
    assert check(world, neg.replace('Answer: Film Two (Q2)', 'Answer: Film One (Q1)')).reason == 'answer_not_in_results'


def test_construct_form_returns_every_binding(world):
    kg, store, _ = world
    q = read_query('SELECT ?answer WHERE { ?f wdt:P57 wd:Q10 . ?f wdt:P495 ?answer . }')
    got = sorted(tuple(x.value.rsplit('/', 1)[1] for x in t) for t in store.construct(construct_query(q)))
    assert got == [('Q1', 'P495', 'Q30'), ('Q1', 'P57', 'Q10'), ('Q2', 'P495', 'Q30'), ('Q2', 'P57', 'Q10')]


def test_filter_log_counts(world):
    log = FilterLog()
    for change, reason in BAD.values(): log.add(check(world, '' if change is None else reply(**change)))
    log.add(check(world, reply()))
    d = log.to_dict()
    assert d['candidates'] == len(BAD) + 1 and d['accepted'] == 1
    assert d['rejected']['unsafe_query'] == sum(r == 'unsafe_query' for _, r in BAD.values())
    assert abs(d['acceptance_rate'] - 1 / (len(BAD) + 1)) < 1e-3


# --- canonical_query: one key for every spelling of a query (the dedup key of issue 10, item 1) ------------------------
import random

from hypothesis import given, settings, strategies as st

from kgqa_nb.loaders import load_kg
from kgqa_nb.sampling import sample_seed_subgraphs, subgraph_text
from kgqa_nb.generate import datapoint_prompt, offline_datapoint_model, parse_datapoint_response
from kgqa_nb.validate import canonical_query


def _respell(query: str, rng: random.Random) -> str:
    "The same query written differently: other variable names, patterns shuffled, some constants as full IRIs."
    shape = read_query(query)
    vars_ = sorted({x for p in shape.patterns for x in p if x.startswith('?')})
    new = dict(zip(vars_, rng.sample([f'?n{i}' for i in range(50)], len(vars_))))
    iri = lambda t: f'<http://www.wikidata.org/entity/{t[3:]}>' if t.startswith('wd:') and rng.random() < .5 else t
    pats = [tuple(iri(new.get(x, x)) for x in p) for p in shape.patterns]
    rng.shuffle(pats)
    return f"SELECT DISTINCT {new[shape.answer_var]} WHERE {{ {' '.join(f'{s} {p} {o} .' for s, p, o in pats)} }}"


@pytest.fixture(scope='module')
def toy_queries():
    toy = load_kg('toyworld')
    out = []
    for i, s in enumerate(sample_seed_subgraphs(toy, 60, seed=21)):
        out.append(parse_datapoint_response(offline_datapoint_model(datapoint_prompt(subgraph_text(toy, s.edges), 1 + i % 4))).sparql)
    return out


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 59), st.randoms(use_true_random=False))
def test_canonical_query_ignores_spelling(toy_queries, i, rnd):
    q = toy_queries[i]
    assert canonical_query(_respell(q, rnd)) == canonical_query(q)


def test_canonical_query_separates_different_queries(toy_queries):
    keys = {}
    for q in toy_queries:
        keys.setdefault(canonical_query(q), set()).add(' '.join(q.split()))
    assert all(len(v) == 1 for v in keys.values())  # different query texts of the offline generator never share a key
    a = 'SELECT ?answer WHERE { ?x wdt:P1 ?answer . ?x wdt:P2 wd:Q1 . ?y wdt:P1 ?answer . ?y wdt:P3 wd:Q2 . }'
    b = 'SELECT ?answer WHERE { ?x wdt:P1 ?answer . ?x wdt:P3 wd:Q1 . ?y wdt:P1 ?answer . ?y wdt:P2 wd:Q2 . }'
    assert canonical_query(a) != canonical_query(b)  # same shape, constants swapped: a different question
    assert canonical_query(a.replace('wdt:P1 ?answer', 'wdt:P1 ?a2').replace('SELECT ?answer', 'SELECT ?a2')) == canonical_query(a)
