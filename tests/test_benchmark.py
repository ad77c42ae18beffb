"""The GTSQA benchmark (chapter 25, notebook 68, `kgqa benchmark`): the harness on a toy dataset with two toy models (Table 2's
columns and intervals, the same questions for every model, no gold field reaching a model or the reader), the figures
written from its tables, the command's refusals before any work, and a run on a dataset folder."""
import numpy as np
import pandas as pd
import pytest

from kgqa_nb import benchmark as B
from kgqa_nb.cli import PARSERS, main
from kgqa_nb.core import save_figure
from kgqa_nb.dataset import write_jsonl
from kgqa_nb.qgraphs import build_question_graphs
from kgqa_nb.spanalysis import tree_records
from kgqa_nb.toyworld import make_toyworld

GOLD = ('answer_node', 'answer_subgraph', 'sparql_query', 'graph_isomorphism', 'test_type', 'all_answers_wikidata',
        'all_answers_wikikg2', 'full_answer_subgraph_wikikg2', 'n_hops')


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    kg = make_toyworld(scale=0.2)
    recs = tree_records(kg, 10, seed=5, max_hops=2, max_seeds=2)
    recs['test_type'] = [['in_distribution'] if i % 2 else ['unseen_relation_type'] for i in range(len(recs))]
    qgs = build_question_graphs(kg, recs, tmp_path_factory.mktemp('qg'), n_nodes=60, max_triples=400)
    return kg, recs, [np.stack([g.h, g.r, g.t], 1) for g in qgs], qgs


class Spy:
    "A reader that records what it is given and answers with the tails of the triples whose head is a seed."
    def __init__(self): self.views, self.questions = [], []
    def describe(self): return 'spy reader (toy)'
    def answer_many(self, questions, triples_lists, views):
        self.views += list(views); self.questions += list(questions)
        return [[t[2].rsplit('(', 1)[1].rstrip(')') for t in tri if t[0] in v['seed_entities']][:3] for tri, v in zip(triples_lists, views)]


class GoldCheckingModel:
    "A toy model that fails the run if its record holds a gold field; retrieves the first n triples of the question graph."
    def __init__(self, name, n): self.name, self.n, self.seen = name, n, []
    def describe(self): return f'{self.name} (toy: first {self.n} graph triples)'
    def retrieve(self, rec, kg, graph=None):
        assert not set(GOLD) & set(rec), f'gold fields given to a model: {set(GOLD) & set(rec)}'
        self.seen.append(rec['id'])
        return np.asarray(graph)[:self.n]


def test_two_toy_models_same_questions_every_column_with_intervals_and_no_gold_seen(toy):
    kg, recs, graphs, _ = toy
    a, b, spy = GoldCheckingModel('toy-a', 5), GoldCheckingModel('toy-b', 50), Spy()
    perq = B.run_benchmark([a, b], recs, kg, graphs, spy)
    assert a.seen == b.seen == list(recs.id)
    assert all(set(v) <= set(B.QUESTION_FIELDS) for v in spy.views) and len(spy.views) == 2 * len(recs)
    assert spy.questions == 2 * list(recs.question)
    t = B.benchmark_table(perq)
    for c in B.TABLE2_COLUMNS:
        assert t[c].notna().all(), c
        assert ((t[f'{c}_lo'] <= t[c] + 1e-9) & (t[c] <= t[f'{c}_hi'] + 1e-9)).all(), c
    assert list(t.label) == [a.describe(), b.describe()] and set(t.reader) == {'spy reader (toy)'} and set(t.n_questions) == {len(recs)}
    assert t.set_index('model').n_triples.to_dict() == {'toy-a': 5.0, 'toy-b': 50.0}


def test_scores_follow_the_gold_of_each_question(toy):
    kg, recs, graphs, qgs = toy
    class Oracle:  # retrieves exactly the GT triples of the graph: recall and precision 1 wherever the graph holds them all
        name = 'gt-triples'
        def describe(self): return 'the question graph GT triples (oracle, toy)'
        def retrieve(self, rec, kg, graph=None):
            g = next(q for q in qgs if q.id == str(rec['id']))
            return np.stack([g.h, g.r, g.t], 1)[g.triple_scores.astype(bool)]
    perq = B.run_benchmark([Oracle()], recs, kg, graphs, Spy())
    full = [bool(q.triple_scores.sum() == len(B.gold_side(kg, r)['gt_triples'])) for q, r in zip(qgs, recs.to_dict('records'))]
    assert (perq.gt_precision == 1).all()
    assert (perq.gt_recall[full] == 1).all() and (perq.answer_hit[full] == 1).all()


