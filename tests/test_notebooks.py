"""Checks over the notebooks themselves: artifact notebooks declare exactly one typed, documented parameters cell that
papermill can read, every artifact is in the manifest, profiles only set declared parameters, and the harness runs one;
every library chapter is committed with its outputs (all checked for structure, a rotating sample re-executed); committed
results name their profile and hold no path of this machine."""
import json, re, subprocess, sys
from pathlib import Path

import papermill as pm
import pytest

from kgqa_nb.core import load_profile, project_dirs
from kgqa_nb.profiles import check_profile, load_manifest, notebook_parameters, parameters_cells
from kgqa_nb.rerun import run_artifact

MANIFEST = load_manifest()
ARTIFACT_NBS = sorted(p for p in project_dirs.nbs.glob('*.ipynb') if re.match(r'[5-9]\d_', p.name))


def test_every_artifact_notebook_is_in_the_manifest():
    listed = {a.notebook.resolve() for a in MANIFEST.values()}
    assert [p.name for p in ARTIFACT_NBS if p.resolve() not in listed] == []
    assert all(a.notebook.exists() for a in MANIFEST.values())


@pytest.mark.parametrize('nb', ARTIFACT_NBS, ids=lambda p: p.stem)
def test_artifact_has_one_typed_documented_parameters_cell(nb):
    assert len(parameters_cells(json.loads(nb.read_text()))) == 1
    params = notebook_parameters(nb)
    assert 'out_dir' in [p.name for p in params]
    for p in params: assert p.type and p.help, f'{nb.name}: parameter {p.name} needs a type and a # help comment'
    inferred = pm.inspect_notebook(str(nb))  # what `papermill --help-notebook` shows
    assert sorted(inferred) == sorted(p.name for p in params)
    for p in params: assert inferred[p.name]['help'], f'papermill could not read the help of {p.name}'


NOT_PROFILES = {'manifest', 'claims', 'reproduce', 'cards'}  # params/ also holds the artifact manifest, the paper claims, the reproduce tolerances and the book's result cards
PROFILES = sorted(p.stem for p in project_dirs.params.glob('*.yaml') if p.stem not in NOT_PROFILES)


@pytest.mark.parametrize('profile', PROFILES)
def test_profiles_only_set_declared_parameters(profile):
    "Every profile passes the harness's check: known artifacts, declared parameters, values of the declared type."
    assert set(check_profile(profile)) == set(MANIFEST)


def test_companion_profile_covers_every_artifact_on_codex_m_offline():
    prof = load_profile('companion')
    assert prof['publish'] is True and prof['publish_dir'] == 'companion'
    covered = set(prof) | set(prof.get('not_run') or {})  # an artifact left out says why under not_run
    assert set(MANIFEST) <= covered, f'companion.yaml misses {sorted(set(MANIFEST) - covered)}'
    params = check_profile('companion')
    for name, p in params.items():
        if 'kg' in p: assert p['kg'] == 'codex-m', name
        for role in ('backend', 'reader_backend'):
            if role in p: assert p[role] == 'offline', (name, role)


def test_library_notebooks_export_one_module_each():
    seen = {}
    for nb in project_dirs.nbs.glob('*.ipynb'):
        for c in json.loads(nb.read_text())['cells']:
            m = re.match(r'#\|\s*default_exp\s+(\S+)', ''.join(c['source']))
            if m:
                assert m[1] not in seen, f'{nb.name} and {seen[m[1]]} both export {m[1]}'
                seen[m[1]] = nb.name


def test_harness_runs_an_artifact_into_scratch(tmp_path):
    rec = run_artifact(MANIFEST['kg_overview'], 'smoke', overrides=dict(kgs=['codex-m']), out_root=tmp_path)
    assert rec['status'] == 'ok'
    assert (tmp_path / 'results' / 'kg_overview.csv').exists()
    assert (tmp_path / 'figures' / 'kg_degree_distribution.provenance.json').exists()
    prov = json.loads((tmp_path / 'results' / 'executed' / 'kg_overview.provenance.json').read_text())
    assert prov['profile'] == 'smoke' and prov['params']['kgs'] == ['codex-m']
    assert json.loads((tmp_path / 'results' / 'kg_overview.provenance.json').read_text())['profile'] == 'smoke'  # the notebook's own record too


