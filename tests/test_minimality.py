"""Minimality (SynthKGQA A.3): the paper's worked example on a small store, and random answer trees over a random KG
checked against a brute-force search that evaluates every seed subset with an independent pattern matcher."""
import itertools, random

import pytest
from hypothesis import given, settings, strategies as st

from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.isomorphism import IsomorphismError, classify_answer_subgraph
from kgqa_nb.minimality import (MinimalityError, minimal_seed_sets, minimality, seed_paths, store_runner, subset_query,
                                with_prefixes)


def make_store(kg):
    from kgqa_nb.sparql import OxigraphStore
    return OxigraphStore.from_kg(kg, labels=False)


# ---------- the paper's example (GTSQA train id 40513) ----------

FILM, DIRECTOR = 'Le Vicomte de Bragelonne (Q3228085)', 'Fernando Cerchio (Q503508)'
ITALY, FRENCH, NOVEL = 'Italy (Q38)', 'French (Q150)', 'The Vicomte of Bragelonne: Ten Years Later (Q769001)'
EX = [(FILM, 'country of origin (P495)', ITALY), (FILM, 'original language (P364)', FRENCH),
      (FILM, 'based on (P144)', NOVEL), (FILM, 'director (P57)', DIRECTOR)]


def films_kg(films):
    return KnowledgeGraph.from_id_triples([(f, p, o) for f, *objs in films for p, o in zip(('P495', 'P364', 'P144', 'P57'), objs) if o])


F1 = ('Q3228085', 'Q38', 'Q150', 'Q769001', 'Q503508')
F2 = ('Q2260875', 'Q38', 'Q150', None, 'Q679016')   # shares two of the three constraints
F3 = ('Q900003', 'Q38', 'Q1860', 'Q769001', 'Q900013')  # Italian, same novel, English
F4 = ('Q900004', 'Q142', 'Q150', None, 'Q900014')  # French language, not Italian


def test_example_type():
    assert classify_answer_subgraph(EX, [ITALY, FRENCH, NOVEL], DIRECTOR).graph_isomorphism == '((1)(1)(1))'


def test_example_second_film_only():
    "Only a second film sharing two constraints: the novel alone pins the film down."
    store = make_store(films_kg([F1, F2]))
    r = minimality(store, EX, [ITALY, FRENCH, NOVEL], DIRECTOR, ['Q503508'])
    assert r.redundant and list(r.minimal_seeds_and_queries) == ['Q769001']
    assert r.minimal_graph_isomorphism == '(2)' and r.n_queries == 3


def test_example_pair_needed():
    store = make_store(films_kg([F1, F2, F3, F4]))
    r = minimality(store, EX, [ITALY, FRENCH, NOVEL], DIRECTOR, ['Q503508'])
    assert r.redundant
    assert r.minimal_seeds_and_queries == {
        'Q150-Q769001': 'SELECT DISTINCT ?answer WHERE { ?a wdt:P364 wd:Q150 . ?a wdt:P57 ?answer . ?a wdt:P144 wd:Q769001 . }'}
    assert r.minimal_graph_isomorphism == '((1)(1))'
    assert r.n_queries == 6  # 3 singletons + 3 pairs; the full set is never queried


def test_no_strict_subset_suffices():
    store = make_store(films_kg([F1, F2, F3, F4]))
    masque = [('Q2260875', 'P495', 'Q38'), ('Q2260875', 'P364', 'Q150'), ('Q2260875', 'P57', 'Q679016')]
    r = minimality(store, masque, ['Q38', 'Q150'], 'Q679016', ['Q503508', 'Q679016'])
    assert not r.redundant and list(r.minimal_seeds_and_queries) == ['Q38-Q150']
    assert r.minimal_graph_isomorphism == '((1)(1))' == classify_answer_subgraph(masque, ['Q38', 'Q150'], 'Q679016').graph_isomorphism


def test_errors():
    store = make_store(films_kg([F1]))
    with pytest.raises(MinimalityError): minimality(store, EX, [ITALY, FRENCH, NOVEL], DIRECTOR, ['Q1'])
    with pytest.raises(IsomorphismError, match='answer_is_seed'): minimality(store, EX, [ITALY, DIRECTOR], DIRECTOR, ['Q503508'])
    with pytest.raises(ValueError, match='triples'): minimality(store, [(ITALY, FILM)], [ITALY], FILM, ['Q3228085'])
    with pytest.raises(TypeError, match='select'): minimality(object(), EX, [ITALY, FRENCH, NOVEL], DIRECTOR, ['Q503508'])


