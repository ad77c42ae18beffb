"""benchmarks/gpu_check.py (`make gpu-check`): its CPU dry run (`--device cpu --tiny`, every section at tiny size, the CPU
standing in for the accelerator) in a subprocess, its refusals, the parity check against the committed CPU table, and the
real check on CUDA where there is a GPU."""
import importlib.util, json, math, os, subprocess, sys
from pathlib import Path

import pytest

from kgqa_nb.core import project_dirs

SCRIPT = project_dirs.root / 'benchmarks' / 'gpu_check.py'


def load_script():
    "The script as a module (it lives outside the package)."
    spec = importlib.util.spec_from_file_location('gpu_check', SCRIPT); mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_script(*args, timeout=900):
    env = {**os.environ, 'KGQA_PROGRESS': '0', 'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS', '1')}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=project_dirs.root)


def numbers(x, path=''):
    "(path, value) of every number in a JSON value."
    if isinstance(x, bool) or x is None or isinstance(x, str): return
    if isinstance(x, (int, float)): yield path, x; return
    items = x.items() if isinstance(x, dict) else enumerate(x)
    for k, v in items: yield from numbers(v, f'{path}.{k}')


def check_report(rep: dict, device_type: str):
    "Every section present and green, its parity checks true, every figure finite, both sides measured."
    mod = load_script()
    assert rep['device_type'] == device_type and rep['ok'] is True and rep['complete'] is True
    assert list(rep['sections']) == list(mod.SECTIONS)
    for name, sec in rep['sections'].items():
        assert sec['ok'] is True and 'error' not in sec, (name, sec.get('error'))
        assert sec['checks'] and all(v is True for v in sec['checks'].values()), (name, sec['checks'])
    bad = [(p, v) for p, v in numbers(rep['sections']) if not math.isfinite(v)]
    assert not bad, bad
    for name in ('ultra', 'ultrag', 'subgraphrag', 'sr', 'text', 'pathgen'):
        sec = rep['sections'][name]
        assert sec['cpu']['device'] == 'cpu' and sec['accelerator']['device'].startswith(device_type), name
    s = rep['sections']
    assert s['ultra']['checks']['parity_cpu_vs_accelerator'] and s['ultra']['max_metric_diff'] <= mod.TOL
    assert s['ultra']['cpu']['seconds_per_batch'] > 0 and s['ultra']['test_set']['ranked'] == 2 * s['ultra']['test_set']['queries']
    assert s['ultrag']['checks']['parity_memberships'] and s['ultrag']['accelerator']['total_s'] > 0
    assert s['ultrag']['mean_sub_entities'] <= s['ultrag']['k']
    for name in ('subgraphrag', 'sr'): assert s[name]['accelerator']['questions_per_s'] > 0 and s[name]['checks']['weights_finite']
    assert s['text']['checks']['parity_vectors'] and s['text']['min_cosine'] > 0.999
    pg = s['pathgen']  # the hf: generator path: LoRA lowers the loss on both devices, GCR stays inside its trie, bfloat16 on CUDA
    assert all(pg[x]['loss_last'] < pg[x]['loss_first'] and pg[x]['gcr_sequences'] > 0 for x in ('cpu', 'accelerator'))
    assert pg['accelerator']['dtype'] == ('bfloat16' if device_type == 'cuda' else 'float32')
    assert [a['artifact'] for a in s['rerun']['artifacts']] == mod.device_artifacts() and s['rerun']['device'].startswith(device_type)


@pytest.mark.data('ilpc2022')
def test_cpu_dry_run(tmp_path):
    "The dry run covers every section, passes every check and leaves benchmarks/results/gpu.json alone."
    real = project_dirs.root / 'benchmarks' / 'results' / 'gpu.json'
    before = real.read_bytes() if real.exists() else None
    p = run_script('--device', 'cpu', '--tiny', '--out', str(tmp_path / 'gpu.json'), '--work', str(tmp_path / 'work'))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rep = json.loads((tmp_path / 'gpu.json').read_text())
    check_report(rep, 'cpu')
    assert rep['tiny'] is True and rep['provenance']['params']['device'] == 'cpu'
    assert 'all checks hold' in p.stdout and 'rerun' in p.stdout  # the printed table
    assert (real.read_bytes() if real.exists() else None) == before
    assert set(rep['sections']['rerun']['checks']) >= {'ultra_ilpc_zero_shot_ok', 'retriever_study_ok', 'ultra_ilpc_zero_shot_ran_on_device'}
    # --merge joins runs that split the sections (a lease too small to carry every input at once) into the same report
    parts = [('ultra', 'ultrag'), ('subgraphrag', 'sr', 'text', 'rerun'), ('pathgen',)]
    for i, names in enumerate(parts):
        (tmp_path / f'part{i}.json').write_text(json.dumps({**rep, 'sections': {n: rep['sections'][n] for n in names}}))
    m = run_script('--merge', str(tmp_path / 'part0.json'), str(tmp_path / 'part1.json'), '--out', str(tmp_path / 'first.json'),
                   '--note', 'first lease', timeout=120)
    assert m.returncode == 1 and 'FAILED (merged from 2 runs)' in m.stdout, m.stderr  # a section missing: not complete
    # a merged report merges again with a later run (a section added after the first lease): its parts and notes are kept
    m = run_script('--merge', str(tmp_path / 'first.json'), str(tmp_path / 'part2.json'), '--out', str(tmp_path / 'merged.json'),
                   '--note', 'second lease', timeout=120)
    assert m.returncode == 0 and 'merged from 3 runs' in m.stdout, m.stderr  # the runs behind the merged report count
    merged = json.loads((tmp_path / 'merged.json').read_text())
    check_report(merged, 'cpu')
    assert merged['sections'] == rep['sections'] and [x['sections'] for x in merged['parts']] == [list(n) for n in parts]
    assert merged['notes'] == ['first lease', 'second lease']
    twice = run_script('--merge', str(tmp_path / 'part0.json'), str(tmp_path / 'part0.json'), '--out', str(tmp_path / 'm2.json'), timeout=120)
    assert twice.returncode == 2 and 'more than one report' in twice.stderr and not (tmp_path / 'm2.json').exists()
    (tmp_path / 'other.json').write_text(json.dumps({**rep, 'device': 'NVIDIA H200', 'sections': {'text': rep['sections']['text']}}))
    other = run_script('--merge', str(tmp_path / 'part0.json'), str(tmp_path / 'other.json'), '--out', str(tmp_path / 'm3.json'), timeout=120)
    assert other.returncode == 2 and "differ in 'device'" in other.stderr
    assert (real.read_bytes() if real.exists() else None) == before


