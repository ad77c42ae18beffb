"""The GT-vs-SP retriever study (chapter 15c): the study's statistics (paired, seed-level, pooled, bootstrap), its gate
against the training-free references, its cache key following the code, its build record, and the two commands
(`kgqa train-retriever`, `kgqa retrieve`), whose bad flags, damaged checkpoints and unwritable outputs are refused before
any work with one line."""
import json, os, subprocess, sys

import numpy as np
import pandas as pd
import pytest

from kgqa_nb.core import UsageError
from kgqa_nb.metrics import one_sided_test
from scipy import stats

from kgqa_nb.cli import PARSERS
from kgqa_nb.dataset import QUESTION_FIELDS
from kgqa_nb.readers import TextPathReader
from kgqa_nb.retriever_cli import retrieve_cli, train_retriever_cli
from kgqa_nb.retriever_study import gate_verdict, gt_vs_sp, hierarchical_bootstrap, paired_matrices, reader_record, retriever_study, training_gate
from kgqa_nb.subgraphrag import RetrievalInputError, two_hop_dataset
from kgqa_nb.text import HashingEncoder


def cli_args(command, argv):
    "What `kgqa <command>` parses from argv (the flags are declared in the cli chapter)."
    return PARSERS[command]().parse_args(argv)


def _made_up_study(p_gt=0.6, p_sp=0.4, n=50, seeds=3, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame([dict(retriever='subgraphrag', labels=lab, seed=s, id=f'q{i}', **{'gt_recall@10': float(rng.random() < p)})
                         for lab, p in (('gt', p_gt), ('sp:synth-kgqa', p_sp)) for s in range(seeds) for i in range(n)])


def test_gt_vs_sp_tests_paired_questions_seed_means_and_pooled_scores():
    study = _made_up_study()
    t = gt_vs_sp(study, ['gt_recall@10']).iloc[0]
    seeds = study.groupby(['labels', 'seed'])['gt_recall@10'].mean()
    assert t.p_seed_welch == one_sided_test(seeds['gt'], seeds['sp:synth-kgqa'])['p_value']
    pooled = [study[study.labels == lab]['gt_recall@10'].to_numpy() for lab in ('gt', 'sp:synth-kgqa')]
    assert t.p_pooled_paper == one_sided_test(*pooled)['p_value']
    per_q = study.groupby(['labels', 'id'])['gt_recall@10'].mean().unstack('id')  # each question averaged over its seeds
    a, b = per_q.loc['gt'].to_numpy(), per_q.loc['sp:synth-kgqa'].to_numpy()
    assert t.p_paired_t == pytest.approx(stats.ttest_rel(a, b, alternative='greater').pvalue)
    assert t.p_wilcoxon == pytest.approx(stats.wilcoxon(a - b, alternative='greater').pvalue)
    assert t.n_questions == 50 and t['diff'] == pytest.approx((a - b).mean()) and t.ci_low < t['diff'] < t.ci_high
    assert t.p_pooled_paper < t.p_seed_welch  # 150 vs 150 scores against 3 vs 3 means


def test_bootstrap_interval_covers_the_true_difference_and_no_effect_gives_no_test():
    covered = 0
    for s in range(20):  # 20 studies with a true difference of 0.2: a 95 % interval misses it about once
        A, B = paired_matrices(_made_up_study(0.6, 0.4, 80, 3, s), 'subgraphrag', 'gt', 'sp:synth-kgqa', 'gt_recall@10')
        lo, hi = hierarchical_bootstrap(A, B, 500, s)
        covered += lo <= 0.2 <= hi
    assert covered >= 16
    same = gt_vs_sp(_made_up_study(0.5, 0.5, 60, 3, 1), ['gt_recall@10']).iloc[0]
    assert same.ci_low < 0 < same.ci_high and same.p_paired_t > 0.05


def test_a_trained_retriever_passes_the_gate_on_a_learnable_set(tmp_path):
    # questions that name only the seed: the embedding retriever cannot read the relation pattern (parent, then born in) from them
    kg, recs, graphs = two_hop_dataset(80, n_distractors=40, seed=3)
    recs = [dict(r, question=f"Tell me about {r['question'].split('parent of ')[1].rstrip('?').replace(' born', '')}", paraphrased_question=None)
            for r in recs]
    df = pd.DataFrame(recs).assign(split=['train'] * 70 + ['test'] * 10)
    st = retriever_study(kg, df, graphs, HashingEncoder(dim=64), tmp_path, labels=('gt',), seeds=(0,), references=('ppr', 'embedding'),
                         train_cfg=dict(epochs=15, patience=15), root=tmp_path, gate_k=10, ks=(10,), val_fraction=0.3)
    gate = training_gate(st, k=10).iloc[0]
    assert gate.passes and gate.val_recall > max(gate.ppr_val_recall, gate.embedding_val_recall) + 0.1
    assert gate_verdict(training_gate(st, k=10)).startswith('trained: every arm above ppr and embedding')
    with pytest.raises(ValueError, match="no 'val_gt_recall@100' column"): training_gate(st)


def test_an_untrained_arm_fails_the_gate(tmp_path):
    kg, recs, graphs = two_hop_dataset(30, n_distractors=40, seed=3)
    df = pd.DataFrame(recs).assign(split=['train'] * 20 + ['test'] * 10)
    st = retriever_study(kg, df, graphs, HashingEncoder(dim=64), tmp_path, labels=('gt',), seeds=(0,), references=('ppr', 'embedding'),
                         train_cfg=dict(epochs=1, patience=1, lr=1e-9), root=tmp_path, gate_k=10, ks=(10,), val_fraction=0.3)
    assert gate_verdict(training_gate(st, k=10)).startswith('under-trained: no conclusion (subgraphrag gt')


def _tiny_study(tmp_path, **kw):
    kg, recs, graphs = two_hop_dataset(12, n_distractors=6, shortcut=True)
    df = pd.DataFrame(recs).assign(split=['train'] * 8 + ['test'] * 4)
    return retriever_study(kg, df, graphs, HashingEncoder(dim=16), tmp_path / 'cache', labels=('gt',), seeds=(0,),
                           references=('random',), train_cfg=dict(epochs=1, val_metric=None), root=tmp_path / 'emb', **kw)


def test_study_cache_key_follows_the_code_and_the_folder_has_a_build_record(tmp_path, monkeypatch):
    import kgqa_nb.retriever_study as rsm
    first = _tiny_study(tmp_path)
    folder = tmp_path / 'cache' / first.attrs['folder'].split('/')[-1]
    assert json.loads((folder / 'built.json').read_text())['git'] is not None
    assert json.loads((folder / 'params.json').read_text())['code'] == rsm.study_code()
    assert _tiny_study(tmp_path).attrs['folder'] == first.attrs['folder']  # same code: the cached runs are read back
    monkeypatch.setattr(rsm, 'study_code', lambda *readers, retrievers=(): 'changedcode0')
    assert _tiny_study(tmp_path).attrs['folder'] != first.attrs['folder']  # other code: another folder, nothing reused


def test_study_refuses_an_unknown_validation_metric_before_training(tmp_path):
    kg, recs, graphs = two_hop_dataset(6, n_distractors=3)
    df = pd.DataFrame(recs).assign(split=['train'] * 4 + ['test'] * 2)
    with pytest.raises(ValueError, match="unknown validation metric 'foo'"):
        retriever_study(kg, df, graphs, HashingEncoder(dim=16), tmp_path, train_cfg=dict(val_metric='foo'), root=tmp_path)
    assert not list(tmp_path.glob('retriever-study-*/run-*.csv'))


@pytest.mark.parametrize('argv, flag', [(['--epochs', '0'], '--epochs must be at least 1, not 0'),
                                        (['--epochs', '-1'], '--epochs must be at least 1, not -1'),
                                        (['--patience', '0'], '--patience must be at least 1'),
                                        (['--n-questions', '0'], '--n-questions must be at least 1'),
                                        (['--val-fraction', '1'], '--val-fraction must be at least 0 and below 1'),
                                        (['--val-metric', 'foo'], "unknown validation metric 'foo'"),
                                        (['--labels', 'sp:nope'], 'unknown_labels')])
def test_train_retriever_cli_refuses_bad_flags_before_any_work(tmp_path, argv, flag):
    with pytest.raises(ValueError, match=flag):
        train_retriever_cli(cli_args('train-retriever', [*argv, '--cache-dir', str(tmp_path / 'data'), '--out', str(tmp_path / 'ck')]))
    assert not (tmp_path / 'ck').exists() and not (tmp_path / 'data').exists()  # no checkpoint, no dataset built


@pytest.mark.parametrize('argv, flag', [(['--k', '-5'], '--k must be at least 1, not -5'), (['--k', '0'], '--k must be at least 1'),
                                        (['--max-triples', '0'], '--max-triples must be at least 1')])
def test_retrieve_cli_refuses_bad_flags_before_any_work(tmp_path, argv, flag):
    with pytest.raises(UsageError, match=flag):
        retrieve_cli(cli_args('retrieve', [*argv, '--checkpoint', str(tmp_path / 'best.pt'), '--cache-dir', str(tmp_path / 'data'), '--out', str(tmp_path / 'top.jsonl')]))
    assert not (tmp_path / 'top.jsonl').exists() and not (tmp_path / 'data').exists()


def test_kgqa_prints_one_line_on_stderr_and_exits_2(tmp_path, capsys):
    from kgqa_nb.cli import main
    assert main(['train-retriever', '--epochs', '0', '--out', str(tmp_path / 'ck')]) == 2
    out, err = capsys.readouterr()
    assert out == '' and err == 'kgqa train-retriever: --epochs must be at least 1, not 0\n'
    assert main(['retrieve', '--checkpoint', str(tmp_path / 'missing.pt'), '--out', str(tmp_path / 'top.jsonl')]) == 2
    assert 'missing.pt' in capsys.readouterr().err


@pytest.mark.slow
def test_cli_train_then_retrieve(tmp_path):
    data = ['--n-questions', '60', '--n-nodes', '200', '--max-triples', '1500', '--cache-dir', str(tmp_path / 'data')]
    assert train_retriever_cli(cli_args('train-retriever', [*data, '--epochs', '1', '--out', str(tmp_path / 'ck')])) == 0
    assert (tmp_path / 'ck' / 'best.pt').exists()
    assert retrieve_cli(cli_args('retrieve', [*data, '--checkpoint', str(tmp_path / 'ck' / 'best.pt'), '--k', '20', '--out', str(tmp_path / 'top.jsonl')])) == 0
    lines = (tmp_path / 'top.jsonl').read_text().splitlines()
    assert lines and all(len(json.loads(l)['triples']) <= 20 for l in lines)
    with pytest.raises(RetrievalInputError, match='unknown_labels'):
        train_retriever_cli(cli_args('train-retriever', [*data, '--labels', 'sp:nope', '--out', str(tmp_path / 'x')]))
    assert not (tmp_path / 'x').exists()


def _kgqa(*argv, cwd=None):
    "Run `kgqa` in a subprocess: (exit code, stdout, stderr)."
    r = subprocess.run([sys.executable, '-m', 'kgqa_nb.cli', *argv], capture_output=True, text=True, cwd=cwd,
                       env={**os.environ, 'KGQA_PROGRESS': '0', 'KGQA_DEBUG': ''}, timeout=300)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize('content, said', [(b'', 'is empty'), (b'PK\x03\x04 not a whole file', 'is damaged or not a torch checkpoint')])
def test_retrieve_names_a_damaged_checkpoint_before_any_work(tmp_path, content, said):
    (tmp_path / 'best.pt').write_bytes(content)
    rc, out, err = _kgqa('retrieve', '--checkpoint', str(tmp_path / 'best.pt'), '--cache-dir', str(tmp_path / 'data'),
                         '--out', str(tmp_path / 'top.jsonl'))
    assert rc == 2 and 'Traceback' not in err and len(err.strip().splitlines()) == 1
    assert f"best.pt {said}" in err and 'train again' in err
    assert not (tmp_path / 'data').exists() and not (tmp_path / 'top.jsonl').exists()  # refused before any dataset was built


def test_a_damaged_last_checkpoint_on_resume_says_what_to_do(tmp_path):
    from kgqa_nb.subgraphrag import CheckpointMismatchError, TrainConfig, prepare_examples, text_features, train_retriever
    kg, recs, graphs = two_hop_dataset(6, n_distractors=3)
    enc = HashingEncoder(dim=16); exs = prepare_examples(recs, graphs, enc, root=tmp_path); feats = text_features(kg, enc, root=tmp_path)
    (tmp_path / 'ck').mkdir(); (tmp_path / 'ck' / 'last.pt').write_bytes(b'\x80\x04 cut short')
    with pytest.raises(CheckpointMismatchError, match=r'last.pt is damaged .*delete it to start the training run again, or give a new output folder'):
        train_retriever(exs[:4], exs[4:], feats, TrainConfig(epochs=1), tmp_path / 'ck')


@pytest.mark.parametrize('cmd, make, said', [('train-retriever', 'file', 'a file is there; give a folder'),
                                             ('retrieve', 'folder', 'a folder is there; give a file name'),
                                             ('train-retriever', 'read-only', 'cannot write in')])
def test_an_unwritable_out_is_refused_before_any_work(tmp_path, cmd, make, said):
    if make == 'read-only' and os.geteuid() == 0: pytest.skip('root writes in read-only folders')
    out = tmp_path / 'out'
    if make == 'file': out.write_text('x')
    else: out.mkdir()
    if make == 'read-only': out.chmod(0o555); out = out / 'ck'
    extra = ['--checkpoint', str(tmp_path / 'best.pt')] if cmd == 'retrieve' else []
    if cmd == 'retrieve':  # a readable checkpoint, so that only --out is wrong
        from kgqa_nb.subgraphrag import SubgraphRAGRetriever, save_retriever
        save_retriever(SubgraphRAGRetriever(8), tmp_path / 'best.pt')
    rc, _, err = _kgqa(cmd, *extra, '--cache-dir', str(tmp_path / 'data'), '--out', str(out))
    assert rc == 2 and 'Traceback' not in err and said in err
    assert not (tmp_path / 'data').exists()  # nothing built


def test_train_and_retrieve_read_a_dataset_folder(tmp_path):
    from kgqa_nb.qgraphs import random_tree_question
    from kgqa_nb.toyworld import make_toyworld
    kg = make_toyworld()
    recs = [dict(random_tree_question(kg, n_seeds=1, hops=1 + i % 2, seed=200 + i, qid=f'd{i}'), question=f'question {i}') for i in range(14)]
    folder = tmp_path / 'mine'; folder.mkdir()
    for split, part in (('train', recs[:10]), ('test', recs[10:])):
        (folder / f'{split}.jsonl').write_text(''.join(json.dumps(dict(r, split=split)) + '\n' for r in part))
    data = ['--dataset', str(folder), '--kg', 'toyworld', '--n-nodes', '60', '--max-triples', '300', '--cache-dir', str(tmp_path / 'cache')]
    assert train_retriever_cli(cli_args('train-retriever', [*data, '--epochs', '1', '--val-fraction', '0.3', '--out', str(tmp_path / 'ck')])) == 0
    assert retrieve_cli(cli_args('retrieve', [*data, '--checkpoint', str(tmp_path / 'ck' / 'best.pt'), '--k', '5', '--out', str(tmp_path / 'top.jsonl')])) == 0
    got = [json.loads(l) for l in (tmp_path / 'top.jsonl').read_text().splitlines()]
    assert [g['id'] for g in got] == ['d10', 'd11', 'd12', 'd13'] and all(len(g['triples']) == 5 for g in got)  # the folder's test questions
    with pytest.raises(FileNotFoundError, match='--dataset .*no such folder'):
        train_retriever_cli(cli_args('train-retriever', ['--dataset', str(tmp_path / 'nowhere'), '--out', str(tmp_path / 'ck2')]))


class _SpyReader:
    "Records what a study hands it; answers nothing."
    def __init__(self, oracle=None):
        self.seen = []
        if oracle is not None: self.oracle = oracle  # an instance attribute does not make an oracle: only the class says
    def answer(self, question, triples, record=None):
        self.seen.append(dict(record)); return []
    def answer_many(self, questions, triples_lists, records):
        return [self.answer(*x) for x in zip(questions, triples_lists, records)]
    def describe(self): return 'spy'


class _SpyOracle(_SpyReader):
    oracle = True


def test_the_study_hands_non_oracle_readers_the_question_view_only(tmp_path):
    plain, claims, orc = _SpyReader(), _SpyReader(oracle=True), _SpyOracle()
    text = TextPathReader(encoder=HashingEncoder(dim=16))  # a real non-oracle reader: it refuses a full record
    kg, recs, graphs = two_hop_dataset(12, n_distractors=6, shortcut=True)
    recs = [dict(r, answer_node=kg.entity_text(g.answers[0]), sparql_query='SELECT ...') for r, g in zip(recs, graphs)]  # gold fields
    retriever_study(kg, pd.DataFrame(recs).assign(split=['train'] * 8 + ['test'] * 4), graphs, HashingEncoder(dim=16), tmp_path / 'cache',
                    labels=('gt',), seeds=(0,), references=('random',), train_cfg=dict(epochs=1, val_metric=None), root=tmp_path / 'emb',
                    reader=plain, extra_readers={'hits_claims': claims, 'hits_oracle': orc, 'hits_text': text}, reader_ks=(5,))
    assert plain.seen and all(set(r) <= set(QUESTION_FIELDS) and 'question' in r for r in plain.seen + claims.seen)
    assert orc.seen and all({'answer_node', 'sparql_query', 'n_hops'} <= set(r) for r in orc.seen)  # the oracle gets the whole record
    full = dict(plain.seen[0], answer_node='X (Q1)', sparql_query='SELECT ...')
    assert reader_record(text, full) == plain.seen[0] and reader_record(orc, full) is full


class _Stop(Exception): pass


def test_the_study_reads_the_filtered_dataset_it_is_given(tmp_path, monkeypatch):
    "With the dataset's answerability filter asked for, the study trains and tests on its survivors (the set Tables 1 and 5 read)."
    import kgqa_nb.retriever_study as rsm
    from kgqa_nb.datasources import open_artifact
    from kgqa_nb.filters import dataset_filters
    from kgqa_nb.readers import QueryReader
    seen = {}
    def spy(kg, records, *a, **kw):
        seen['ids'] = sorted(records.id.tolist()); raise _Stop
    monkeypatch.setattr(rsm, 'study_question_graphs', lambda *a, **kw: {})
    monkeypatch.setattr(rsm, 'retriever_study', spy)
    cfg = lambda **kw: rsm.StudyConfig.from_params(dict(n_questions=60, seed=0, out_dir=str(tmp_path), **kw))
    with pytest.raises(ValueError, match='make_filters'):
        rsm.open_retriever_study('retriever_study', QueryReader(), cfg(answerability='offline-text'))
    with pytest.raises(_Stop): rsm.open_retriever_study('retriever_study', QueryReader(), cfg())
    unfiltered = seen.pop('ids')
    with pytest.raises(_Stop):
        rsm.open_retriever_study('retriever_study', QueryReader(), cfg(answerability='offline-text'), make_filters=dataset_filters)
    ctx = open_artifact('table1_dataset_overview', 'generated', 'toyworld', 0, str(tmp_path), n_target=60, backend='offline',
                        answerability='offline-text', make_filters=dataset_filters)
    assert seen['ids'] == sorted(ctx.records.id.tolist())
    assert set(seen['ids']) <= set(unfiltered) and len(seen['ids']) < len(unfiltered)  # some test questions fail the check
    sp = rsm.study_params(dict(answerability='offline-text', newer_kg='', make_filters=dataset_filters, n_questions=60))
    assert sp == dict(answerability='offline-text', newer_kg='', n_questions=60)
