"""KGQAGen Table 2 rows: every row has a type (oracle, stand-in, LLM), the offline (non-oracle) reader sits beside every
LLM reader given triples and reads nothing of a record but its question view, the LASM columns are blank exactly when
asked (an offline judge), precision and F1 match values computed by hand, the transfer summary spans every seed, and the
retriever rows read graphs built from the seeds alone (the answer-conditioned graphs only in rows labelled oracle)."""
import json

import numpy as np
import pandas as pd
import pytest

from kgqa_nb.kgqagen import KGQAGenConfig
from kgqa_nb.kgqagen_run import run_kgqagen
from kgqa_nb.dataset import QUESTION_FIELDS
from kgqa_nb.kgqagen_eval import (ANSWER_CONDITIONED, ROW_TYPES, SEEDS_ONLY, KGQAGenDataset, Retrieved, Table2Questions, answer_graph_retrieval,
                                  proof_held, proof_triples, retrieval_coverage, score_runs, seed_retrieval, table2_runs, transfer_table)
from kgqa_nb.llm import LLMClient
from kgqa_nb.loaders import load_kg
from kgqa_nb.metrics import LasmJudge
from kgqa_nb.readers import TextPathReader

GOLD_FIELDS = ('sparql_query', 'answer_node', 'answer_subgraph', 'all_answers_wikidata', 'graph_isomorphism', 'n_hops', 'proof')


class SpyReader(TextPathReader):
    "The non-oracle reader, recording the records it is handed."
    def __init__(self):
        super().__init__(); self.seen = []
    def answer_many(self, questions, triples_lists, records=None):
        self.seen += list(records or [])
        return super().answer_many(questions, triples_lists, records)


@pytest.fixture(scope='module')
def generated(tmp_path_factory):
    kg = load_kg('toyworld')
    out = tmp_path_factory.mktemp('kq')
    summary = run_kgqagen(out, KGQAGenConfig(n_target=8, max_candidates=80, batch_size=8), kg=kg, verbose=False, status_every=0)
    rows = sorted((json.loads(l) for l in (out / 'records.jsonl').read_text().splitlines()), key=lambda r: r['id'])
    ds = KGQAGenDataset(out, kg, pd.DataFrame(rows), summary['funnel'], summary, {})
    return Table2Questions(rows, kg, 'offline', ds)


@pytest.fixture(scope='module')
def scored(generated, tmp_path_factory):
    llm = LLMClient('offline', cache_dir=tmp_path_factory.mktemp('llm'))
    spy = SpyReader()
    retrieved = {r['id']: [tuple(t) for t in r['answer_subgraph']] for r in generated.rows[::2]}
    runs = table2_runs(generated, llm, [('given top-K', retrieved)], text_reader=spy)
    return runs, spy, llm


def test_every_row_has_a_type_and_the_nonoracle_reader_sits_beside_every_llm_reader(scored):
    runs, _, _ = scored
    types = {name: typ for _, typ, name, _, _ in runs}
    assert set(types.values()) <= set(ROW_TYPES)
    assert {n for n, t in types.items() if t == 'oracle'} == {n for n in types if 'full-pattern recall (oracle)' in n}
    llm_readers = [n for n in types if 'reader' in n and 'offline:' in n]  # the LLM reader and SubgraphRAG's reader rows
    nonoracle = [n for n in types if n.endswith('offline (non-oracle) reader') or 'offline (non-oracle) reader +' in n]
    assert len(llm_readers) == len(nonoracle) == 2 and all(types[n] == 'stand-in (offline non-oracle)' for n in nonoracle)


def test_nonoracle_reader_never_receives_gold_fields(scored, generated):
    _, spy, _ = scored
    assert len(spy.seen) == len(generated.rows) + len(generated.rows[::2])
    assert all(set(r) <= set(QUESTION_FIELDS) and 'seed_entities' in r for r in spy.seen)
    assert not any(f in r for r in spy.seen for f in GOLD_FIELDS)


def test_lasm_columns_blank_exactly_when_asked(scored, generated):
    runs, _, llm = scored
    blank, _ = score_runs(generated, runs, LasmJudge(llm), lasm=False)
    judged, per_q = score_runs(generated, runs, LasmJudge(llm), lasm=True)
    lasm = [c for c in blank if c.endswith('_lasm')]
    assert len(lasm) == 5 and blank[lasm].isna().all().all() and judged[lasm].notna().all().all()
    assert blank.judge.str.endswith('(LASM left blank)').all()
    em = [c for c in blank if c.endswith('_em')]
    pd.testing.assert_frame_equal(blank[em], judged[em])  # blanking LASM changes no EM number
    assert list(blank.columns[:5]) == ['type', 'group', 'model', 'accuracy_em', 'accuracy_lasm']