def test_published_profile_with_publish_dir_never_touches_the_paper_outputs(tmp_path, monkeypatch):
    "A profile with publish_dir runs in results/runs/<profile>/ and copies its outputs to results/<dir>/ and figures/<dir>/."
    from kgqa_nb.core import project_dirs as pd_
    monkeypatch.setattr(pd_, 'results', tmp_path / 'results'); monkeypatch.setattr(pd_, 'figures', tmp_path / 'figures')
    import kgqa_nb.rerun
    monkeypatch.setattr(kgqa_nb.rerun, 'git_changes', lambda: [])  # publishing needs a clean tree; this test is about where files go
    prof = tmp_path / 'review.yaml'
    prof.write_text('publish: true\npublish_dir: review\nkg_overview:\n  kgs: [toyworld]\n  toyworld_scale: 0.2\n')
    rec = run_artifact(MANIFEST['kg_overview'], str(prof))
    assert rec['outputs'] == [str(tmp_path / 'results' / 'review' / 'kg_overview.csv'), str(tmp_path / 'figures' / 'review' / 'kg_degree_distribution.png')]
    published = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob('*') if p.is_file() and 'runs' not in p.parts)
    assert published == ['figures/review/kg_degree_distribution.pdf', 'figures/review/kg_degree_distribution.png',
                         'figures/review/kg_degree_distribution.provenance.json', 'results/review/executed/kg_overview.ipynb',
                         'results/review/executed/kg_overview.provenance.json', 'results/review/kg_overview.csv',
                         'results/review/kg_overview.provenance.json', 'review.yaml']
    assert (tmp_path / 'results' / 'runs' / 'review' / 'results' / 'kg_overview.csv').exists()


def test_cli_help_runs():
    out = subprocess.run([sys.executable, '-m', 'kgqa_nb.cli', '--help'], capture_output=True, text=True)
    assert out.returncode == 0 and 'rerun' in out.stdout


@pytest.mark.parametrize('nb', sorted(project_dirs.nbs.glob('*.ipynb')), ids=lambda p: p.stem)
def test_chapter_layout(nb):
    "House style: an H1 title first; library chapters add a `> subtitle` and put `#| default_exp` in the second cell."
    cells = json.loads(nb.read_text())['cells']
    src = [''.join(c['source']) for c in cells]
    assert cells[0]['cell_type'] == 'markdown' and src[0].startswith('# '), 'first cell must be the H1 title'
    if any(re.match(r'#\|\s*default_exp', s) for s in src):
        assert re.search(r'^> ', src[0], re.M), 'library chapters carry a one-line > subtitle under the title'
        assert re.match(r'#\|\s*default_exp', src[1]), '#| default_exp goes in the second cell'


# --- chapters committed with their outputs (make chapters) --------------------------------------------------------------

