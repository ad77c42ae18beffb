"""Re-execute library chapters so that they are committed with their outputs (`make chapters`).

    python tools/run_chapters.py                          # every library chapter (the notebooks with `#| default_exp`)
    python tools/run_chapters.py nbs/00_core.ipynb ...    # some of them, in place
    python tools/run_chapters.py --out DIR nbs/X.ipynb    # write the executed copies to DIR instead (the freshness test)
    python tools/run_chapters.py --sample 2 --out DIR     # the freshness test's rotating sample (chosen by the commit)

It runs cells the way `nbdev_test` does: execnb's CaptureShell in a fresh process per notebook, working directory nbs/,
cells skipped when they carry a test flag of settings.ini (`tst_flags`) that is not enabled. `data` is enabled when the data
dir (kgqa_nb.core.data_dir()) exists; `--flags` enables more (e.g. `--flags slow`). A skipped cell gets no output.
The environment is fixed (KGQA_PROGRESS=0, PYTHONHASHSEED=0, TZ=UTC, IN_TEST=1) and outputs are made machine-independent:
the data, checkpoint and cache folders become $KGQA_DATA, $KGQA_CKPTS and $KGQA_CACHE, the repository becomes '..' (the
notebook's own working directory is nbs/), temporary folders become <tmp>, memory addresses 0x…, and progress bars,
%time lines and a long run's status lines (`kgqa generate: N candidates done …`, printed only when a cache is cold) are
dropped. Then the notebook is cleaned with nbdev_clean. A failing cell stops that notebook, which is left unchanged, and the
tool exits with status 1 after the others.
"""
import argparse, json, os, random, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / 'nbs'


def library_chapters() -> list:
    "Notebooks of nbs/ that export a module (have a `#| default_exp` cell), in notebook order."
    out = []
    for nb in sorted(NBS.glob('*.ipynb')):
        cells = json.loads(nb.read_text())['cells']
        if any(re.match(r'\s*#\|\s*default_exp\s', ''.join(c['source'])) for c in cells if c['cell_type'] == 'code'): out.append(nb)
    return out


def skip_flags(extra=()) -> set:
    "Test flags whose cells are skipped: settings.ini's tst_flags minus 'data' (when the data dir exists) and `extra`."
    from nbdev.config import get_config
    from kgqa_nb.core import data_dir
    enabled = set(extra) | ({'data'} if data_dir().exists() else set())
    return set(get_config().tst_flags.split()) - enabled


def replacements() -> list:
    "(pattern, replacement) pairs that make an output independent of the machine: `core.path_replacements` (the repository as '..'), memory addresses."
    from kgqa_nb.core import path_replacements
    return path_replacements(root_as='..') + [(re.compile(r'\b0x[0-9a-fA-F]{6,}\b'), '0x…')]


def rotating_sample(n: int = 2,  # chapters to pick
                    key: str | None = None) -> list:  # what chooses them (default: the commit checked out)
    "`n` library chapters for the freshness test: the same for a given commit, others for the next one."
    from kgqa_nb.core import git_state
    key = key or git_state()['commit'] or 'no-commit'
    return sorted(random.Random(key).sample(library_chapters(), n))


TIMINGS_LINE = re.compile(r'(CPU times|Wall time|timings):')  # %time's lines and a command's own timings line (kgqa ultrag ask)


def normalise_text(s: str, reps) -> str:
    "Apply the machine-independence replacements and drop timing lines (%time, a command's `timings:` line)."
    for pat, rep in reps: s = pat.sub(rep, s)
    return ''.join(l for l in s.splitlines(keepends=True) if not TIMINGS_LINE.match(l))


STATUS_LINE = re.compile(r'kgqa [\w-]+: \d+ candidates done')  # `runs.StatusLine`'s lines on a non-terminal stderr


