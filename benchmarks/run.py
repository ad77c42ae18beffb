"""Run the benchmarks (`make bench`): each benchmarks/bench_<topic>.py defines run(quick: bool = False) -> dict.
Results go to benchmarks/results/<topic>.json with a provenance record (machine, versions, commit).
A topic whose module sets `ON_DEMAND = True` (e.g. `scale`) runs only when named: `--only scale`."""
import argparse, importlib.util, json, sys, traceback
from pathlib import Path

from kgqa_nb.core import Timer, project_dirs, provenance

HERE = Path(__file__).resolve().parent

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('--only', nargs='*', help='topics to run (file names without bench_ / .py)')
    ap.add_argument('--quick', action='store_true', help='small sizes (a check that the benchmarks run)')
    ap.add_argument('--out', default=None, help='folder for the JSON results (default: benchmarks/results, or _smoke/bench with --quick)')
    a = ap.parse_args(argv)
    files = sorted(HERE.glob('bench_*.py'))
    if a.only: files = [f for f in files if f.stem[6:] in a.only]
    out = Path(a.out) if a.out else (project_dirs.scratch / 'bench' if a.quick else HERE / 'results'); out.mkdir(parents=True, exist_ok=True); failed = []
    for f in files:
        topic = f.stem[6:]
        spec = importlib.util.spec_from_file_location(f.stem, f); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
        if getattr(mod, 'ON_DEMAND', False) and not (a.only and topic in a.only):
            print(f'== {topic}: on demand only (run it with --only {topic})', flush=True); continue
        print(f'== {topic}', flush=True)
        try:
            with Timer() as t: res = mod.run(quick=a.quick)
        except Exception:
            traceback.print_exc(); failed.append(topic); continue
        rec = dict(topic=topic, quick=a.quick, seconds=round(t.s, 1), results=res, provenance=provenance(dict(quick=a.quick), benchmark=topic))
        (out / f'{topic}.json').write_text(json.dumps(rec, indent=1, default=str) + '\n')
        print(json.dumps(res, indent=1, default=str), flush=True)
    if failed: print('failed:', failed); return 1
    return 0

if __name__ == '__main__': sys.exit(main())