def _tool(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, project_dirs.root / 'tools' / f'{name}.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_chapter_outputs_are_made_machine_independent():
    rc = _tool('run_chapters')
    from kgqa_nb.core import data_dir
    reps = rc.replacements()
    outs = [dict(output_type='stream', name='stdout', text=[f'{project_dirs.root}/_smoke/x.csv\n', f'{data_dir()}/codex/LICENSE\n',
                                                            '/tmp/tmpab_12x/k.json <obj at 0x7f3a2b1c9d40>\n', 'Wall time: 1.2 s\n']),
            dict(output_type='stream', name='stderr', text='\r 40%|####      | 4/10 [00:01<00:02, 3.1it/s]'),
            dict(output_type='execute_result', execution_count=3, metadata={}, data={'text/plain': [f"PosixPath('{project_dirs.root}/nbs')"]})]
    got = rc.normalise_outputs(outs, reps)
    assert got[0]['text'] == ['../_smoke/x.csv\n', '$KGQA_DATA/codex/LICENSE\n', '<tmp>/k.json <obj at 0x…>\n']
    assert len(got) == 2 and got[1]['data']['text/plain'] == ["PosixPath('../nbs')"]


def test_library_chapters_are_the_exporting_notebooks():
    names = [p.name for p in _tool('run_chapters').library_chapters()]
    assert '00_core.ipynb' in names and '41_cli.ipynb' in names
    assert not [n for n in names if re.match(r'[5-9]\d_', n)]


LIBRARY_CHAPTERS = _tool('run_chapters').library_chapters()
MACHINE_PATH = re.compile(r'(?<![\w.~$-])/(tmp|root|home|work|Users)/')  # an absolute path of some machine
SKIPPED = re.compile(r'^#\|\s*(slow|gpu|llm|data|eval:\s*false)\b', re.M)  # cells a run may skip: their outputs can be absent


def _shows_something(src: str) -> bool:
    "Whether a cell ends in a bare value or a print/display call (its run must leave an output)."
    import ast
    try: body = ast.parse('\n'.join(l for l in src.splitlines() if not l.lstrip().startswith(('%', '!')))).body
    except SyntaxError: return False
    last = body[-1].value if body and isinstance(body[-1], ast.Expr) else None
    if last is None: return False
    return not isinstance(last, ast.Call) or (isinstance(last.func, ast.Name) and last.func.id in ('print', 'display'))


@pytest.mark.parametrize('nb', LIBRARY_CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_committed_with_its_outputs(nb):
    "Every library chapter carries the outputs `make chapters` gives it: a cell that ends in a value shows it; no output holds a machine path or a traceback."
    cells = json.loads(nb.read_text())['cells']
    code = [(i, c) for i, c in enumerate(cells) if c['cell_type'] == 'code']
    assert any(c.get('outputs') for _, c in code), f'{nb.name} has {len(code)} code cells and no outputs: run `make chapters NBS=nbs/{nb.name}` and commit'
    silent = [i for i, c in code if not c.get('outputs') and not SKIPPED.search(''.join(c['source'])) and _shows_something(''.join(c['source']))]
    assert silent == [], f'{nb.name}: cells {silent} end in a value but have no committed output: run `make chapters NBS=nbs/{nb.name}` and commit'
    for i, c in code:
        for o in c.get('outputs', []):
            text = json.dumps(o.get('text', '')) + json.dumps({k: v for k, v in o.get('data', {}).items() if k.startswith('text')})
            assert o.get('output_type') != 'error' and 'Traceback (most recent call last)' not in text, f'{nb.name}: cell {i} committed an error'
            assert not MACHINE_PATH.search(text), f'{nb.name}: cell {i} shows a path of this machine: {MACHINE_PATH.search(text)[0]}'


def test_freshness_sample_rotates_with_the_commit():
    rc = _tool('run_chapters')
    assert rc.rotating_sample(2, 'abc') == rc.rotating_sample(2, 'abc') and len(rc.rotating_sample(2, 'abc')) == 2
    assert len({p for k in range(40) for p in rc.rotating_sample(2, f'commit-{k}')}) > len(LIBRARY_CHAPTERS) // 2  # over commits, most chapters come up


@pytest.mark.data()
def test_committed_chapter_outputs_are_current(tmp_path):
    "Re-executing a rotating sample of chapters (two, chosen by the commit) with the `make chapters` tool reproduces their committed outputs."
    sample = [p.name for p in _tool('run_chapters').rotating_sample(2)]
    res = subprocess.run([sys.executable, 'tools/run_chapters.py', '--out', str(tmp_path), *[f'nbs/{n}' for n in sample]],
                         cwd=project_dirs.root, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    for n in sample:
        committed, fresh = (json.loads(p.read_text())['cells'] for p in (project_dirs.nbs / n, tmp_path / n))
        assert [c['source'] for c in committed] == [c['source'] for c in fresh]
        stale = [i for i, (a, b) in enumerate(zip(committed, fresh)) if a.get('outputs') != b.get('outputs')]
        assert stale == [], f'{n}: outputs of cells {stale} are not what a re-execution gives: run `make chapters NBS=nbs/{n}` and commit'
    assert any(c.get('outputs') for n in sample for c in json.loads((tmp_path / n).read_text())['cells'])  # not vacuous


# --- committed results trace to their code, on any machine ------------------------------------------------------------

RECORDS = sorted(p for base in (project_dirs.results, project_dirs.figures) for p in base.rglob('*')
                 if p.is_file() and not {'runs', 'datasets', 'cache'} & set(p.relative_to(base).parts) and p.suffix in ('.json', '.md', '.ipynb', '.csv'))


def test_no_committed_result_holds_a_machine_path():
    "Records, cards, executed notebooks and tables under results/ and figures/ read the same on every machine."
    bad = [f'{p.relative_to(project_dirs.root)}: {m[0]}' for p in RECORDS if (m := MACHINE_PATH.search(p.read_text(errors='replace')))]
    assert bad == [], f'{len(bad)} committed results hold absolute paths (tools/migrate_records.py rewrites them): {bad[:5]}'


def test_every_committed_record_names_its_profile():
    recs = [p for p in RECORDS if p.name.endswith('.provenance.json')]
    assert recs
    unnamed = [str(p.relative_to(project_dirs.root)) for p in recs if not json.loads(p.read_text()).get('profile')]
    assert unnamed == [], f'records without a profile: {unnamed[:5]}'


def test_sync_check_tolerates_outputs_but_not_unclean_or_unexported_notebooks(tmp_path):
    "tools/check_sync.sh passes on a clean repository whose chapter carries outputs, and fails after an unclean or unexported edit."
    import shutil
    repo = tmp_path / 'repo'; (repo / 'nbs').mkdir(parents=True); (repo / 'kgqa_nb').mkdir()
    shutil.copy(project_dirs.root / 'settings.ini', repo)
    shutil.copy(project_dirs.nbs / '08_isomorphism.ipynb', repo / 'nbs')
    (repo / 'kgqa_nb' / '__init__.py').write_text('')
    (repo / 'tools').mkdir(); shutil.copy(project_dirs.root / 'tools' / 'check_sync.sh', repo / 'tools')
    bin_ = str(Path(sys.executable).parent)
    git = lambda *a: subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t', *a], cwd=repo, check=True, capture_output=True)
    def sync(): return subprocess.run(['bash', 'tools/check_sync.sh', bin_], cwd=repo, capture_output=True, text=True)
    nb = repo / 'nbs' / '08_isomorphism.ipynb'
    cells = json.loads(nb.read_text())['cells']
    assert any(c.get('outputs') for c in cells), 'the sample chapter should be committed with outputs'
    subprocess.run([f'{bin_}/nbdev_export'], cwd=repo, check=True, capture_output=True)
    git('init', '-q'); git('add', '.'); git('commit', '-qm', 'init')
    ok = sync(); assert ok.returncode == 0 and 'in sync' in ok.stdout, ok.stderr
    changed = lambda r: r.returncode == 1 and 'nbdev_export / nbdev_clean changed tracked files' in r.stderr
    d = json.loads(nb.read_text()); d['cells'][2]['execution_count'] = 7; d['cells'][2]['metadata'] = {'scrolled': True}
    nb.write_text(json.dumps(d, indent=1)); git('commit', '-qam', 'unclean')
    assert changed(sync())
    git('reset', '-q', '--hard', 'HEAD~1')
    d = json.loads(nb.read_text())
    i = next(i for i, c in enumerate(d['cells']) if c['cell_type'] == 'code' and '#| export' in ''.join(c['source']) and 'def ' in ''.join(c['source']))
    d['cells'][i]['source'] = ''.join(d['cells'][i]['source']).replace('def ', 'def renamed_', 1).splitlines(keepends=True)
    nb.write_text(json.dumps(d, indent=1, ensure_ascii=False) + '\n'); subprocess.run([f'{bin_}/nbdev_clean', '--fname', str(nb)], cwd=repo, check=True)
    git('commit', '-qam', 'edit without export')
    r = sync(); assert changed(r) and 'isomorphism.py' in r.stderr


def test_nbpercent_round_trip_keeps_outputs_of_unchanged_cells(tmp_path):
    nbp = _tool('nbpercent')
    nb = tmp_path / 'x.ipynb'
    (tmp_path / 'a.py').write_text('# %% [markdown]\n# # T\n\n# %%\nx = 1\nx\n\n# %%\nprint(2)\n')
    nbp.to_nb(tmp_path / 'a.py', nb)
    d = json.loads(nb.read_text())
    d['cells'][1]['outputs'] = [dict(output_type='execute_result', execution_count=None, metadata={}, data={'text/plain': ['1']})]
    d['cells'][2]['outputs'] = [dict(output_type='stream', name='stdout', text=['2\n'])]
    nb.write_text(json.dumps(d))
    (tmp_path / 'b.py').write_text('# %% [markdown]\n# # T\n\n# %%\nx = 1\nx\n\n# %%\nprint(3)\n')  # second cell edited
    nbp.to_nb(tmp_path / 'b.py', nb)
    cells = json.loads(nb.read_text())['cells']
    assert cells[1]['outputs'][0]['data'] == {'text/plain': ['1']} and cells[2]['outputs'] == []


def test_not_run_artifact_is_skipped_with_its_reason(tmp_path):
    from kgqa_nb.rerun import rerun
    prof = tmp_path / 'p.yaml'
    prof.write_text('publish: false\nnot_run:\n  kg_overview: needs a GPU box for this profile\n')
    lines = []
    recs = rerun(str(prof), only=['kg_overview'], out_root=tmp_path, log=lines.append)
    assert recs == [dict(artifact='kg_overview', status='skipped', reason='not in this profile: needs a GPU box for this profile')]
    assert 'skipped, not in this profile' in lines[0] and not (tmp_path / 'results').exists()
