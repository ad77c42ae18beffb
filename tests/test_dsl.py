"Property and corpus tests of the ULTRAG DSL (kgqa_nb.dsl): parser/printer, conversions, oracle queries, SPARQL, executor."
import itertools, json, random
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from kgqa_nb.dsl import (DSLSyntaxError, Entity, Intersection, Projection, QueryExecutor, SymbolicExecutor, MAX_DEPTH,
                         canonical_dsl, extract_query, format_query, from_betae, from_postfix, parse_query, query_entities,
                         query_relations, directed_relation_index, to_betae, to_postfix, validity_report)
from kgqa_nb.dsl_convert import CONVERSION_REASONS, QueryConversionError, SPARQL_REFUSALS, oracle_query, query_isomorphism, sparql_to_query
from kgqa_nb.kg import WD, WDT, KnowledgeGraph, UnknownIdError

# ---------------------------------------------------------------- printing and parsing

VALID = ['Q1 -> P1', 'Q1 -> P1 inv', 'Q42', 'Q1 -> P1 -> P2 -> P3 inv -> P4', 'AND(Q1 -> P1, Q2 -> P2)',
         'AND(Q1 -> P1 inv, Q2 -> P2 inv) -> P4', 'AND(Q1 -> P1, Q2 -> P2, Q3 -> P3, Q4 -> P4)',
         'AND(AND(Q1 -> P1, Q2 -> P2) -> P3, Q4 -> P4 -> P5) -> P6 inv', 'AND(Q9, Q1 -> P1)', 'AND(Q1, Q2)',
         'Q007 -> P0100', 'AND(Q1 -> P1, AND(Q2 -> P2, AND(Q3 -> P3, Q4 -> P4)))']
EQUIVALENT = {'Q1->P1': 'Q1 -> P1', 'Q1 -> P1_inv': 'Q1 -> P1 inv', ' \n Q1\t->\tP1 inv\n': 'Q1 -> P1 inv',
              '(Q1 -> P1) -> P2': 'Q1 -> P1 -> P2', '((Q1)) -> P1': 'Q1 -> P1', 'AND((Q1 -> P1),Q2->P2_inv)': 'AND(Q1 -> P1, Q2 -> P2 inv)',
              '(AND(Q1 -> P1, Q2 -> P2)) -> P3': 'AND(Q1 -> P1, Q2 -> P2) -> P3'}

@pytest.mark.parametrize('text', VALID)
def test_printed_queries_round_trip(text):
    q = parse_query(text)
    assert format_query(q) == text
    assert parse_query(format_query(q)) == q

@pytest.mark.parametrize('text,canon', EQUIVALENT.items())
def test_liberal_whitespace_and_grouping(text, canon):
    assert format_query(parse_query(text)) == canon

# (text, expected error position): each a mistake seen or plausible in LLM output
MALFORMED = [('', 0), ('   ', 3), ('Q1 ->', 5), ('Q1 -> P1 ->', 11), ('-> P1', 0), ('P1 -> Q1', 0), ('Q1 P1', 3),
             ('Q1 -> P1 P2', 9), ('Q1 -> Q2', 6), ('AND(Q1 -> P1)', 12), ('AND()', 4), ('AND Q1 -> P1, Q2 -> P2', 4),
             ('AND(Q1 -> P1, Q2 -> P2', 22), ('AND(Q1 -> P1, Q2 -> P2,)', 23), ('AND(Q1 -> P1,, Q2 -> P2)', 13),
             ('AND(Q1 -> P1 Q2 -> P2)', 13), ('and(Q1 -> P1, Q2 -> P2)', 0), ('q1 -> P1', 0), ('Q1 -> p1', 6),
             ('Q1 -> P1 INV', 9), ('Q1 -> P1_INV', 6), ('Q1 -> P1_inv inv', 13), ('Q1 -> inv', 6), ('Q1 => P1', 3),
             ('Q1 - > P1', 3), ('Q1 -> P1)', 8), ('(Q1 -> P1', 9), ('((Q1, (P1,)), (Q2, (P2,)))', 4),
             ('(((TA, (P1_inv,)), (DL, (P2_inv,))), (P4,))', 3), ('OR(Q1 -> P1, Q2 -> P2)', 0), ('NOT(Q1 -> P1)', 0),
             ('Q1 -> P1.', 8), ('wd:Q1 -> wdt:P1', 0), ('Turing Award -> award received', 0), ('Q -> P1', 0),
             ('Q1 -> P', 6), ('Q1 -> P1 -> AND(Q2 -> P2, Q3 -> P3)', 12), ('AND(Q1 -> P1, Q2 -> P2) AND(Q3 -> P3, Q4 -> P4)', 24),
             ('Q1 → P1', 3), ('Q1 -> P1 ; Q2 -> P2', 9), ('"Q1 -> P1"', 0), ('Q1 -> P1 inv inv', 13)]

@pytest.mark.parametrize('text,pos', MALFORMED)
def test_malformed_queries_raise_dsl_syntax_error_at_the_spot(text, pos):
    with pytest.raises(DSLSyntaxError) as ei: parse_query(text)
    e = ei.value
    assert e.position == pos, (text, e.position, str(e))
    assert 0 <= e.position <= len(text)
    s = str(e)  # the caret display must render for every error
    assert 'position' in s and (not text.strip() or '^' in s)

def test_malformed_corpus_is_large_enough(): assert len(MALFORMED) >= 25

def test_nesting_is_capped_with_a_syntax_error_not_recursion_error():
    for text in ['(' * 5000 + 'Q1' + ')' * 5000, 'AND(' * 3000 + 'Q1', 'Q1' + ' -> P1' * 5000]:
        with pytest.raises(DSLSyntaxError, match='deeper'): parse_query(text)
    ok = 'Q1' + ' -> P1' * (MAX_DEPTH - 1)
    assert parse_query(ok)

def test_bare_entity_option_and_type_errors():
    assert parse_query('Q5') == Entity('Q5')
    with pytest.raises(DSLSyntaxError): parse_query('Q5', allow_bare_entity=False)
    with pytest.raises(DSLSyntaxError): parse_query('AND(Q5, Q1 -> P1)', allow_bare_entity=False)
    with pytest.raises(DSLSyntaxError): parse_query('(Q5)', allow_bare_entity=False)
    assert parse_query('AND((Q5) -> P1, Q2 -> P2)', allow_bare_entity=False)
    with pytest.raises(TypeError): parse_query(None)