def test_precision_and_f1_against_hand_computed_values():
    "Q0: gold {A, B}, answered [A, X, Y, Z]: recall 1/2, precision 1/4, F1 1/3, Hit@1 1. Q1: gold {C}, answered [D]: all 0."
    q = Table2Questions([dict(id=0, question='q0', answer_labels=['A', 'B'], all_answers_wikidata=['Q1', 'Q2']),
                         dict(id=1, question='q1', answer_labels=['C'], all_answers_wikidata=['Q3'])], None, 'by hand', None)
    runs = [('LLM-SP', 'oracle', 'many answers', [0, 1], [['Q1', 'Q7', 'Q8', 'Q9'], ['Q4']]),
            ('LLM-SP', 'oracle', 'one answer', [0], [['B']])]
    t, per_q = score_runs(q, runs, LasmJudge(LLMClient('offline', cache=False)), lasm=False)
    row = t.set_index('model').loc['many answers']
    np.testing.assert_allclose(row[['accuracy_em', 'precision_em', 'f1_em', 'hit@1_em', 'recall_em']].astype(float),
                               [25.0, 12.5, 100 / 6, 50.0, 25.0])
    one = t.set_index('model').loc['one answer']  # the label matches too; half the gold, every answer right
    np.testing.assert_allclose(one[['accuracy_em', 'precision_em', 'f1_em']].astype(float), [50.0, 100.0, 200 / 3])
    assert len(per_q) == 3


def test_transfer_table_spans_every_seed():
    name = lambda a, k: f'SubgraphRAG retriever (trained on X, {a} labels, seed {k}) top-5 + full-pattern recall (oracle)'
    table = pd.DataFrame(dict(model=['PPR top-5 + full-pattern recall (oracle)'] + [name(a, k) for a in ('SP', 'GT') for k in range(3)],
                              accuracy_em=[50.0, 30.0, 60.0, 45.0, 70.0, 55.0, 52.0], f1_em=[0.0] * 7))
    tt = transfer_table(table, metrics=('accuracy_em',)).set_index('labels')
    assert tt.n_seeds.tolist() == [3, 3, 3]
    np.testing.assert_allclose(tt.loc['SP', ['mean', 'std', 'min', 'max']].astype(float), [45.0, 15.0, 30.0, 60.0])
    assert tt.loc['SP', 'seeds_above_ppr'] == 1 and tt.loc['GT', 'seeds_above_ppr'] == 3
    np.testing.assert_allclose(tt.loc['GT - SP', ['mean', 'min', 'max']].astype(float), [(40 - 5 + 7) / 3, -5.0, 40.0])
    assert transfer_table(table.iloc[:1]).empty


class AnswerBlind(dict):
    "A record that fails the test the moment anything reads a gold field from it."
    def __getitem__(self, k):
        assert k not in GOLD_FIELDS, f'the seeds-only retrieval read the gold field {k!r}'
        return super().__getitem__(k)
    def get(self, k, default=None):
        assert k not in GOLD_FIELDS, f'the seeds-only retrieval read the gold field {k!r}'
        return super().get(k, default)


def test_seeds_only_graphs_never_read_the_answer(generated, monkeypatch):
    """The seeds-only graphs and PageRank's ranking come from the question view: records that refuse every gold field give
    the same top K (the proof is read afterwards, only to count what the graphs hold)."""
    import kgqa_nb.kgqagen_eval as ke
    _, _, ppr = seed_retrieval(generated, top_k=15)
    blind = Table2Questions([AnswerBlind(r) for r in generated.rows], generated.graph, 'offline', None)
    monkeypatch.setattr(ke, 'proof_triples', lambda q: [[tuple(t) for t in (dict.get(r, 'proof') or dict.get(r, 'answer_subgraph'))] for r in q.rows])  # the count, unguarded
    _, _, again = seed_retrieval(blind, top_k=15)
    assert again.top == ppr.top and again.in_graph == ppr.in_graph and ppr.graph == SEEDS_ONLY and not ppr.oracle


def test_top_k_never_holds_more_proof_than_the_seeds_only_graph_and_oracle_graphs_are_labelled(generated):
    rows, _, ppr = seed_retrieval(generated, top_k=15)
    orc = answer_graph_retrieval(generated, rows, top_k=15)
    proofs = dict(zip([r['id'] for r in generated.rows], proof_triples(generated)))
    for i, got in ppr.top.items():
        assert proof_held(proofs[i], got) <= ppr.in_graph[i] <= len(set(proofs[i]))
    assert all(orc.in_graph[i] == len(set(proofs[i])) for i in orc.top)  # ground truth re-added: the whole proof is there
    cov = retrieval_coverage(generated, [ppr, orc]).set_index('question_graph')
    assert cov.loc[SEEDS_ONLY, 'proof_in_top_k'] <= cov.loc[SEEDS_ONLY, 'proof_in_graph'] <= cov.loc[ANSWER_CONDITIONED, 'proof_in_graph']
    llm = LLMClient('offline', cache=False)
    runs = table2_runs(generated, llm, [ppr, orc])
    oracle_graph_rows = [(typ, name) for _, typ, name, _, _ in runs if name.startswith(orc.name)]
    assert len(oracle_graph_rows) == 3 and all(t == 'oracle' and 'oracle' in n for t, n in oracle_graph_rows)
    assert all(t != 'oracle' for _, t, n, _, _ in runs if n.startswith(ppr.name + ' + ') and 'full-pattern' not in n)
