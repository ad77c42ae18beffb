"""Checks over the notebooks themselves: artifact notebooks declare exactly one typed, documented parameters cell that
papermill can read, every artifact is in the manifest, profiles only set declared parameters, and the harness runs one."""
import json, re, subprocess, sys
from pathlib import Path

import papermill as pm
import pytest
import yaml

from kgqa_nb.core import load_profile, project_dirs
from kgqa_nb.rerun import check_profile, load_manifest, notebook_parameters, parameters_cells, run_artifact

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


PROFILES = sorted(p.stem for p in project_dirs.params.glob('*.yaml') if p.stem != 'manifest')


@pytest.mark.parametrize('profile', PROFILES)
def test_profiles_only_set_declared_parameters(profile):
    "Every profile passes the harness's check: known artifacts, declared parameters, values of the declared type."
    assert set(check_profile(profile)) == set(MANIFEST)


def test_companion_profile_covers_every_artifact_on_codex_m_offline():
    prof = load_profile('companion')
    assert prof['publish'] is True and prof['publish_dir'] == 'companion'
    assert set(MANIFEST) <= set(prof), f'companion.yaml misses {sorted(set(MANIFEST) - set(prof))}'
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