# ---------------------------------------------------------------- hypothesis: random ASTs and fuzzing

ids = st.integers(0, 10**6)
entities = ids.map(lambda i: Entity(f'Q{i}'))

def extend(children):
    proj = st.builds(Projection, children, ids.map(lambda i: f'P{i}'), st.booleans())
    inter = st.lists(children, min_size=2, max_size=4).map(lambda ops: Intersection(tuple(ops)))
    return proj | inter

queries = st.recursive(entities, extend, max_leaves=12)

@settings(max_examples=1500, derandomize=True, deadline=None)
@given(queries)
def test_random_asts_round_trip(q):
    text = format_query(q)
    assert parse_query(text) == q
    assert format_query(parse_query(text)) == text

ALPHABET = 'QPAND()inv_ ->,0123456789\n\tqpa.;:→{}[]"\'#éx'

def mutate(text, ops):
    t = list(text)
    for kind, i, c in ops:
        if not t and kind != 'ins': continue
        i = i % (len(t) + 1)
        if kind == 'ins': t.insert(i, c)
        elif kind == 'del' and i < len(t): del t[i]
        elif kind == 'sub' and i < len(t): t[i] = c
    return ''.join(t)

mutation = st.tuples(st.sampled_from(['ins', 'del', 'sub']), st.integers(0, 200), st.sampled_from(list(ALPHABET)))
fuzz_text = st.one_of(
    st.text(alphabet=ALPHABET, max_size=60),
    st.text(max_size=40),
    st.builds(mutate, queries.map(format_query), st.lists(mutation, min_size=1, max_size=4)),
    st.builds(mutate, st.sampled_from(VALID), st.lists(mutation, min_size=1, max_size=3)))

@settings(max_examples=10000, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(fuzz_text)
def test_fuzz_parse_succeeds_and_round_trips_or_raises_dsl_syntax_error(text):
    try: q = parse_query(text)
    except DSLSyntaxError as e:
        assert 0 <= e.position <= len(text)
        str(e)
        return
    assert parse_query(format_query(q)) == q

@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(max_size=200))
def test_extract_query_never_crashes(text):
    out = extract_query(text)
    assert isinstance(out, str)

# ---------------------------------------------------------------- extraction and validity

def test_extract_query_from_llm_like_responses():
    q = 'AND(Q1 -> P1 inv, Q2 -> P2 inv) -> P4'
    for resp in [q, f'```\n{q}\n```', f'```dsl\n{q}\n```\nThis first finds...', f'Query: {q}', f'**Query:** `{q}`',
                 f'Let me think. Q1 is the award.\n\nFinal query: {q}.', q.replace('->', '→'), f'The query is {q}']:
        assert extract_query(resp) == q, resp

def test_validity_report_counts_kinds():
    kg = KnowledgeGraph.from_id_triples([('Q1', 'P1', 'Q2'), ('Q2', 'P2', 'Q3')])
    rep = validity_report(['Q1 -> P1 -> P2', 'Q1 -> P1 ->', 'Q9 -> P1', 'Q1 -> P7', 'Sure: `Q3 -> P2 inv`'], kg=kg)
    assert rep.error_kind.tolist() == ['ok', 'syntax', 'unknown_entity', 'unknown_relation', 'ok']
    s = rep.attrs['summary']
    assert (s['n'], s['n_valid'], s['n_syntax'], s['n_unknown_entity'], s['n_unknown_relation']) == (5, 2, 1, 1, 1)
    assert s['invalid_rate'] == pytest.approx(0.6)
    assert validity_report(['Q9 -> P1']).valid.tolist() == [True]  # without a KG only the syntax is judged

# ---------------------------------------------------------------- small random KG + brute force

def random_kg(seed, n_ent=12, n_rel=3, n_tri=40):
    rng = random.Random(seed)
    tri = {(f'Q{rng.randrange(n_ent)}', f'P{rng.randrange(n_rel)}', f'Q{rng.randrange(n_ent)}') for _ in range(n_tri)}
    return KnowledgeGraph.from_id_triples(sorted(tri), extra_entities=[f'Q{i}' for i in range(n_ent)], name=f'rand{seed}')

def brute_force(kg, q):
    "Set semantics by looping over triples in Python."
    T = [(kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]) for h, r, t in kg.triples.tolist()]
    if isinstance(q, Entity): return {q.id}
    if isinstance(q, Projection):
        xs = brute_force(kg, q.query)
        return {(h if q.inverse else t) for h, r, t in T if r == q.relation and (t if q.inverse else h) in xs}
    return set.intersection(*(brute_force(kg, o) for o in q.operands))

small_queries = st.recursive(st.integers(0, 11).map(lambda i: Entity(f'Q{i}')),
                             lambda ch: st.builds(Projection, ch, st.integers(0, 2).map(lambda i: f'P{i}'), st.booleans())
                             | st.lists(ch, min_size=2, max_size=3).map(lambda o: Intersection(tuple(o))), max_leaves=6)

@settings(max_examples=400, derandomize=True, deadline=None)
@given(st.integers(0, 4), small_queries)
def test_symbolic_executor_matches_brute_force(seed, q):
    kg = random_kg(seed)
    scores = SymbolicExecutor(kg).execute(q)
    assert scores.dtype == torch.float32 and scores.shape == (kg.num_entities,)
    assert set(scores.unique().tolist()) <= {0.0, 1.0}
    got = {kg.entity_ids[i] for i in torch.nonzero(scores).flatten().tolist()}
    assert got == brute_force(kg, q)