def test_a_model_that_leaves_its_question_graph_or_repeats_a_triple_is_named(toy):
    kg, recs, graphs, _ = toy
    class Outside(GoldCheckingModel):
        def retrieve(self, rec, kg, graph=None): return np.array([[0, 0, 0]])
    class Twice(GoldCheckingModel):
        def retrieve(self, rec, kg, graph=None): return np.asarray(graph)[[0, 0]]
    outside_graph = [g[~((g[:, 0] == 0) & (g[:, 1] == 0) & (g[:, 2] == 0))] for g in graphs]
    with pytest.raises(ValueError, match='outside: 1 retrieved triples are not in the question graph'):
        B.run_benchmark([Outside('outside', 1)], recs, kg, outside_graph, Spy())
    with pytest.raises(ValueError, match='twice: the retrieved subgraph repeats a triple'):
        B.run_benchmark([Twice('twice', 1)], recs, kg, graphs, Spy())
    with pytest.raises(ValueError, match='10 records but 9 question graphs'):
        B.run_benchmark([Twice('twice', 1)], recs, kg, graphs[:9], Spy())


def test_the_figures_are_written_from_the_tables(toy, tmp_path):
    kg, recs, graphs, _ = toy
    perq = B.run_benchmark([B.LLMOnlyModel(), GoldCheckingModel('toy-b', 50)], recs, kg, graphs, Spy())
    fig2 = B.by_group(perq, 'graph_isomorphism', 'em_hit')
    gain = B.by_group(perq, 'test_type', 'em_hit', baseline='llm-only')
    assert set(gain.group) == {'in_distribution', 'unseen_relation_type'} and set(gain.model) == {'toy-b'}
    pts, st = B.recall_vs_em(perq)
    assert set(pts.model) == {'toy-b'} and set(st) == {'gt_recall', 'answer_recall'}
    figs = {'fig2.png': B.plot_by_group(fig2[fig2.model != 'llm-only'], 'EM', 'EM (%)', B.group_order(fig2.group.unique(), perq), fig2[fig2.model == 'llm-only']),
            'fig3.png': B.plot_by_group(gain, 'EM - baseline', 'points'),
            'fig13.png': B.plot_recall_vs_em(pts, st, 'spy reader (toy)')}
    for name, fig in figs.items(): save_figure(fig, tmp_path / name, params={}, artifact='test')
    for name in figs:
        assert (tmp_path / name).stat().st_size > 1000 and (tmp_path / name).with_suffix('.pdf').exists()
        assert (tmp_path / name.replace('.png', '.provenance.json')).exists()


def test_by_group_refuses_a_baseline_that_did_not_run(toy):
    kg, recs, graphs, _ = toy
    perq = B.run_benchmark([GoldCheckingModel('toy-b', 5)], recs, kg, graphs, Spy())
    with pytest.raises(ValueError, match="baseline 'llm-only' is not among the models"):
        B.by_group(perq, 'test_type', 'em_hit', baseline='llm-only')


