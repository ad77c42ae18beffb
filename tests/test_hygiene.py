"""Repository hygiene: no third-party data or checkpoints are tracked, no committed file carries a secret, the project has a
licence and self-contained developer docs, settings.ini has no placeholders, and chapters import only earlier chapters."""
import re, subprocess
from kgqa_nb.core import project_dirs

def tracked():
    return subprocess.run(['git', 'ls-files'], cwd=project_dirs.root, capture_output=True, text=True).stdout.split()

# Our own trained retrievers are results, not data: the retriever study commits its finished runs' compact checkpoints here
# (chapter 15c's `store_run`; tests/test_trained_store.py checks them), each a few MB. Nothing else may be a checkpoint.
TRAINED_STORE = re.compile(r'^trained/[^/]+/retriever-train-[0-9a-f]+/ckpt/[^/]+/last\.pt$')
STORED_CHECKPOINT_MB = 5

def test_no_data_or_checkpoints_tracked():
    bad = [f for f in tracked() if re.search(r'\.(pth|pt|ckpt|safetensors|parquet)$|(^|/)(codex|ilpc2022|metaqa|fb15k237)[^/]*/', f)
           and not TRAINED_STORE.match(f)]
    assert bad == []
    big = [f for f in tracked() if TRAINED_STORE.match(f) and (project_dirs.root / f).stat().st_size > STORED_CHECKPOINT_MB * 2**20]
    assert big == [], f'stored checkpoints over {STORED_CHECKPOINT_MB} MB (compact them: 15c compact_checkpoint): {big}'

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

def test_readme_artifact_table_is_the_generated_one():
    "The README's artifact table is what tools/readme_table.py prints from the manifest (one-sentence titles), row for row."
    import subprocess, sys
    table = subprocess.run([sys.executable, 'tools/readme_table.py'], cwd=project_dirs.root, capture_output=True, text=True, check=True).stdout
    readme = (project_dirs.root / 'README.md').read_text()
    assert table.strip() in readme, 'README artifact table is stale: paste the output of python tools/readme_table.py'

def test_readme_reads_in_short_lines_and_names_every_module():
    "No README line (a table row is one line) over 300 characters; the layout table names every library module."
    readme = (project_dirs.root / 'README.md').read_text()
    long = [f'line {i}: {len(l)} characters' for i, l in enumerate(readme.splitlines(), 1) if len(l) > 300]
    assert long == [], 'README lines over 300 characters (split the cell into one sentence and a note):\n' + '\n'.join(long)
    modules = sorted(p.stem for p in (project_dirs.root / 'kgqa_nb').glob('*.py') if not p.stem.startswith('_'))
    assert [m for m in modules if f'`{m}`' not in readme] == []

def chapter_imports():
    "(module, its notebook, imported chapter, line, where) for every import of a kgqa_nb chapter, at any depth of the module."
    import ast, re
    nb_of = {}
    for py in (project_dirs.root / 'kgqa_nb').glob('*.py'):
        m = re.search(r'\.\./nbs/([^\s#]+\.ipynb)', py.read_text())
        if m: nb_of[py.stem] = m[1]
    out = []
    for mod, nb in nb_of.items():
        tree = ast.parse((project_dirs.root / 'kgqa_nb' / f'{mod}.py').read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import): deps = [a.name.split('.')[1] for a in node.names if a.name.startswith('kgqa_nb.')]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0: deps = [node.module.split('.')[1]] if (node.module or '').startswith('kgqa_nb.') else [a.name for a in node.names] if node.module == 'kgqa_nb' else []
                elif node.level == 1: deps = [node.module.split('.')[0]] if node.module else [a.name for a in node.names]
                else: deps = []
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # a registry naming a chapter by path: 'kgqa_nb.x:f', 'kgqa_nb.x'
                deps = re.findall(r'(?<![\w.])kgqa_nb\.(\w+)(?=[:.\s]|$)', node.value)
                if not deps: continue
            else: continue
            for d in deps:
                if d in nb_of: out.append((mod, nb, d, node.lineno, 'module level' if id(node) in top else 'inside a function or block'))
    return nb_of, out

def test_import_check_reads_path_strings(tmp_path):
    "The check sees a registry that names a chapter by string ('kgqa_nb.x:f' and 'kgqa_nb.x'), not only import statements."
    import ast, re
    src = "R = {'a': 'kgqa_nb.cli:main'}\nM = ('kgqa_nb.readers', 'not kgqa_nb_x', 'see kgqa_nb.kg.load_kg')\n"
    found = [re.findall(r'(?<![\w.])kgqa_nb\.(\w+)(?=[:.\s]|$)', n.value) for n in ast.walk(ast.parse(src))
             if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert [d for f in found for d in f] == ['cli', 'readers', 'kg']

def test_imports_flow_downward():
    "A chapter imports only chapters that come before it in notebook order: at module level, inside functions, and by a path string."
    nb_of, imports = chapter_imports()
    bad = [f'kgqa_nb/{mod}.py:{line} ({nb}) imports {dep} ({nb_of[dep]}) {where}' for mod, nb, dep, line, where in imports
           if dep != mod and nb_of[dep] >= nb]
    assert bad == [], 'imports must flow downward (chapter order = notebook order):\n' + '\n'.join(bad)


def test_licence_and_settings_have_no_placeholders():
    "A LICENSE for the project's own code that setup.py and settings.ini agree with; no placeholder hosts or missing notebooks."
    import configparser
    root = project_dirs.root
    assert (root / 'LICENSE').read_text().startswith('MIT License')
    assert "license='MIT'" in (root / 'setup.py').read_text()
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(root / 'settings.ini'); c = cfg['DEFAULT']
    assert c['license'] == 'mit'
    bad = {k: v for k, v in c.items() if re.search(r'example\.(org|com|net)|your[-_ ]?(name|user|org)|placeholder', v, re.I)}
    assert bad == {}
    if c.get('readme_nb', '').strip(): assert (root / c['nbs_path'] / c['readme_nb']).exists(), 'settings.ini names a readme notebook that does not exist'
    assert set(c['tst_flags'].split()) == {'slow', 'gpu', 'llm', 'data'}


def test_developing_md_is_self_contained():
    "The developer guide does not send a contributor outside the repository (../shared is where data lives, not rules)."
    dev = (project_dirs.root / 'DEVELOPING.md').read_text()
    assert 'reference/style.md' not in dev and '../shared/reference' not in dev
    for topic in ('#| data', '#| slow', 'test_eq', 'default_exp', 'imports flow downward', 'make chapters', 'LICENSE'):
        assert topic.lower() in dev.lower(), f'DEVELOPING.md should cover {topic!r}'