def test_symbolic_executor_protocol_leaf_sets_and_errors():
    kg = random_kg(0)
    ex = SymbolicExecutor(kg)
    assert isinstance(ex, QueryExecutor)
    q = parse_query('AND(Q1 -> P0, Q2 -> P1 inv) -> P2')
    fuzzy = torch.zeros(kg.num_entities); fuzzy[kg.entity('Q1')] = 0.3; fuzzy[kg.entity('Q5')] = 0.7
    both = parse_query('AND(Q1 -> P0, Q2 -> P1 inv) -> P2'), parse_query('AND(Q5 -> P0, Q2 -> P1 inv) -> P2')
    union = (ex.execute(both[0]) + ex.execute(both[1])).clamp(max=1)
    assert torch.equal(ex.execute(q, leaf_sets={'Q1': fuzzy}) >= 0, torch.ones(kg.num_entities, dtype=torch.bool))
    # a fuzzy leaf {Q1, Q5} projects like the union of the two crisp leaves (projection distributes over union)
    assert torch.equal(ex.execute(parse_query('Q1 -> P0'), {'Q1': fuzzy}),
                       (ex.execute(parse_query('Q1 -> P0')) + ex.execute(parse_query('Q5 -> P0'))).clamp(max=1))
    # leaf sets may name a placeholder entity that is not in the KG (an entity-linking slot)
    assert torch.equal(ex.execute(parse_query('Q999 -> P0'), {'Q999': fuzzy}), ex.execute(parse_query('Q1 -> P0'), {'Q1': fuzzy}))
    with pytest.raises(UnknownIdError): ex.execute(parse_query('Q999 -> P0'))
    with pytest.raises(UnknownIdError): ex.execute(parse_query('Q1 -> P9'))
    with pytest.raises(ValueError, match='shape'): ex.execute(q, {'Q1': torch.zeros(3)})
    assert union.shape == (kg.num_entities,)

def test_directed_relation_index_convention():
    kg = random_kg(1)
    R = kg.num_relations
    for p in kg.relation_ids:
        assert directed_relation_index(kg, p) == kg.relation(p) and directed_relation_index(kg, p, True) == kg.relation(p) + R

# ---------------------------------------------------------------- BetaE and postfix

betae_queries = st.recursive(entities.map(lambda e: Projection(e, 'P1')),
                             lambda ch: st.builds(Projection, ch, ids.map(lambda i: f'P{i}'), st.booleans())
                             | st.lists(ch, min_size=2, max_size=3).map(lambda o: Intersection(tuple(o))), max_leaves=8)

@settings(max_examples=500, derandomize=True, deadline=None)
@given(betae_queries, st.booleans())
def test_betae_text_form_round_trips(q, binary):
    t = to_betae(q, binary=binary)
    back = from_betae(t)
    assert back == q if not binary else canonical_dsl(back) == canonical_dsl(q)

@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.integers(0, 4), small_queries)
def test_postfix_round_trips_and_executes_like_the_ast(seed, q):
    kg = random_kg(seed)
    prog = to_postfix(q, kg, stack_size=64)
    assert prog.dtype == torch.int64 and prog[-1].item() == 1 << 62
    back = from_postfix(prog, kg)
    assert canonical_dsl(back) == canonical_dsl(q)
    ex = SymbolicExecutor(kg)
    assert torch.equal(ex.execute(back), ex.execute(q))

@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.integers(0, 4), small_queries.filter(lambda q: not isinstance(q, Entity)))
def test_betae_index_form_round_trips(seed, q):
    kg = random_kg(seed)
    try: t = to_betae(q, kg)
    except ValueError as e:
        assert 'bare-entity' in str(e); return
    assert from_betae(t, kg) == q

def test_postfix_stack_machine_simulation_never_exceeds_two():
    kg = random_kg(2)
    q = parse_query('AND(Q1 -> P0, AND(AND(Q2 -> P1, Q3 -> P2) -> P0, Q4 -> P1) -> P2, Q5 -> P0)')
    prog = to_postfix(q, kg).tolist()
    depth = peak = 0
    for w in prog[:-1]:
        if w & (1 << 59): depth -= 1
        elif not w & (1 << 58): depth += 1
        peak = max(peak, depth)
    assert peak <= 2 and depth == 1

def test_bad_betae_and_postfix_inputs():
    kg = random_kg(0)
    for bad in [('Q1',), 'Q1', (('Q1', ('P1',)),), ('Q1', ('P1', 'X')), ('q1', ('P1',))]:
        with pytest.raises(ValueError): from_betae(bad)
    with pytest.raises(ValueError, match='out of range'): from_betae((0, (99,)), kg)
    with pytest.raises(ValueError, match='STOP'): from_postfix([0], kg)
    with pytest.raises(ValueError, match='empty stack'): from_postfix([1 << 58, 1 << 62], kg)
    with pytest.raises(ValueError, match='stack'): from_postfix([0, 1, 1 << 62], kg)
    with pytest.raises(ValueError, match='AND-only'): from_postfix([0, 1 << 61, 1 << 62], kg)

# ---------------------------------------------------------------- oracle queries

def test_oracle_query_hand_made_trees():
    # 1 hop, both directions
    assert format_query(oracle_query([('Q1', 'P1', 'Q2')], ['Q1'], 'Q2')) == 'Q1 -> P1'
    assert format_query(oracle_query([('Q2', 'P1', 'Q1')], ['Q1'], 'Q2')) == 'Q1 -> P1 inv'
    # (2)(1): a 2-hop branch and a 1-hop branch meet at the answer
    t = [('Q1', 'P1', 'Q5'), ('Q9', 'P2', 'Q5'), ('Q3', 'P3', 'Q9')]
    assert format_query(oracle_query(t, ['Q1', 'Q3'], 'Q9')) == 'AND(Q1 -> P1 -> P2 inv, Q3 -> P3)'
    # ((1)(1))(1): intersection at an intermediate node, then a hop, and a third seed at the answer
    t = [('Q1', 'P1', 'Q7'), ('Q2', 'P2', 'Q7'), ('Q7', 'P3', 'Q8'), ('Q3', 'P4', 'Q8')]
    assert format_query(oracle_query(t, ['Q1', 'Q2', 'Q3'], 'Q8')) == 'AND(AND(Q1 -> P1, Q2 -> P2) -> P3, Q3 -> P4)'
    # duplicates of one triple are one edge
    assert format_query(oracle_query([('Q1', 'P1', 'Q2')] * 3, ['Q1'], 'Q2')) == 'Q1 -> P1'