@pytest.mark.parametrize('argv, said', [
    (['--models', 'llm-only,tgo'], "unknown model 'tgo'"),
    (['--models', 'llm-only,llm-only'], 'a model is named twice'),
    (['--models', 'subgraphrag'], 'model subgraphrag needs --subgraphrag-ckpt'),
    (['--models', 'sr', '--sr-ckpt', 'no/such/best.pt'], '--sr-ckpt no/such/best.pt: no such file'),
    (['--models', 'llm-only', '--n-questions', '-1'], '--n-questions must be 0 (all) or more, not -1'),
    (['--models', 'llm-only', '--k', '0'], '--k must be at least 1, not 0'),
    (['--models', 'llm-only', '--reader', 'llm', '--backend', 'openai'], '--backend openai needs --model NAME'),
    (['--models', 'llm-only,rog', '--rog-generator', 'llama'], 'a path generator is tiny, gemma or hf:'),
    (['--models', 'gcr', '--rog-lora-rank', '-1'], '--rog-lora-rank 0 or more'),
])
def test_kgqa_benchmark_refuses_bad_flags_in_one_line_before_any_work(tmp_path, monkeypatch, capsys, argv, said):
    opened = []
    monkeypatch.delenv('KGQA_LLM_MODEL', raising=False)
    monkeypatch.setattr(B, 'open_dataset_dir', lambda *a, **k: opened.append(a))
    assert main(['benchmark', '--dataset', str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('kgqa benchmark: ') and said in err and len(err.splitlines()) == 1
    assert opened == []  # refused before the dataset was opened


def test_kgqa_benchmark_refuses_a_missing_dataset_and_the_oracle_reader(tmp_path, capsys):
    assert main(['benchmark', '--models', 'llm-only', '--dataset', str(tmp_path / 'nowhere')]) == 2
    assert 'no such folder' in capsys.readouterr().err
    assert main(['benchmark', '--models', 'llm-only', '--dataset', str(tmp_path), '--reader', 'offline']) == 2
    assert "invalid choice: 'offline'" in capsys.readouterr().err


def test_kgqa_benchmark_runs_on_a_split_folder_and_writes_its_rows(tmp_path, capsys):
    kg = make_toyworld()
    recs = tree_records(kg, 6, seed=1, max_hops=2, max_seeds=1)
    write_jsonl(recs.iloc[:2].to_dict('records'), tmp_path / 'd' / 'train.jsonl'); write_jsonl(recs.iloc[2:].to_dict('records'), tmp_path / 'd' / 'test.jsonl')
    out = tmp_path / 'rows.csv'
    assert main(['benchmark', '--models', 'llm-only', '--dataset', str(tmp_path / 'd'), '--kg', 'toyworld', '--n-questions', '3',
                 '--n-nodes', '40', '--max-triples', '200', '--cache-dir', str(tmp_path / 'c'), '--out', str(out)]) == 0
    said = capsys.readouterr().out
    assert '3 test questions' in said and 'EM Hits' in said and 'GT-triple Recall' in said
    rows = pd.read_csv(out, dtype={'id': str})
    test = recs.iloc[2:]  # --n-questions 3 of 4: the seeded sample stratified by test type (benchmark_sample), in record order
    assert list(rows.id) == [str(i) for i in test.id.iloc[B.benchmark_sample(test.to_dict('records'), 3, 0)]] and (rows.n_triples == 0).all()
    assert len(set(rows.id)) == 3 and set(rows.id) <= {str(i) for i in test.id}


def test_kgqa_benchmark_reads_a_trained_subgraphrag_checkpoint(tmp_path, capsys):
    "A checkpoint of kgqa train-retriever as a benchmark model: its top-k triples of each question graph, every row labelled."
    from kgqa_nb.qgraphs import random_tree_question
    from kgqa_nb.retriever_cli import train_retriever_cli
    kg = make_toyworld()
    recs = [dict(random_tree_question(kg, n_seeds=1, hops=1 + i % 2, seed=300 + i, qid=f'b{i}'), question=f'question {i}') for i in range(14)]
    folder = tmp_path / 'mine'
    write_jsonl(recs[:10], folder / 'train.jsonl'); write_jsonl(recs[10:], folder / 'test.jsonl')
    data = ['--dataset', str(folder), '--kg', 'toyworld', '--n-nodes', '60', '--max-triples', '300', '--cache-dir', str(tmp_path / 'cache')]
    assert train_retriever_cli(PARSERS['train-retriever']().parse_args([*data, '--epochs', '1', '--val-fraction', '0.3', '--out', str(tmp_path / 'ck')])) == 0
    capsys.readouterr()
    assert main(['benchmark', '--models', 'subgraphrag,llm-only', *data, '--k', '5', '--subgraphrag-ckpt', str(tmp_path / 'ck' / 'best.pt'),
                 '--out', str(tmp_path / 'rows.csv')]) == 0
    assert 'subgraphrag: SubgraphRAG (5) (checkpoint ck/best.pt, top 5 triples; gate not checked)' in capsys.readouterr().out
    rows = pd.read_csv(tmp_path / 'rows.csv', dtype={'id': str})
    assert rows.groupby('model').id.apply(list).to_dict() == {'llm-only': ['b10', 'b11', 'b12', 'b13'], 'subgraphrag': ['b10', 'b11', 'b12', 'b13']}
    assert rows.set_index('model').n_triples.groupby(level=0).max().to_dict() == {'llm-only': 0, 'subgraphrag': 5}


def test_kgqa_benchmark_refuses_an_empty_test_split_in_one_line(tmp_path, capsys):
    kg = make_toyworld()
    recs = tree_records(kg, 3, seed=1, max_hops=2, max_seeds=1)
    write_jsonl(recs.to_dict('records'), tmp_path / 'd' / 'train.jsonl'); (tmp_path / 'd' / 'test.jsonl').write_text('')
    assert main(['benchmark', '--models', 'llm-only', '--dataset', str(tmp_path / 'd'), '--kg', 'toyworld', '--cache-dir', str(tmp_path / 'c')]) == 2
    err = capsys.readouterr().err.strip()
    assert 'test' in err and '\n' not in err and 'Traceback' not in err