# ---------- random trees over a random KG, against brute force ----------

def match(patterns, triples):
    "Answers of a conjunctive query by backtracking over the triples: patterns are (s, p, o) with '?x' variables."
    out = set()
    def go(i, env):
        if i == len(patterns): out.add(env['?answer']); return
        s, p, o = patterns[i]
        for h, r, t in triples:
            if r != p: continue
            e = dict(env); ok = True
            for term, val in ((s, h), (o, t)):
                if term.startswith('?'):
                    if e.setdefault(term, val) != val: ok = False
                elif term != val: ok = False
            if ok: go(i + 1, e)
    go(0, {})
    return out


def parse_patterns(query):
    body = query[query.index('{') + 1: query.rindex('}')]
    pats = [p.split() for p in body.split(' .') if p.strip()]
    strip = lambda x: x[3:] if x.startswith('wd:') else x[4:] if x.startswith('wdt:') else x
    return [(strip(s), strip(p), strip(o)) for s, p, o in pats]


@st.composite
def kg_and_tree(draw):
    rnd = random.Random(draw(st.integers(0, 10 ** 9)))
    n_ent, n_rel = rnd.randint(6, 14), rnd.randint(1, 3)
    triples = sorted({(f'Q{rnd.randrange(n_ent)}', f'P{rnd.randrange(n_rel)}', f'Q{rnd.randrange(n_ent)}') for _ in range(rnd.randint(10, 40))})
    triples = [t for t in triples if t[0] != t[2]]
    answer = rnd.choice(triples)[rnd.choice((0, 2))]
    nodes, tree = {answer}, []
    for _ in range(rnd.randint(1, 5)):
        cand = [t for t in triples if (t[0] in nodes) != (t[2] in nodes)]
        if not cand: break
        t = rnd.choice(cand); tree.append(t); nodes |= {t[0], t[2]}
    deg = {}
    for h, _, t in tree: deg[h] = deg.get(h, 0) + 1; deg[t] = deg.get(t, 0) + 1
    seeds = [v for v in sorted(nodes) if v != answer and (deg[v] == 1 or rnd.random() < .3)]
    return triples, tree, seeds, answer


@settings(max_examples=60, deadline=None)
@given(kg_and_tree())
def test_against_brute_force(case):
    triples, tree, seeds, answer = case
    store = make_store(KnowledgeGraph.from_id_triples(triples))
    paths = seed_paths(tree, seeds, answer)
    run = store_runner(store)
    # the store and the independent matcher agree on every subset query
    for k in range(1, len(seeds) + 1):
        for sub in itertools.combinations(seeds, k):
            q = subset_query(paths, sub)
            assert set(run(q)) == match(parse_patterns(q), triples), q
    full = match(parse_patterns(subset_query(paths, seeds)), triples)
    assert answer in full
    # brute force: every subset whose query (its seeds plus the seeds its paths pass through) returns only answers in full
    def closure(sub):
        on = {x for s in sub for h, _, t in paths.triples[s] for x in (h, t)}
        return frozenset(sub) | {s for s in seeds if s in on}
    suff = [sub for k in range(1, len(seeds) + 1) for sub in itertools.combinations(seeds, k)
            if closure(sub) == frozenset(sub) and (a := match(parse_patterns(subset_query(paths, sub)), triples)) and a <= full]
    best = min(len(s) for s in suff)
    r = minimality(store, tree, seeds, answer, full)
    assert r.redundant == (best < len(seeds))
    assert list(r.minimal_seeds_and_queries) == ['-'.join(s) for s in suff if len(s) == best]
    assert r.n_queries <= 2 ** len(seeds) - 1
    first = [s for s in suff if len(s) == best][0]
    sub_tree = list(dict.fromkeys(t for s in first for t in paths.triples[s]))
    assert r.minimal_graph_isomorphism == classify_answer_subgraph(sub_tree, first, answer).graph_isomorphism


def test_store_runner():
    store = make_store(films_kg([F1]))
    q = 'SELECT DISTINCT ?answer WHERE { wd:Q3228085 wdt:P57 ?answer . }'
    assert [r['answer'] for r in store.select_ids(with_prefixes(q))] == ['Q503508']
    assert store_runner(store)(q) == ['Q503508']
    class SelectOnly:  # a store with only select(), returning terms
        def select(self, q): return store.select(q)
    assert store_runner(SelectOnly())(q) == ['Q503508']
