"""The GT-vs-SP retriever study (chapter 15c): the study's statistics, its cache key following the code, its build record,
and the two commands (`kgqa train-retriever`, `kgqa retrieve`), whose bad flags are refused before any work."""
import json

import numpy as np
import pandas as pd
import pytest

from kgqa_nb.core import UsageError
from kgqa_nb.metrics import one_sided_test
from kgqa_nb.retriever_study import gt_vs_sp, retrieve_cli, retriever_study, train_retriever_cli
from kgqa_nb.subgraphrag import RetrievalInputError, two_hop_dataset
from kgqa_nb.text import HashingEncoder


def test_gt_vs_sp_tests_seed_means_and_pooled_questions():
    rng = np.random.default_rng(0)
    rows = [dict(retriever='subgraphrag', labels=lab, seed=s, id=f'q{i}', **{'gt_recall@10': float(rng.random() < p)})
            for lab, p in (('gt', 0.6), ('sp:synth-kgqa', 0.4)) for s in range(3) for i in range(50)]
    study = pd.DataFrame(rows)
    t = gt_vs_sp(study, ['gt_recall@10']).iloc[0]
    seeds = study.groupby(['labels', 'seed'])['gt_recall@10'].mean()
    assert t.p_value == one_sided_test(seeds['gt'], seeds['sp:synth-kgqa'])['p_value']
    pooled = [study[study.labels == lab]['gt_recall@10'].to_numpy() for lab in ('gt', 'sp:synth-kgqa')]
    assert t.p_value_questions == one_sided_test(*pooled)['p_value']
    assert t.p_value_questions < t.p_value  # 150 vs 150 scores against 3 vs 3 means


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
    monkeypatch.setattr(rsm, 'study_code', lambda reader=None: 'changedcode0')
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
        train_retriever_cli([*argv, '--cache-dir', str(tmp_path / 'data'), '--out', str(tmp_path / 'ck')])
    assert not (tmp_path / 'ck').exists() and not (tmp_path / 'data').exists()  # no checkpoint, no dataset built


@pytest.mark.parametrize('argv, flag', [(['--k', '-5'], '--k must be at least 1, not -5'), (['--k', '0'], '--k must be at least 1'),
                                        (['--max-triples', '0'], '--max-triples must be at least 1')])
def test_retrieve_cli_refuses_bad_flags_before_any_work(tmp_path, argv, flag):
    with pytest.raises(UsageError, match=flag):
        retrieve_cli([*argv, '--checkpoint', str(tmp_path / 'best.pt'), '--cache-dir', str(tmp_path / 'data'), '--out', str(tmp_path / 'top.jsonl')])
    assert not (tmp_path / 'top.jsonl').exists() and not (tmp_path / 'data').exists()


def test_kgqa_prints_one_line_on_stderr_and_exits_2(tmp_path, capsys):
    from kgqa_nb.cli import main
    assert main(['train-retriever', '--epochs', '0', '--out', str(tmp_path / 'ck')]) == 2
    out, err = capsys.readouterr()
    assert out == '' and err == 'kgqa: --epochs must be at least 1, not 0\n'
    assert main(['retrieve', '--checkpoint', str(tmp_path / 'missing.pt'), '--out', str(tmp_path / 'top.jsonl')]) == 2
    assert 'missing.pt' in capsys.readouterr().err


@pytest.mark.slow
def test_cli_train_then_retrieve(tmp_path):
    data = ['--n-questions', '60', '--n-nodes', '200', '--max-triples', '1500', '--cache-dir', str(tmp_path / 'data')]
    assert train_retriever_cli([*data, '--epochs', '1', '--out', str(tmp_path / 'ck')]) == 0
    assert (tmp_path / 'ck' / 'best.pt').exists()
    assert retrieve_cli([*data, '--checkpoint', str(tmp_path / 'ck' / 'best.pt'), '--k', '20', '--out', str(tmp_path / 'top.jsonl')]) == 0
    lines = (tmp_path / 'top.jsonl').read_text().splitlines()
    assert lines and all(len(json.loads(l)['triples']) <= 20 for l in lines)
    with pytest.raises(RetrievalInputError, match='unknown_labels'):
        train_retriever_cli([*data, '--labels', 'sp:nope', '--out', str(tmp_path / 'x')])
    assert not (tmp_path / 'x').exists()
