"""The committed trained store (`trained/<profile>/retriever-train-<key>/`, chapter 15c's `store_run`): what a retriever
study committed of its finished runs is complete, compact and readable, so a later session or a reviewer's rerun reads
it instead of training."""
import gzip, json
from pathlib import Path

import pytest
import torch

from kgqa_nb.core import project_dirs
from kgqa_nb.retriever_study import LISTED

STORES = sorted(project_dirs.root.glob('trained/*/retriever-train-*'))


def store_problems(store: Path) -> list:
    "What is wrong with a stored training folder: stray files, runs without their checkpoint, uncompacted or unfinished checkpoints."
    bad, runs = [], {f.name[:-len('.train.json')]: f for f in store.glob('*.train.json')}
    files = {f.relative_to(store).as_posix() for f in store.rglob('*') if f.is_file()}
    ckpts = {f for f in files if f.startswith('ckpt/') and (f.endswith('/last.pt') or f.endswith('/' + LISTED))}
    bad += [f'{store.name}/{f}: neither a run record nor its checkpoint' for f in sorted(files - ckpts - {f'{s}.train.json' for s in runs})]
    if len(ckpts) != len(runs): bad.append(f'{store.name}: {len(runs)} run records but {len(ckpts)} checkpoints')
    for f in runs.values():
        rec = json.loads(f.read_text())
        if not (rec['seconds'] >= 0 and rec['sessions'] >= 1 and rec['epochs'] >= 1): bad.append(f'{f.name}: {rec}')
    for f in store.glob('ckpt/*/last.pt'):
        ck = torch.load(f, map_location='cpu', weights_only=False)
        if ck['opt']['state']: bad.append(f'{f.parent.name}/last.pt: holds the optimiser moments (not compacted)')
        if not ck['state']['history'] or ck['state']['epoch'] != len(ck['state']['history']): bad.append(f'{f.parent.name}/last.pt: no curve')
    for f in store.glob(f'ckpt/*/{LISTED}'):
        kept = json.loads(gzip.decompress(f.read_bytes()))
        if not (kept['lists'] and kept['history']): bad.append(f'{f.parent.name}/{LISTED}: empty')
    return bad


@pytest.mark.skipif(not STORES, reason='no trained store committed yet')
def test_the_committed_stores_hold_finished_compact_runs():
    assert [p for s in STORES for p in store_problems(s)] == []


def test_a_planted_bad_store_is_caught(tmp_path):
    s = tmp_path / 'retriever-train-x'; (s / 'ckpt' / 'gt-0').mkdir(parents=True)
    (s / 'run-subgraphrag-gt-0.train.json').write_text(json.dumps(dict(seconds=5.0, sessions=1, epochs=2)))
    (s / 'run-subgraphrag-sp-0.train.json').write_text(json.dumps(dict(seconds=5.0, sessions=1, epochs=2)))  # no checkpoint
    w = {'w': torch.zeros(2)}
    torch.save(dict(run_key='k', model=w, opt=dict(state={0: {'exp_avg': torch.zeros(2)}}, param_groups=[]),
                    state=dict(epoch=2, history=[{}, {}], best_state=w, done=True)), s / 'ckpt' / 'gt-0' / 'last.pt')
    (s / 'ckpt' / 'gt-0' / 'best.pt').write_bytes(b'')  # the cache's file, not the store's
    assert store_problems(s) == ['retriever-train-x/ckpt/gt-0/best.pt: neither a run record nor its checkpoint',
                                 'retriever-train-x: 2 run records but 1 checkpoints', 'gt-0/last.pt: holds the optimiser moments (not compacted)']


def test_a_store_the_study_writes_passes(tmp_path):
    import pandas as pd
    from kgqa_nb.retriever_study import retriever_study
    from kgqa_nb.subgraphrag import two_hop_dataset
    from kgqa_nb.text import HashingEncoder
    kg, recs, graphs = two_hop_dataset(16, n_distractors=6, shortcut=True, seed=2)
    df = pd.DataFrame(recs).assign(split=['train'] * 12 + ['test'] * 4)
    retriever_study(kg, df, graphs, HashingEncoder(dim=32), tmp_path / 'cache', seeds=(0,), ks=(3,), train_cfg=dict(epochs=2, val_metric=None),
                    retrievers=('subgraphrag',), root=tmp_path / 'emb', store=tmp_path / 'store')
    stores = list((tmp_path / 'store').glob('retriever-train-*'))
    assert len(stores) == 1 and len(list(stores[0].glob('*.train.json'))) == 2 and store_problems(stores[0]) == []
