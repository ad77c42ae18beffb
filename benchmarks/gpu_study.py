"""The retriever study's GPU route (`make gpu-study`, issue 36 item 5): SubgraphRAG and SR trained with the reference step
(one question per Adam step, every triple of the question graph in the loss) at 20,000-triple graphs, 5 seeds x GT/SP
each, on one GPU, with the `gpu` profile's parameters (params/gpu.yaml).

How it runs:
1. The parent opens the study once with the training-free references only (`retrievers: []`): that builds, once, what
   every training run shares and caches it (the generated questions and their filter, the question graphs, the text
   features), and scores PPR, embedding and random.
2. `--workers` processes open the same study side by side on the device. The study's runs are locked one by one
   (`retriever_study` claims a run before training it), so each run is trained by exactly one process, each still one
   question per step; a process that finds nothing left to claim waits for the others' runs and exits.
3. The parent reruns the study artifacts with `kgqa rerun --profile gpu` (they read the filled cache: nothing retrains)
   into results/gpu/ and figures/gpu/.

`--device cpu --tiny` is the dry run of the same route (tests/test_gpu_study.py): a 300-question toy-world study, one seed,
a few epochs, two processes, no rerun; it prints the runs table and writes nothing under results/. The exit status is 0
when every run is in the table once, 1 otherwise, 2 on bad input.

Budget on one H100/H200 (not measured here: this machine has no GPU): question graphs and features are CPU work on the
box's cores before the GPU is busy; each training run is 3,000 single-question steps an epoch on 20,000-triple graphs.
"""
import argparse, json, os, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STUDY_ARTIFACTS = ('retriever_study', 'table4_gt_vs_sp', 'fig14_metric_vs_k', 'fig12_gap_by_group')
TINY = dict(source='generated', kg='toyworld', n_questions=300, n_nodes=200, max_triples=1000, n_seeds=1, epochs=3, patience=1,
            sr_epochs=2, answerability='', min_multi_hop=0.0, reader_ks=[10, 50], second_reader='', rog_generator='',
            trained_store='')  # the dry run's sizes; its runs stay in its scratch cache, never in the committed store


def study_parameters(profile: str, device: str, tiny: bool, out_dir: str) -> dict:
    "The study's parameters: the profile's section on the notebook's defaults, the device, and the dry run's sizes."
    from kgqa_nb.profiles import check_profile, full_params, load_manifest
    p = full_params(load_manifest()['retriever_study'], check_profile(profile)['retriever_study'])
    return {**p, **(TINY if tiny else {}), 'device': device, 'out_dir': out_dir, 'threads': 1 if device == 'cpu' else 0}


def rog_listing(p: dict) -> dict:
    "RoG's arm as the study notebook builds it (`benchmark.rog_study_listing`, the same cache key), or {} when the profile names no generator."
    from kgqa_nb.benchmark import rog_study_listing
    return rog_study_listing(p.get('rog_generator', ''), p.get('rog_steps', 0), p.get('rog_batch_size', 0), p.get('rog_lr', 0.), p.get('rog_beams', 5),
                             p.get('threads', 0), p.get('rog_lora_rank', 0))[0]


def open_the_study(p: dict, rog: bool = True, **changes):
    "The study of `p` (with `changes`; RoG's arm when the profile names one and `rog`), trained where its cache lacks a run this process can claim."
    from kgqa_nb.filters import dataset_filters
    from kgqa_nb.readers import make_reader
    from kgqa_nb.retriever_study import open_study
    return open_study('retriever_study', {**p, **changes}, make_reader, p['out_dir'], make_filters=dataset_filters,
                      **({'listing': rog_listing(p)} if rog and p.get('rog_generator') else {}))


def worker(params_file: str) -> int:
    "One training process: claims runs of the study until none is left, waits for the others' runs."
    p = json.loads(Path(params_file).read_text())
    t0 = time.time()
    open_the_study(p)
    print(f'worker {os.getpid()}: done in {time.time() - t0:.0f} s', flush=True)
    return 0


