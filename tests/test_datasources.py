"""datasources.ensure_dataset: caching (a second call builds nothing), the folder lock (parallel processes build once, a killed holder
frees it), the zero-shot split rules on a generated dataset, and clear errors for missing published data."""
import json, os, signal, subprocess, sys, textwrap, time
from pathlib import Path

import pandas as pd
import pytest

from kgqa_nb import datasources
from kgqa_nb.core import LockTimeout
from kgqa_nb.dataset import SplitConfig, SplitResult, build_split, check_split, read_records

N = 60  # small generated datasets (a few seconds each on toyworld with the offline model)


def _mtimes(p: datasources.DatasetPaths) -> dict:
    return {f: f.stat().st_mtime_ns for f in (p.train, p.test, p.records, p.card, p.summary, p.split)}


def test_second_call_reuses_everything(tmp_path, monkeypatch):
    p = datasources.ensure_dataset(n_target=N, root=tmp_path)
    before = _mtimes(p)
    def boom(*a, **k): raise AssertionError('the pipeline ran again')
    monkeypatch.setattr(datasources, '_generate', boom)
    monkeypatch.setattr(datasources, '_write_split', boom)
    p2 = datasources.ensure_dataset(n_target=N, root=tmp_path)
    assert p2 == p and _mtimes(p2) == before
    # a different split rule reuses the generation run but must cut a new split (which we forbade above)
    with pytest.raises(AssertionError, match='ran again'): datasources.ensure_dataset(n_target=N, root=tmp_path, unseen_relation_share=0.2)
    # a different generation parameter gets its own folder
    with pytest.raises(AssertionError, match='ran again'): datasources.ensure_dataset(n_target=N, seed=1, root=tmp_path)


def test_split_files_obey_the_zero_shot_rules(tmp_path):
    p = datasources.ensure_dataset(n_target=200, root=tmp_path)
    info = json.loads(p.split.read_text())
    train, test, recs = read_records(p.train), read_records(p.test), read_records(p.records)
    assert len(train) > 0 and len(test) > 0 and len(train) + len(test) <= len(recs)
    cfg = info['split_config']
    # the files themselves, checked as a split
    res = SplitResult(train, test, info['unseen_relations'], list(cfg['unseen_graph_types']))
    assert check_split(res, cfg['answers_column']) == []
    # and rebuilding the split from the records with the recorded rules gives the same questions
    again = build_split(recs, SplitConfig(**{**cfg, 'unseen_graph_types': tuple(cfg['unseen_graph_types'])}))
    assert check_split(again, cfg['answers_column']) == []
    assert sorted(again.train['id']) == sorted(train['id']) and sorted(again.test['id']) == sorted(test['id'])
    assert set(train['test_type'].map(tuple)) == {('training',)}
    assert all(datasources.is_complex_type(t) for t in cfg['unseen_graph_types'])
    assert info['unseen_graph_types_rule'] == 'auto'
    card = p.card.read_text()
    assert '## Split rules' in card and ('NOT satisfied' in card) == bool(info['unsatisfied'])


_BUILDER = textwrap.dedent('''
    import json, os, sys, time
    from kgqa_nb import datasources
    root, log, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    real = datasources._generate
    def counted(folder, gen, kg, concurrency=None):
        with open(log, 'a') as f: f.write(f'{os.getpid()}\\n')
        time.sleep(1.0)  # widen the window in which the other process must wait
        return real(folder, gen, kg, concurrency)
    datasources._generate = counted
    p = datasources.ensure_dataset(n_target=n, root=root)
    print(json.dumps([str(p.train), str(p.test)]))
''')


