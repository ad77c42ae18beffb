"""Repository hygiene: no third-party data or checkpoints are tracked, and no committed file carries a secret."""
import re, subprocess
from kgqa_nb.core import project_dirs

def tracked():
    return subprocess.run(['git', 'ls-files'], cwd=project_dirs.root, capture_output=True, text=True).stdout.split()

def test_no_data_or_checkpoints_tracked():
    bad = [f for f in tracked() if re.search(r'\.(pth|pt|ckpt|safetensors|parquet)$|(^|/)(codex|ilpc2022|metaqa|fb15k237)[^/]*/', f)]
    assert bad == []

def test_no_secrets_in_tracked_files():
    pat = re.compile(r'sk-[A-Za-z0-9_-]{16,}|Bearer\s+[A-Za-z0-9._-]{16,}')
    hits = []
    for f in tracked():
        p = project_dirs.root / f
        if p.suffix in ('.json', '.jsonl', '.csv', '.yaml', '.yml', '.txt', '.md', '.ipynb') and p.exists():
            if pat.search(p.read_text(errors='ignore')): hits.append(f)
    assert hits == []

def test_environment_yml_carries_the_same_pins():
    import yaml
    req = {l.split('#')[0].strip() for l in (project_dirs.root / 'requirements.txt').read_text().splitlines()} - {''}
    env = yaml.safe_load((project_dirs.root / 'environment.yml').read_text())
    pip = next(d['pip'] for d in env['dependencies'] if isinstance(d, dict))
    assert req <= set(pip) and 'torch==2.13.0' in pip

def test_readme_lists_every_artifact():
    import yaml
    readme = (project_dirs.root / 'README.md').read_text()
    man = yaml.safe_load((project_dirs.root / 'params' / 'manifest.yaml').read_text())
    missing = [n for n, spec in man.items() if f'`{n}`' not in readme or spec['notebook'] not in readme]
    assert missing == [], f'README artifact table misses {missing}: run python tools/readme_table.py'

def test_imports_flow_downward():
    "A chapter imports (at module level) only chapters that come before it in notebook order."
    import ast, re
    nb_of = {}
    for py in (project_dirs.root / 'kgqa_nb').glob('*.py'):
        m = re.search(r'\.\./nbs/([^\s#]+\.ipynb)', py.read_text())
        if m: nb_of[py.stem] = m[1]
    bad = []
    for mod, nb in nb_of.items():
        tree = ast.parse((project_dirs.root / 'kgqa_nb' / f'{mod}.py').read_text())
        for node in tree.body:
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else [a.name for a in getattr(node, 'names', [])] if isinstance(node, ast.Import) else []
            for n in names:
                dep = n.split('.')[1] if n.startswith('kgqa_nb.') else None
                if dep in nb_of and nb_of[dep] >= nb: bad.append(f'{mod} ({nb}) imports {dep} ({nb_of[dep]})')
    assert bad == []