@pytest.mark.parametrize('tri,seeds,ans,reason,why', [
    ([], ['Q1'], 'Q2', 'seed_not_in_graph', 'not in the answer subgraph'),
    ([], [], 'Q2', 'empty', 'no triples'),
    ([('Q1', 'P1', 'Q2')], ['Q1'], 'Q3', 'answer_not_in_graph', 'not in the graph'),
    ([('Q1', 'P1', 'Q2')], ['Q1', 'Q2'], 'Q2', 'answer_is_seed', 'itself a constant'),
    ([('Q1', 'P1', 'Q2'), ('Q2', 'P2', 'Q3'), ('Q3', 'P3', 'Q1')], ['Q1'], 'Q2', 'cyclic', 'cycle'),
    ([('Q1', 'P1', 'Q2'), ('Q1', 'P2', 'Q2')], ['Q1'], 'Q2', 'cyclic', 'two triples join Q1 and Q2'),
    ([('Q1', 'P1', 'Q1'), ('Q1', 'P2', 'Q2')], ['Q1'], 'Q2', 'cyclic', 'self-loop'),
    ([('Q1', 'P1', 'Q2'), ('Q3', 'P1', 'Q4')], ['Q1', 'Q3'], 'Q2', 'disconnected', 'not connected'),
    ([('Q1', 'P1', 'Q2'), ('Q2', 'P1', 'Q4')], ['Q1'], 'Q2', 'hanging_branch', 'leaf Q4'),
    ([('Q1', 'P1', 'Q2'), ('Q2', 'P2', 'Q3')], ['Q1', 'Q2'], 'Q3', 'internal_seed', 'inner node'),
])
def test_oracle_query_refusals(tri, seeds, ans, reason, why):
    with pytest.raises(QueryConversionError, match=why) as ei:
        oracle_query(tri, seeds, ans, internal_seed='error' if reason == 'internal_seed' else 'and')
    assert ei.value.reason == reason and reason in CONVERSION_REASONS

def random_tree(rng, n):
    "Random tree over Q0..Q{n-1} rooted at Q0 with random edge directions and relations."
    tri = []
    for v in range(1, n):
        u = rng.randrange(v); r = f'P{rng.randrange(3)}'
        tri.append((f'Q{u}', r, f'Q{v}') if rng.random() < 0.5 else (f'Q{v}', r, f'Q{u}'))
    return tri

@pytest.mark.parametrize('seed', range(60))
def test_oracle_query_of_random_trees_retrieves_the_answer(seed):
    rng = random.Random(seed)
    tri = random_tree(rng, rng.randint(2, 9))
    deg = {}
    for h, _, t in tri: deg[h] = deg.get(h, 0) + 1; deg[t] = deg.get(t, 0) + 1
    leaves = sorted(n for n, d in deg.items() if d == 1 and n != 'Q0')
    q = oracle_query(tri, leaves, 'Q0')
    assert sorted(set(query_entities(q))) == leaves
    kg = KnowledgeGraph.from_id_triples(tri)
    assert 'Q0' in SymbolicExecutor(kg).answers(q)  # the answer subgraph itself satisfies its oracle query
    assert len(q.__repr__()) > 0 and parse_query(format_query(q)) == q

# ---------------------------------------------------------------- SPARQL -> DSL

SPARQL_OK = [
    ('SELECT ?answer WHERE { wd:Q1 wdt:P22 ?x . ?x wdt:P19 ?answer . }', 'Q1 -> P22 -> P19'),
    ('SELECT DISTINCT ?answer WHERE { ?answer wdt:P22 wd:Q1 }', 'Q1 -> P22 inv'),
    ('select distinct ?a where {?x wdt:P1 wd:Q1. ?x wdt:P2 wd:Q2. ?x wdt:P4 ?a.}', 'AND(Q1 -> P1 inv, Q2 -> P2 inv) -> P4'),
    ('PREFIX wd: <http://www.wikidata.org/entity/>\nPREFIX wdt: <http://www.wikidata.org/prop/direct/>\n'
     'SELECT ?a WHERE { ?a wdt:P1 wd:Q1 , wd:Q2 }', 'AND(Q1 -> P1 inv, Q2 -> P1 inv)'),
    ('SELECT ?a WHERE { ?a <http://www.wikidata.org/prop/direct/P5> <http://www.wikidata.org/entity/Q3> }', 'Q3 -> P5 inv'),
    ('# a comment\nSELECT ?a WHERE {\n  ?a wdt:P1 wd:Q1 ;  # first\n     wdt:P2 ?b .\n  ?b wdt:P3 wd:Q3 .\n}', 'AND(Q1 -> P1 inv, Q3 -> P3 inv -> P2 inv)'),
    ('SELECT ?a { wd:Q1 wdt:P1 ?a }', 'Q1 -> P1'),
    # issue 9 item 7a: two predicates between the same two nodes, one of them a constant
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 . ?a wdt:P2 wd:Q1 }', 'AND(Q1 -> P1 inv, Q1 -> P2 inv)'),
    ('SELECT ?a WHERE { ?a wdt:P170 wd:Q1 ; wdt:P161 wd:Q1 }', 'AND(Q1 -> P170 inv, Q1 -> P161 inv)'),
    ('SELECT ?a WHERE { wd:Q1 wdt:P1 ?x . ?x wdt:P2 ?a . wd:Q1 wdt:P3 ?a }', 'AND(Q1 -> P1 -> P2, Q1 -> P3)'),
    ('SELECT ?a WHERE { ?a wdt:P1 ?x . ?x wdt:P2 wd:Q1 . ?x wdt:P3 wd:Q1 }', 'AND(Q1 -> P2 inv, Q1 -> P3 inv) -> P1 inv'),
    ('SELECT ?a WHERE { ?a wdt:P26 wd:Q1 . wd:Q1 wdt:P106 ?o . ?o wdt:P279 wd:Q2 }', 'AND(Q1, Q2 -> P279 inv -> P106 inv) -> P26 inv'),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 . ?a wdt:P1 wd:Q1 }', 'Q1 -> P1 inv'),  # a repeated pattern is one pattern
    ('SELECT ?item ?itemLabel WHERE { ?item wdt:P31 wd:Q5 . SERVICE wikibase:label { bd:serviceParam wikibase:language "en" . } }', 'Q5 -> P31 inv'),
    ('BASE <http://www.wikidata.org/entity/> SELECT $a WHERE { $a wdt:P17 <Q183> }', 'Q183 -> P17 inv'),
    # issue 29 item 3: sequence and inverse paths are chains of projections
    ('SELECT ?x WHERE { wd:Q1 wdt:P2/wdt:P3 ?x }', 'Q1 -> P2 -> P3'),
    ('SELECT ?x WHERE { wd:Q1 ^wdt:P2 ?x }', 'Q1 -> P2 inv'),
    ('SELECT ?x WHERE { ?x wdt:P31/wdt:P279 wd:Q515 }', 'Q515 -> P279 inv -> P31 inv'),
    ('SELECT ?x WHERE { wd:Q1 wdt:P2/^wdt:P3/wdt:P4 ?x }', 'Q1 -> P2 -> P3 inv -> P4'),
    ('SELECT ?x WHERE { ?x ^wdt:P40 wd:Q1 ; wdt:P19/wdt:P17 wd:Q2 }', 'AND(Q1 -> P40, Q2 -> P17 inv -> P19 inv)'),
]