def test_parallel_processes_build_once(tmp_path):
    log = tmp_path / 'builds.log'
    env = {**os.environ, 'KGQA_PROGRESS': '0'}
    procs = [subprocess.Popen([sys.executable, '-c', _BUILDER, str(tmp_path), str(log), str(N)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs): assert p.returncode == 0, e[-2000:]
    assert len(log.read_text().split()) == 1, 'both processes ran the generation pipeline'
    paths = [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]
    assert paths[0] == paths[1]
    assert Path(paths[0][0]).read_text() and Path(paths[0][1]).exists()


def test_a_killed_lock_holder_frees_the_lock(tmp_path):
    folder = tmp_path / 'locked'
    holder = subprocess.Popen([sys.executable, '-c', textwrap.dedent(f'''
        import time
        from kgqa_nb.core import folder_lock
        with folder_lock({str(folder)!r}):
            print('locked', flush=True); time.sleep(600)
    ''')], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'locked'
        with pytest.raises(LockTimeout):
            with datasources.folder_lock(folder, timeout=0.5): pass
    finally:
        holder.send_signal(signal.SIGKILL); holder.wait()
    with datasources.folder_lock(folder, timeout=5): pass


def test_bad_parameters_are_named(tmp_path):
    with pytest.raises(TypeError, match='not the string'): datasources.ensure_dataset(n_target=N, root=tmp_path, unseen_graph_types='(1)')
    with pytest.raises(TypeError, match='either a SplitConfig'): datasources.ensure_dataset(n_target=N, root=tmp_path, split=SplitConfig(), id_per_type=3)
    with pytest.raises(TypeError, match='unknown generation parameters'): datasources.generation_params(kg='toyworld', n_questions=3)
    with pytest.raises(ValueError, match='unknown source'): datasources.load_source('nope')


def test_published_gtsqa_missing_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv('KGQA_DATA', str(tmp_path))  # an empty data dir: no gtsqa/ folder
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    with pytest.raises(FileNotFoundError, match='GTSQA'): datasources.load_source('gtsqa')


def test_load_source_generated_matches_the_files(tmp_path):
    src = datasources.load_source('generated', n_target=N, root=tmp_path)
    assert src.name == 'generated' and 'offline' in src.llm_backend and src.kg.startswith('toyworld')
    pd.testing.assert_frame_equal(src.train, read_records(src.paths.train))
    assert len(src.all) == len(src.train) + len(src.test)


def test_the_kg_object_is_passed_down_not_loaded_again(tmp_path, monkeypatch):
    from kgqa_nb import loaders as kgm, synthkgqa
    toy = kgm.load_kg('toyworld')
    def no_load(*a, **k): raise AssertionError('the KG was loaded again')
    monkeypatch.setattr(datasources, 'load_kg', no_load); monkeypatch.setattr(synthkgqa, 'load_kg', no_load)
    p = datasources.ensure_dataset(kg=toy, n_target=N, root=tmp_path)
    assert len(read_records(p.records)) == N
    ctx = datasources.open_artifact('demo', kg=toy, n_target=N, out_dir=str(tmp_path))
    assert ctx.kg is toy and ctx.source.paths == datasources.ensure_dataset(kg=toy, n_target=N, root=tmp_path / 'results')


def test_a_graph_with_the_same_name_gets_its_own_dataset(tmp_path, monkeypatch):
    from kgqa_nb.loaders import load_kg
    toy = load_kg('toyworld')
    other = toy.drop_triples([0], name=toy.name)  # same name, one triple fewer
    built = []
    real = datasources._generate
    monkeypatch.setattr(datasources, '_generate', lambda folder, gen, kg, c=None: built.append(kg) or real(folder, gen, kg, c))
    a = datasources.ensure_dataset(kg=toy, n_target=20, root=tmp_path)
    b = datasources.ensure_dataset(kg=other, n_target=20, root=tmp_path)
    assert a.generation != b.generation and built == [toy, other]
    assert json.loads((a.generation / 'params.json').read_text())['kg_fingerprint'] != json.loads((b.generation / 'params.json').read_text())['kg_fingerprint']


def test_open_artifact_gives_records_folders_and_provenance(tmp_path):
    ctx = datasources.open_artifact('fig6_seeds_hops_answers', kg='toyworld', n_target=N, seed=0, backend='offline', model='',
                                    out_dir=str(tmp_path), convention='rog')
    assert ctx.results_dir == tmp_path / 'results' and ctx.figures_dir.is_dir()
    assert set(ctx.records.split) <= {'train', 'test'} and len(ctx.train) + len(ctx.test) == len(ctx.records)
    assert sorted(ctx.train.id) == sorted(read_records(ctx.source.paths.train).id)
    prov = ctx.prov
    assert prov['artifact'] == 'fig6_seeds_hops_answers' and prov['kg'] == ctx.kg.name and 'offline' in prov['llm_backend']
    assert prov['params']['convention'] == 'rog' and prov['params']['n_target'] == N  # everything the notebook passed is recorded
    test = datasources.open_artifact('x', kg=ctx.kg, n_target=N, out_dir=str(tmp_path), split='test', per_split=3, seed=0)
    assert len(test.records) == min(3, len(ctx.test)) and set(test.records.id) <= set(ctx.test.id)
    with pytest.raises(ValueError, match='split must be'): datasources.open_artifact('x', kg=ctx.kg, split='dev')
    with pytest.raises(FileNotFoundError, match='neither a known KG'): datasources.open_artifact('x', kg='no-such-kg')
