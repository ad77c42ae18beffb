"""`make gpu-study`'s dry run (issue 36, item 5): benchmarks/gpu_study.py --device cpu --tiny runs the GPU route's code on the
CPU at toy sizes: the shared inputs built once, two training processes side by side that split the study's runs between
them (each run trained once), the runs table read back from the cache. Without CUDA the real route refuses in one line."""
import json, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / 'benchmarks' / 'gpu_study.py'


def run(*args, tmp):
    env = {**os.environ, 'KGQA_PROGRESS': '0', 'OMP_NUM_THREADS': '1', 'KGQA_CACHE': str(tmp / 'cache')}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


def committed_store() -> set:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / 'trained').rglob('*')} if (ROOT / 'trained').exists() else set()


def test_the_dry_run_trains_every_run_once_in_two_processes(tmp_path):
    before = committed_store()
    res = run('--device', 'cpu', '--tiny', '--workers', '2', '--out', str(tmp_path / 'study'), tmp=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary['worker_exit_codes'] == [0, 0] and summary['missing'] == []
    assert summary['runs'] == summary['distinct'] == 3 + 2 * 2  # PPR, embedding, random; SubgraphRAG and SR x GT/SP x 1 seed
    assert not list((ROOT / 'results').glob('gpu*'))  # the dry run publishes nothing
    assert committed_store() == before  # and writes nothing into the committed trained store


def test_the_route_refuses_what_it_cannot_do_in_one_line(tmp_path):
    import torch
    if not torch.cuda.is_available():
        res = run('--device', 'cuda', tmp=tmp_path)
        assert res.returncode == 2 and 'no CUDA device here' in res.stderr and res.stderr.count('\n') == 1
    res = run('--device', 'cpu', tmp=tmp_path)  # the reference step at paper size on the CPU
    assert res.returncode == 2 and 'takes days' in res.stderr
    res = run('--workers', '0', tmp=tmp_path)
    assert res.returncode == 2 and '--workers must be at least 1' in res.stderr


def test_the_cpu_route_is_the_cheaper_step():
    "The companion profile (the fidelity-checked cheaper step) may train on the CPU (make companion-study); the gpu profile's reference step may not."
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_study
    companion, gpu = (gpu_study.study_parameters(n, 'cpu', False, '/tmp/x') for n in ('companion', 'gpu'))
    assert gpu_study.cpu_refusal(companion, 'companion', 'cpu', False) == ''
    assert 'takes days' in gpu_study.cpu_refusal(gpu, 'gpu', 'cpu', False)
    assert gpu_study.cpu_refusal(gpu, 'gpu', 'cpu', True) == gpu_study.cpu_refusal(gpu, 'gpu', 'cuda', False) == ''
    with_rog = dict(companion, rog_generator='gemma')  # the companion study leaves RoG out (rog_generator ''); naming a generator adds its arms
    assert ('rog', 'sp:synth-kgqa', 4) in gpu_study.expected_runs(with_rog) and not any(r == 'rog' for r, _, _ in gpu_study.expected_runs(companion))
    assert not any(r == 'rog' for r, _, _ in gpu_study.expected_runs(gpu))