@pytest.mark.parametrize('sparql,dsl', SPARQL_OK)
def test_sparql_to_query_examples(sparql, dsl):
    assert format_query(sparql_to_query(sparql)) == dsl

# (query, reason, a phrase of the detail)
SPARQL_BAD = [
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 FILTER(?a != wd:Q1) }', 'operator', 'FILTER'),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 OPTIONAL { ?a wdt:P2 ?b } }', 'operator', 'OPTIONAL'),
    ('SELECT ?a WHERE { { ?a wdt:P1 wd:Q1 } UNION { ?a wdt:P2 wd:Q2 } }', 'operator', 'UNION'),
    ('SELECT (COUNT(?a) AS ?n) WHERE { ?a wdt:P1 wd:Q1 }', 'aggregate', 'COUNT'),
    ('SELECT * WHERE { ?a wdt:P1 wd:Q1 }', 'projection', 'SELECT *'),
    ('SELECT ?a ?b WHERE { ?a wdt:P1 ?b . ?b wdt:P1 wd:Q1 }', 'projection', 'one answer variable'),
    ('SELECT ?a WHERE { ?a ?p wd:Q1 }', 'predicate', 'variable ?p in predicate position'),
    ('SELECT ?a WHERE { ?a wdt:P1 ?b . ?b wdt:P2 ?c . ?c wdt:P3 ?a . ?b wdt:P4 wd:Q1 }', 'cyclic', 'cycle'),
    ('SELECT ?a WHERE { ?x wdt:P1 ?a . ?x wdt:P2 ?a . ?x wdt:P3 wd:Q1 }', 'cyclic', 'two triples join ?x and ?a'),
    ('SELECT ?a WHERE { ?a wdt:P1 ?a . ?a wdt:P2 wd:Q1 }', 'cyclic', 'self-loop on ?a'),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 . ?b wdt:P1 wd:Q2 }', 'disconnected', 'not connected to the answer ?a'),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 . wd:Q2 wdt:P1 wd:Q3 }', 'disconnected', 'wd:Q2 wdt:P1 wd:Q3'),
    ('SELECT ?a WHERE { ?b wdt:P1 wd:Q1 }', 'projection', 'not used'),
    ('SELECT ?a WHERE { ?a wdt:P1 ?b }', 'hanging_branch', 'leaf ?b is not a seed'),
    ('SELECT ?a WHERE { ?a wdt:P1 "Paris" }', 'literal', 'literal "Paris"'),
    ('SELECT ?a WHERE { ?a wdt:P1 -3 }', 'literal', 'literal -3'),
    ('SELECT ?a WHERE { ?a a wd:Q5 }', 'predicate', 'rdf:type'),
    ('SELECT ?a WHERE { ?a rdfs:label ?l }', 'predicate', 'rdfs:label is not a wdt:P'),
    ('SELECT ?a WHERE { ?a foo:bar ?l }', 'sparql_syntax', 'undeclared prefix foo:'),
    ('SELECT ?a WHERE { ?a wd:P1 wd:Q1 }', 'predicate', 'wdt:P1'),
    ('SELECT ?a WHERE { ?a wdt:P1 wdt:P2 }', 'entity', 'wd:Q'),
    ('PREFIX wd: <http://example.org/> SELECT ?a WHERE { ?a wdt:P1 wd:Q1 }', 'entity', 'not a Wikidata entity'),
    ('ASK { wd:Q1 wdt:P1 wd:Q2 }', 'query_form', 'ASK queries are not supported (the DSL returns entity sets)'),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 } ORDER BY ?a', 'modifier', 'ORDER BY'),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 ', 'sparql_syntax', "unclosed '{'"),
    ('SELECT ?a WHERE { ', 'sparql_syntax', "unclosed '{'"),
    ('SELECT ?a WHERE { }', 'empty', 'empty'),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 } }', 'sparql_syntax', 'unexpected'),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 ?a wdt:P2 wd:Q2 }', 'sparql_syntax', "expected '.'"),
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 } ~', 'sparql_syntax', "'~'"),
    ('', 'sparql_syntax', 'SELECT'),
    ('SELECT', 'sparql_syntax', 'ends too early'),
    # issue 9 item 7b: name the construct
    ('SELECT ?a WHERE { ?a rdfs:label "Berlin"@en }', 'language_literal', 'language-tagged literal "Berlin"@en'),
    ('SELECT ?a WHERE { ?a wdt:P50 [ wdt:P27 wd:Q1 ] }', 'blank_node', 'blank node [ … ]'),
    ('SELECT ?a WHERE { ?a wdt:P50 _:b1 }', 'blank_node', 'blank node _:b1'),
    ('SELECT ?a WHERE { ?a wdt:P50 ( wd:Q1 wd:Q2 ) }', 'blank_node', 'RDF collection'),
    # issue 9 item 7d, issue 29 item 3: every path operator but / and ^ is refused, the message naming it and the whole path
    *[(f'SELECT ?a WHERE {{ ?a {p} wd:Q1 }}', 'property_path', f'property path {p} uses {op}')
      for p, op in [('wdt:P31/wdt:P279*', 'a repetition (*)'), ('wdt:P131+', 'a repetition (+)'), ('wdt:P131*', 'a repetition (*)'),
                    ('wdt:P22|wdt:P25', 'an alternative (|)'), ('wdt:P1?', 'an optional step (?)'), ('!wdt:P1', 'a negated property set (!)'),
                    ('(wdt:P1/wdt:P2)', 'a grouped path ( … )'), ('^wdt:P40/wdt:P22|wdt:P25', 'an alternative (|)'),
                    ('wdt:P1/(wdt:P2|^wdt:P3)+', 'a grouped path ( … ), an alternative (|), a repetition (+)')]],
    # issue 9 item 7f: literal answers the text proves
    ('SELECT ?l WHERE { wd:Q1 rdfs:label ?l }', 'literal_answer', '?l is the object of rdfs:label'),
    ('SELECT ?d WHERE { wd:Q1 wdt:P569 ?d . FILTER(YEAR(?d) > 1900) }', 'literal_answer', 'treats ?d as a literal'),
    ('SELECT ?n WHERE { wd:Q1 wdt:P1082 ?n FILTER(?n >= 5) }', 'literal_answer', 'treats ?n as a literal'),
    ('SELECT ?d WHERE { ?p wdt:P27 wd:Q1 ; wdt:P569 ?d . FILTER(YEAR(?d) > 1900) }', 'literal_answer', '?d'),
    ('SELECT ?p WHERE { ?p wdt:P27 wd:Q1 ; wdt:P569 ?d . FILTER(YEAR(?d) > 1900) }', 'operator', 'FILTER'),  # ?d is not the answer
    ('SELECT ?a WHERE { ?a wdt:P1 wd:Q1 } LIMIT 5', 'modifier', 'LIMIT'),
]