def normalise_outputs(outputs: list, reps) -> list:
    "A cell's outputs with progress bars and run status lines dropped and every text normalised (images are left as they are)."
    out = []
    for o in outputs:
        if o.get('output_type') == 'stream':
            text = ''.join(o['text']) if isinstance(o['text'], list) else o['text']
            if '\r' in text or re.search(r'\d+it/s|it/s\]', text): continue  # a progress bar
            if o.get('name') == 'stderr':  # a long run's status lines: printed only when a cache was cold, so not part of the chapter
                text = ''.join(l for l in text.splitlines(keepends=True) if not STATUS_LINE.match(l))
            text = normalise_text(text, reps)
            if not text: continue
            o = {**o, 'text': text.splitlines(keepends=True)}
        elif o.get('output_type') in ('execute_result', 'display_data'):
            if 'application/vnd.jupyter.widget-view+json' in o.get('data', {}): continue  # a tqdm widget
            data = {k: (normalise_text(''.join(v) if isinstance(v, list) else v, reps).splitlines(keepends=True) if k.startswith('text') else v)
                    for k, v in o.get('data', {}).items()}
            o = {**o, 'data': data}
        out.append(o)
    return out


def execute_one(src: Path, dest: Path, skip: set) -> bool:
    "Run the notebook `src` (working directory nbs/), normalise its outputs, write it to `dest` and clean it; False on a failure."
    from execnb.nbio import read_nb, write_nb
    from execnb.shell import CaptureShell
    from fastcore.xtras import working_directory
    from nbdev.clean import nbdev_clean
    from nbdev.process import extract_directives

    nb = read_nb(src)
    def no_run(cell):
        if cell.cell_type != 'code': return True
        if 'nbdev_export' + '(' in cell.source: return True
        d = extract_directives(cell, remove=False)
        if d.get('eval:', [''])[0].lower() == 'false': return True
        return bool(skip & d.keys())
    for c in nb.cells:
        if c.cell_type == 'code': c.outputs = []
    shell = CaptureShell(src, mpl_format='png')
    try:
        with working_directory(NBS): shell.run_all(nb, exc_stop=True, preproc=no_run)
    except Exception:
        sys.stderr.write(shell.prettytb(fname=src) + '\n')
        return False
    reps = replacements()
    for c in nb.cells:
        if c.cell_type == 'code': c.outputs = normalise_outputs([dict(o) for o in c.get('outputs', [])], reps)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_nb(nb, dest)
    with working_directory(ROOT): nbdev_clean(fname=str(dest))
    return True


def child_env() -> dict:
    "The fixed environment chapters run in."
    return {**os.environ, 'KGQA_PROGRESS': '0', 'PYTHONHASHSEED': '0', 'TZ': 'UTC', 'IN_TEST': '1', 'HF_HUB_OFFLINE': '1',
            'TOKENIZERS_PARALLELISM': 'false', 'MPLBACKEND': 'agg'}


def run(notebooks, out=None, flags=()) -> int:
    "Execute each notebook in its own process; returns the number that failed."
    skip, failed = skip_flags(flags), 0
    for nb in notebooks:
        nb = Path(nb).resolve(); dest = Path(out).resolve() / nb.name if out else nb
        print(f'{nb.relative_to(ROOT) if nb.is_relative_to(ROOT) else nb} -> {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}'
              f'  (skipping cells flagged {" ".join(sorted(skip)) or "nothing"})', flush=True)
        res = subprocess.run([sys.executable, __file__, '--one', str(nb), str(dest), '--skip', *sorted(skip)], env=child_env(), cwd=ROOT)
        if res.returncode: failed += 1; print(f'FAILED: {nb.name} (left unchanged)', file=sys.stderr, flush=True)
    return failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('notebooks', nargs='*', help='notebooks to execute (default: every library chapter)')
    ap.add_argument('--out', help='write executed copies to this folder instead of in place')
    ap.add_argument('--flags', nargs='*', default=[], help='test flags to enable besides data, e.g. slow')
    ap.add_argument('--sample', type=int, metavar='N', help="N chapters chosen by the commit checked out (the freshness test's sample)")
    ap.add_argument('--one', nargs=2, metavar=('SRC', 'DEST'), help=argparse.SUPPRESS)
    ap.add_argument('--skip', nargs='*', default=[], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one: return 0 if execute_one(Path(a.one[0]), Path(a.one[1]), set(a.skip)) else 1
    if a.sample is not None and (a.sample < 1 or a.notebooks): ap.error('--sample takes a number of chapters >= 1 and no notebook names')
    nbs = rotating_sample(a.sample) if a.sample else [Path(n) for n in a.notebooks] or library_chapters()
    bad = [n for n in nbs if not Path(n).is_file()]
    if bad: ap.error(f'no such notebook: {", ".join(map(str, bad))}')
    return 1 if run(nbs, a.out, a.flags) else 0


if __name__ == '__main__': sys.exit(main())