def test_dry_run_never_writes_the_real_report(tmp_path):
    "A dry run pointed at benchmarks/results/gpu.json is refused in one line, before anything runs."
    p = run_script('--device', 'cpu', '--tiny', '--out', str(project_dirs.root / 'benchmarks' / 'results' / 'gpu.json'),
                   '--work', str(tmp_path / 'work'), timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count('\n') == 0 and 'holds the real run only' in p.stderr, p.stderr
    assert not (tmp_path / 'work').exists()


def test_refuses_a_work_folder_in_use(tmp_path):
    "A --work folder holding files is refused in one line and left as it was (the default folder alone is emptied)."
    (tmp_path / 'mine.txt').write_text('keep')
    p = run_script('--device', 'cpu', '--tiny', '--out', str(tmp_path / 'gpu.json'), '--work', str(tmp_path), timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count('\n') == 0 and 'is not empty' in p.stderr, p.stderr
    assert (tmp_path / 'mine.txt').read_text() == 'keep' and not (tmp_path / 'gpu.json').exists()


def test_refuses_cuda_without_a_gpu(tmp_path):
    "Asked for CUDA on a machine without it, the script says so in one line and exits 2."
    import torch
    if torch.cuda.is_available(): pytest.skip('this machine has CUDA: the refusal cannot happen here')
    p = run_script('--device', 'cuda', '--out', str(tmp_path / 'gpu.json'), timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count('\n') == 0, p.stderr
    assert 'CUDA is not available' in p.stderr and '--device cpu --tiny' in p.stderr
    assert not (tmp_path / 'gpu.json').exists()


def test_parity_against_the_companion_table():
    "The whole-test-set check: the committed CPU numbers give a difference of 0, a shift of 2e-4 fails the 1e-4 tolerance."
    import pandas as pd
    mod = load_script()
    t = pd.read_csv(mod.COMPANION_ULTRA)
    t = t[(t.checkpoint == 'ultra_3g') & t.full_test_set.astype(bool)].set_index('direction')
    keys = ('mrr', 'hits@1', 'hits@3', 'hits@10')
    same = {d: {k: float(t.loc[d, k]) for k in keys} for d in ('tail', 'head', 'both')}
    assert mod.companion_diff(same) == 0.0
    shifted = {d: {k: v + (2e-4 if (d, k) == ('head', 'hits@3') else 0.0) for k, v in m.items()} for d, m in same.items()}
    assert mod.TOL < mod.companion_diff(shifted) < 3e-4


@pytest.mark.gpu
@pytest.mark.data('ilpc2022')
def test_real_check_on_cuda(tmp_path):
    "On a GPU box: the real check (every section at its real size on CUDA) passes, with a CUDA device name in the report."
    p = run_script('--device', 'cuda', '--out', str(tmp_path / 'gpu.json'), '--work', str(tmp_path / 'work'), timeout=1800)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rep = json.loads((tmp_path / 'gpu.json').read_text())
    check_report(rep, 'cuda')
    assert rep['tiny'] is False and rep['cuda'] and rep['device'] != 'cpu'
    assert rep['sections']['ultra']['test_set']['whole'] and rep['sections']['ultra']['checks']['parity_test_set_vs_companion_cpu']
    assert rep['sections']['ultrag']['k'] == 30_000


def test_committed_gpu_report():
    "benchmarks/results/gpu.json, once committed, is a complete green CUDA run: a CUDA device, ULTRA parity within 1e-4, ULTRAG latency."
    path = project_dirs.root / 'benchmarks' / 'results' / 'gpu.json'
    if not path.exists(): pytest.skip('no GPU run committed yet')
    rep = json.loads(path.read_text())
    check_report(rep, 'cuda')
    assert rep['tiny'] is False and 'NVIDIA' in rep['device'] and rep['cuda']
    u, g = rep['sections']['ultra'], rep['sections']['ultrag']
    assert u['max_metric_diff'] <= 1e-4 and u['test_set']['whole'] and u['test_set']['max_diff_vs_companion_cpu'] <= 1e-4
    assert g['k'] == 30_000 and 0 < g['accelerator']['total_s'] and g['paper_latency_s'] == 0.10