@pytest.mark.parametrize('sparql,reason,detail', SPARQL_BAD)
def test_sparql_to_query_refusals(sparql, reason, detail):
    with pytest.raises(QueryConversionError) as ei: sparql_to_query(sparql)
    assert (ei.value.reason, detail in ei.value.detail) == (reason, True), str(ei.value)
    assert ei.value.reason in CONVERSION_REASONS

def test_refusal_messages_write_terms_as_sparql():
    "Issue 9 item 7c: no Python tuple such as ('var', '?t') in any message."
    for q in ['SELECT ?a WHERE { ?a wdt:P1 ?t }', 'SELECT ?a WHERE { ?x wdt:P1 ?a . ?x wdt:P2 ?a . ?x wdt:P3 wd:Q1 }',
              'SELECT ?a WHERE { ?a wdt:P1 wd:Q1 . ?b wdt:P1 wd:Q2 }', 'SELECT ?a WHERE { ?a wdt:P1 ?a . ?a wdt:P2 wd:Q1 }']:
        with pytest.raises(QueryConversionError) as ei: sparql_to_query(q)
        assert "('var'" not in str(ei.value) and "('const'" not in str(ei.value), str(ei.value)

def test_ask_is_unsupported_not_a_syntax_error():
    "Issue 9 item 7e."
    with pytest.raises(QueryConversionError) as ei: sparql_to_query('ASK { wd:Q1 wdt:P166 wd:Q2 }')
    assert ei.value.reason == 'query_form'
    assert str(ei.value) == 'query_form: ASK queries are not supported (the DSL returns entity sets)'

def test_refusal_reasons_and_type_errors():
    assert set(SPARQL_REFUSALS) <= set(CONVERSION_REASONS)
    assert {r for _, r, _ in SPARQL_BAD} >= set(SPARQL_REFUSALS)  # every refusal has a test above
    with pytest.raises(TypeError): sparql_to_query(None)
    with pytest.raises(ValueError, match='internal_seed'): sparql_to_query('SELECT ?a { ?a wdt:P1 wd:Q1 }', internal_seed='maybe')

def literal_store(kg):
    "An Oxigraph store of `kg` plus literal values for P569 (a date) and P1082 (a number)."
    ox = pytest.importorskip('pyoxigraph')
    from kgqa_nb.sparql import OxigraphStore
    store = OxigraphStore.from_kg(kg, isolation='thread')
    xsd = 'http://www.w3.org/2001/XMLSchema#'
    for e, p, v, t in [(kg.entity_ids[0], 'P569', '1931-02-11', 'date'), (kg.entity_ids[1], 'P1082', '3600000', 'integer')]:
        store.store.add(ox.Quad(ox.NamedNode(WD + e), ox.NamedNode(WDT + p), ox.Literal(v, datatype=ox.NamedNode(xsd + t))))
    return store

def test_literal_answers_refused_with_the_store():
    "Issue 9 item 7f: only the store knows that P569 holds dates; given it, the translator refuses."
    kg = KnowledgeGraph.from_id_triples([('Q1', 'P19', 'Q2'), ('Q2', 'P36', 'Q3')])
    store = literal_store(kg)
    q = 'SELECT ?d WHERE { wd:Q1 wdt:P569 ?d }'
    assert format_query(sparql_to_query(q)) == 'Q1 -> P569'  # without the store: translated (documented)
    with pytest.raises(QueryConversionError) as ei: sparql_to_query(q, store=store)
    assert ei.value.reason == 'literal_answer' and 'wdt:P569' in ei.value.detail
    with pytest.raises(QueryConversionError, match='literal_answer'): sparql_to_query('SELECT ?n WHERE { wd:Q2 wdt:P36 ?c . ?c wdt:P1082 ?n }', store=store)
    assert format_query(sparql_to_query('SELECT ?c WHERE { wd:Q1 wdt:P19 ?c }', store=store)) == 'Q1 -> P19'
    # the answer as a subject is never a literal, whatever else the property holds
    assert format_query(sparql_to_query('SELECT ?c WHERE { wd:Q2 wdt:P1082 ?c . ?c wdt:P36 wd:Q3 }', store=store)) == 'AND(Q2 -> P1082, Q3 -> P36 inv)'

SPARQL_ALPHABET = list('?$ {}.;,()[]<>"@^/|*+!#:_-') + ['wd:Q1', 'wdt:P1', 'SELECT', 'WHERE', 'FILTER', 'a', '?x', '?a', 'ASK',
                                                          'PREFIX', '"x"', '@en', '1', 'UNION', 'SERVICE', 'wikibase:label', '\n']

@settings(max_examples=3000, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.lists(st.sampled_from(SPARQL_ALPHABET), max_size=30).map(' '.join),
                 st.builds(mutate, st.sampled_from([q for q, _ in SPARQL_OK] + [q for q, _, _ in SPARQL_BAD]),
                           st.lists(st.tuples(st.sampled_from(['ins', 'del', 'sub']), st.integers(0, 300),
                                              st.sampled_from(list('?{}.;,()[]<>"@^/|*+!#:_- PQ0123aw'))), min_size=1, max_size=4)),
                 st.text(max_size=80)))