def expected_runs(p: dict) -> set:
    "(retriever, labels, seed) of every run the study's table must hold once."
    from kgqa_nb.retriever_study import REFERENCE_RETRIEVERS
    from kgqa_nb.subgraphrag import label_key
    arms = [label_key(a) for a in p['labels']]
    trained = [*p['retrievers'], *(['rog'] if p.get('rog_generator') else [])]
    return {(r, 'none', 0) for r in REFERENCE_RETRIEVERS} | {(r, a, s) for r in trained for a in arms for s in range(int(p['n_seeds']))}


def cpu_refusal(p: dict, profile: str, device: str, tiny: bool) -> str:
    "Why this study must not train on `device` ('' when it may): the reference step on the CPU takes days; the cheaper step is the CPU route."
    if device != 'cpu' or tiny or p.get('neg_sample'): return ''
    return (f'profile {profile} trains with the reference step, which takes days on the CPU; use --device cuda, '
            'a profile with the cheaper step (--profile companion), or --tiny for the dry run')


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--device', default='cuda', help='cuda (the route), cuda:N, or cpu (the dry run, with --tiny)')
    ap.add_argument('--workers', type=int, default=10, help='training processes side by side on the device')
    ap.add_argument('--tiny', action='store_true', help='the dry run: toy sizes, no rerun, nothing under results/')
    ap.add_argument('--profile', default='gpu')
    ap.add_argument('--out', default='', help='the study cache folder (default: the profile\'s output folder; the dry run: a scratch folder)')
    ap.add_argument('--no-rerun', action='store_true', help='train and print the runs table, but do not rerun the study artifacts (a study that spans sessions)')
    ap.add_argument('--worker', default='', help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker: return worker(a.worker)
    if a.workers < 1: print('gpu_study: --workers must be at least 1', file=sys.stderr); return 2
    import torch
    if a.device.startswith('cuda') and not torch.cuda.is_available():
        print('gpu_study: no CUDA device here (torch.cuda.is_available() is False); the dry run is --device cpu --tiny', file=sys.stderr); return 2
    from kgqa_nb.core import project_dirs
    from kgqa_nb.profiles import output_root
    out = a.out or str(project_dirs.scratch / 'gpu-study-dry-run' if a.tiny else output_root(a.profile))
    p = study_parameters(a.profile, a.device, a.tiny, out)
    if (why := cpu_refusal(p, a.profile, a.device, a.tiny)): print(f'gpu_study: {why}', file=sys.stderr); return 2
    t0 = time.time()
    open_the_study(p, rog=False, retrievers=[])  # step 1: the shared inputs, built once, and the references
    prepared = time.time() - t0
    pfile = Path(out) / 'gpu_study.params.json'; pfile.parent.mkdir(parents=True, exist_ok=True)
    pfile.write_text(json.dumps(p, default=list))
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')])}
    procs = [subprocess.Popen([sys.executable, __file__, '--worker', str(pfile)], env=env) for _ in range(a.workers)]  # step 2
    codes = [pr.wait() for pr in procs]
    trained = time.time() - t0 - prepared
    study = open_the_study(p).study  # every run is cached now: this reads them
    runs = study.drop_duplicates(['retriever', 'labels', 'seed'])
    have = [(r.retriever, r.labels, int(r.seed)) for r in runs.itertuples()]
    missing = expected_runs(p) - set(have)
    cols = [c for c in ('retriever', 'labels', 'seed', 'epochs', 'train_seconds', f"val_gt_recall@{p.get('gate_k', 100)}") if c in runs]
    print(runs[cols].to_string(index=False))
    print(json.dumps(dict(device=a.device, workers=a.workers, worker_exit_codes=codes, prepare_s=round(prepared, 1), train_s=round(trained, 1),
                          runs=len(have), distinct=len(set(have)), missing=sorted(missing))))
    if any(codes) or missing or len(set(have)) != len(have): return 1
    if a.tiny or a.no_rerun: return 0
    cmd = [sys.executable, '-m', 'kgqa_nb.cli', 'rerun', '--profile', a.profile, '--only', *STUDY_ARTIFACTS]  # step 3
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == '__main__': sys.exit(main())