def test_fuzz_sparql_translates_or_refuses_with_a_named_reason(text):
    "Never a crash, never an unnamed refusal: QueryConversionError with a reason from CONVERSION_REASONS, or a query."
    try: q = sparql_to_query(text)
    except QueryConversionError as e:
        assert e.reason in CONVERSION_REASONS and e.detail, str(e)
        assert "('var'" not in e.detail and "('const'" not in e.detail
        return
    assert parse_query(format_query(q)) == q

@pytest.mark.parametrize('seed', range(25))
def test_sparql_and_dsl_agree_on_oxigraph(seed):
    "SPARQL of a random tree query run by Oxigraph == the symbolic executor on its DSL translation."
    ox = pytest.importorskip('pyoxigraph')
    kg = random_kg(seed, n_ent=15, n_rel=3, n_tri=60)
    rng = random.Random(seed)
    tri = random_tree(rng, rng.randint(2, 6))
    deg = {}
    for h, _, t in tri: deg[h] = deg.get(h, 0) + 1; deg[t] = deg.get(t, 0) + 1
    const = {n: f'wd:Q{rng.randrange(15)}' for n, d in deg.items() if d == 1 and n != 'Q0'}
    term = lambda n: const.get(n, '?answer' if n == 'Q0' else f'?v{n[1:]}')
    sparql = 'SELECT DISTINCT ?answer WHERE { ' + ' '.join(f'{term(h)} wdt:{r} {term(t)} .' for h, r, t in tri) + ' }'
    q = sparql_to_query(sparql)  # two leaves may draw the same constant: still a tree once constants are split
    store = ox.Store()
    store.load(''.join(kg.iter_ntriples(labels=False)).encode(), format=ox.RdfFormat.N_TRIPLES)
    prefixes = 'PREFIX wd: <http://www.wikidata.org/entity/> PREFIX wdt: <http://www.wikidata.org/prop/direct/> '
    want = {str(s['answer'].value).rsplit('/', 1)[1] for s in store.query(prefixes + sparql)}
    assert set(SymbolicExecutor(kg).answers(q)) == want

def assert_translation_agrees(seed, sparql):
    "The DSL translation of `sparql` returns what Oxigraph returns on a random graph, or is refused for its shape."
    ox = pytest.importorskip('pyoxigraph')
    try: q = sparql_to_query(sparql)
    except QueryConversionError as e:
        assert e.reason in ('cyclic', 'disconnected', 'hanging_branch', 'projection'), str(e); return
    kg = random_kg(seed, n_ent=6, n_rel=2, n_tri=18)
    store = ox.Store()
    store.load(''.join(kg.iter_ntriples(labels=False)).encode(), format=ox.RdfFormat.N_TRIPLES)
    prefixes = 'PREFIX wd: <http://www.wikidata.org/entity/> PREFIX wdt: <http://www.wikidata.org/prop/direct/> '
    want = {str(s['a'].value).rsplit('/', 1)[1] for s in store.query(prefixes + sparql)}
    assert set(SymbolicExecutor(kg).answers(q)) == want, (sparql, format_query(q))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.integers(0, 3), st.lists(st.tuples(st.sampled_from(['?a', '?b', '?c', 'wd:Q1', 'wd:Q2', 'wd:Q3']), st.sampled_from(['P0', 'P1']),
                                             st.sampled_from(['?a', '?b', '?c', 'wd:Q1', 'wd:Q2', 'wd:Q3'])), min_size=1, max_size=5))
def test_random_conjunctive_patterns_translate_exactly_or_are_refused(seed, patterns):
    "Any basic graph pattern over a few variables and constants: the translation returns what Oxigraph returns."
    assert_translation_agrees(seed, 'SELECT DISTINCT ?a WHERE { ' + ' '.join(f'{s} wdt:{p} {o} .' for s, p, o in patterns) + ' }')

path_steps = st.lists(st.tuples(st.sampled_from(['P0', 'P1']), st.booleans()), min_size=1, max_size=3)

@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.integers(0, 3), st.lists(st.tuples(st.sampled_from(['?a', '?b', 'wd:Q1', 'wd:Q2', 'wd:Q3']), path_steps,
                                             st.sampled_from(['?a', '?b', 'wd:Q1', 'wd:Q2', 'wd:Q3'])), min_size=1, max_size=3))
def test_sequence_and_inverse_paths_agree_with_sparql_on_random_graphs(seed, patterns):
    "Issue 29 item 3: patterns whose predicates are paths of / and ^ translate to what Oxigraph returns, or are refused for their shape."
    path = lambda steps: '/'.join(('^' if inv else '') + f'wdt:{p}' for p, inv in steps)
    assert_translation_agrees(seed, 'SELECT DISTINCT ?a WHERE { ' + ' '.join(f'{s} {path(ps)} {o} .' for s, ps, o in patterns) + ' }')

def test_path_translations_are_not_vacuous():
    "The random graphs above are dense enough that most two-step paths from an entity answer something."
    ex = SymbolicExecutor(random_kg(0, n_ent=6, n_rel=2, n_tri=18))
    paths = [f'{a}wdt:{p}/{b}wdt:{q}' for a in ('', '^') for b in ('', '^') for p in ('P0', 'P1') for q in ('P0', 'P1')]
    answered = [bool(ex.answers(sparql_to_query(f'SELECT ?a WHERE {{ wd:Q{e} {path} ?a }}'))) for e in range(6) for path in paths]
    assert sum(answered) >= len(answered) // 2, sum(answered)

# ---------------------------------------------------------------- a corpus of Wikidata-style queries

CORPUS = json.loads((Path(__file__).parent / 'wikidata_queries.json').read_text())['queries']

@pytest.fixture(scope='module')
def corpus_world():
    "A dense random KG over every ID the translated corpus queries use, its store (plus literal values) and executor."
    pytest.importorskip('pyoxigraph')
    ents, rels = set(), set()
    for c in CORPUS:
        if 'dsl' in c:
            q = parse_query(c['dsl']); ents |= set(query_entities(q)); rels |= {r for r, _ in query_relations(q)}
    ents = sorted(ents) + [f'Q{900 + i}' for i in range(40)]
    rng = random.Random(9)
    tri = sorted({(rng.choice(ents), rng.choice(sorted(rels)), rng.choice(ents)) for _ in range(25 * len(ents))})
    kg = KnowledgeGraph.from_id_triples(tri, extra_entities=ents, name='corpus-world')
    store = literal_store(kg)
    xsd = 'http://www.w3.org/2001/XMLSchema#'
    ox = pytest.importorskip('pyoxigraph')
    for p, v in [('P569', '1879-03-14'), ('P1082', '3600000')]:
        store.store.add(ox.Quad(ox.NamedNode(WD + 'Q900'), ox.NamedNode(WDT + p), ox.Literal(v, datatype=ox.NamedNode(xsd + 'string'))))
    return kg, store, SymbolicExecutor(kg)

def test_corpus_is_realistic_and_covers_every_refusal():
    assert len(CORPUS) >= 40 and len({c['id'] for c in CORPUS}) == len(CORPUS)
    assert {c['reason'] for c in CORPUS if 'reason' in c} >= set(SPARQL_REFUSALS)
    assert sum('dsl' in c for c in CORPUS) >= 15

@pytest.mark.parametrize('case', CORPUS, ids=[c['id'] for c in CORPUS])
def test_corpus_query_is_translated_exactly_or_refused_by_name(case, corpus_world):
    kg, store, ex = corpus_world
    try: q = sparql_to_query(case['sparql'], store=store if case.get('store') else None)
    except QueryConversionError as e:
        assert e.reason in CONVERSION_REASONS and e.detail
        assert case.get('reason') == e.reason, str(e)
        return
    assert 'dsl' in case, f"translated to {format_query(q)}, expected refusal {case.get('reason')}"
    assert format_query(q) == case['dsl']
    assert format_query(sparql_to_query(case['sparql'], store=store)) == case['dsl']  # the store finds no literal answer
    if case.get('oxigraph', True):
        rows = store.select_ids(case['sparql'])
        want = {v for r in rows for v in r.values()}
        assert set(ex.answers(q)) == want

def test_corpus_comparisons_are_not_vacuous(corpus_world):
    kg, store, ex = corpus_world
    sizes = [len(ex.answers(parse_query(c['dsl']))) for c in CORPUS if 'dsl' in c and c.get('oxigraph', True)]
    assert sum(n > 0 for n in sizes) >= len(sizes) // 2, sizes

# ---------------------------------------------------------------- isomorphism type of a query

def test_query_isomorphism_of_every_gtsqa_type():
    "Issue 9 item 7g: the oracle query of each GTSQA template is named with the template's type."
    from kgqa_nb.isomorphism import DUTT_IDS, GTSQA_TEMPLATES, template_edges
    for name in GTSQA_TEMPLATES:
        edges, seeds, ans = template_edges(name)
        ids = {n: f'Q{i + 1}' for i, n in enumerate(sorted({n for e in edges for n in e}))}
        rng = random.Random(name)
        sub = [((ids[u], f'P{k}', ids[v]) if rng.random() < 0.5 else (ids[v], f'P{k}', ids[u])) for k, (u, v) in enumerate(edges)]
        res = query_isomorphism(oracle_query(sub, [ids[s] for s in seeds], ids[ans]))
        assert res.graph_isomorphism == name and res.dutt_id == DUTT_IDS.get(name)

@pytest.mark.parametrize('text,name,hops', [
    ('Q1 -> P1', '(1)', 1), ('Q1 -> P1 inv -> P2', '(2)', 2), ('AND(Q1 -> P1, Q2 -> P2)', '(1)(1)', 1),
    ('AND(Q1 -> P1, Q1 -> P2)', '(1)(1)', 1), ('AND(Q1 -> P1 inv, Q2 -> P2 inv) -> P4', '((1)(1))', 2),
    ('AND(Q1 -> P1 -> P2, Q2 -> P3)', '(2)(1)', 2), ('AND(AND(Q1 -> P1, Q2 -> P2) -> P3, Q3 -> P4)', '((1)(1))(1)', 2),
    ('AND(Q1 -> P1, AND(Q2 -> P2, Q3 -> P3))', '(1)(1)(1)', 1), ('AND(Q1 -> P1, Q2 -> P2) -> P3 -> P4', '(2(1)(1))', 3),
    ('AND(AND(Q1 -> P1, Q2 -> P2, Q3 -> P3) -> P4, Q4 -> P5 -> P6)', '((1)(1)(1))(2)', 2),
    ('AND(Q1, Q2 -> P279 inv -> P106 inv) -> P26 inv', '(1*(2))', 3),
])
def test_query_isomorphism_known_types(text, name, hops):
    r = query_isomorphism(parse_query(text))
    assert (r.graph_isomorphism, r.n_hops) == (name, hops)
    assert query_isomorphism(text) == r  # DSL text works too

@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.integers(0, 10**6))
def test_query_isomorphism_agrees_with_the_answer_subgraph_type(seed):
    "For a random answer tree with seeds at its leaves, the type of its oracle query is the type of the subgraph."
    rng = random.Random(seed)
    tri = random_tree(rng, rng.randint(2, 9))
    deg = {}
    for h, _, t in tri: deg[h] = deg.get(h, 0) + 1; deg[t] = deg.get(t, 0) + 1
    leaves = sorted(n for n, d in deg.items() if d == 1 and n != 'Q0')
    from kgqa_nb.isomorphism import classify_answer_subgraph
    assert query_isomorphism(oracle_query(tri, leaves, 'Q0')) == classify_answer_subgraph(tri, leaves, 'Q0')

def test_query_isomorphism_refuses_a_bare_entity():
    from kgqa_nb.isomorphism import IsomorphismError
    with pytest.raises(IsomorphismError, match='answer_is_seed'): query_isomorphism(Entity('Q1'))
    with pytest.raises(IsomorphismError, match='answer_is_seed'): query_isomorphism('AND(Q1, Q2 -> P1)')

# ---------------------------------------------------------------- real data

@pytest.mark.data('codex')
def test_symbolic_executor_on_codex_m():
    from kgqa_nb.loaders import load_codex_m
    kg = load_codex_m()
    ex = SymbolicExecutor(kg)
    h, r, t = kg.triples[0].tolist()
    e, p = kg.entity_ids[h], kg.relation_ids[r]
    s = ex.execute(Projection(Entity(e), p))
    assert s[t] == 1.0 and s.sum() == len(set(kg.tail[(kg.head == h) & (kg.rel == r)].tolist()))
    back = ex.execute(Projection(Projection(Entity(e), p), p, inverse=True))
    assert back[h] == 1.0
