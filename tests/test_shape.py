"""The shape of the code, kept by tests: a module is at most 900 lines (a warning lists those over 700), an exported cell at
most 60, an artifact notebook at most 40 lines of code besides its parameters cell, and a public function name is defined
at top level in one module only (same-named `@patch` methods of different classes are listed, each with its reason).

Where the tree does not comply yet, the item is listed below with its number now: it may not grow, and the test fails once
it complies, so that the entry is removed and the list only shrinks (as `AWAITING_REPUBLISH` in test_book.py).
Every check is a function of a project root, so that the tests below also run it on a planted violation."""
import ast, json, re, warnings
from collections import defaultdict
from pathlib import Path

from kgqa_nb.core import project_dirs

MODULE_MAX, MODULE_WARN, CELL_MAX, ARTIFACT_MAX = 900, 700, 60, 40

# module -> its lines now: over MODULE_MAX, awaiting a split (issue 40, item 3)
LONG_MODULES = {}

# notebook -> the lines of its longest exported cell now: notebooks with exported cells over CELL_MAX, awaiting a split
LONG_CELLS = {
    '04_llm.ipynb': 69,
    '15_subgraphrag.ipynb': 76,
    '15b_sr.ipynb': 63,
    '15c_retriever_study.ipynb': 74,
    '22_kgqagen.ipynb': 83,
}

# artifact notebook -> its lines of code outside the parameters cell now: over ARTIFACT_MAX, awaiting the move of their
# logic into their chapter (issue 40, item 4: parameters, one library call, table, figure)
LONG_ARTIFACTS = {
    '51_synthkgqa_dataset.ipynb': 71,
    '53_table5_isomorphism_types.ipynb': 49,
    '57_fig8_minimal_types.ipynb': 46,
    '60_ultra_ilpc_zero_shot.ipynb': 43,
    '62_fig9_shortcuts_parallel_paths.ipynb': 43,
    '64_retriever_study.ipynb': 66,
    '64a_retriever_fidelity.ipynb': 45,
    '65_table4_gt_vs_sp.ipynb': 95,
    '66_fig14_metric_vs_k.ipynb': 59,
    '67_fig12_gap_by_group.ipynb': 58,
    '71_ultrag_neural_vs_symbolic.ipynb': 73,
    '80_kgrag_hops_topk.ipynb': 45,
    '81_kgrag_baselines.ipynb': 97,
    '92_kgqagen_table2.ipynb': 54,
}

# name -> why: `@patch` methods of different classes that share a name on purpose (one protocol, several implementations)
PATCH_METHODS = {
    'answer': 'the reader protocol: readers, KG-RAG and ULTRAG each answer a question',
    'answer_many': 'the reader protocol, many questions at once: readers and the benchmark models',
    'decompose': 'question decomposition of ToG/PoG agents and of KG-RAG',
    'describe': 'the provenance label of an LLM client and of a reader',
    'execute': 'a query executor: the symbolic one (dsl) and the neural one (ultra)',
    'retrieve': 'the retriever protocol of the agents, RoG/GCR and SR',
    'run_info': 'the provenance record of an agent and of a path model',
    'save': 'a model writes its checkpoint folder (path models, question-graph models, encoders)',
    'start': 'the lifecycle of the two local servers (the stand-in and llama.cpp)',
    'stop': 'the lifecycle of the two local servers; `SpendBudget.stop` stops a run',
}

# name -> why: module-level functions of the same name in two modules that are one protocol, not two meanings
SAME_PROTOCOL = {
    'process_batch': "the step one pipeline (SynthKGQA, KGQAGen) hands to `runs.resume_run`: one contract, two pipelines",
    'study_train': "the retriever study's training step of one retriever (SubgraphRAG, SR): `TRAINED_RETRIEVERS` maps a name to each",
}

# name -> its two meanings: one name defined in two modules with different meanings, awaiting a rename (issue 40, item 5)
AWAITING_RENAME: dict = {}  # name -> why its rename waits (none waits now: pathgen's gold_answers became answer_indices)


# ---- the checks: each takes a project root (with kgqa_nb/ and nbs/) and names the file and the number ----

def module_lengths(root: Path) -> dict:
    "Module file name -> its lines, for every module of the package but the generated index."
    return {p.name: len(p.read_text().splitlines()) for p in sorted((root / 'kgqa_nb').glob('*.py')) if p.name != '_modidx.py'}

def long_modules(root: Path, limit: int = MODULE_MAX) -> dict:
    "Module -> lines, for the modules over `limit` lines."
    return {m: n for m, n in module_lengths(root).items() if n > limit}

_EXPORT = re.compile(r'^#\|\s*export[is]?\s*$')
_DEFINES = re.compile(r'^(?:async\s+)?(?:def|class)\s+(\w+)', re.M)
_ASSIGNS = re.compile(r'^(\w+)\s*(?::[^=]*)?=', re.M)

def exported_cells(nb: Path) -> list:
    "(cell index, first name it defines, its lines) of each exported code cell of a notebook."
    out = []
    for i, c in enumerate(json.loads(nb.read_text())['cells']):
        lines = ''.join(c['source']).splitlines() if c['cell_type'] == 'code' else []
        if not any(_EXPORT.match(l) for l in lines if l.startswith('#|')): continue
        code = '\n'.join(l for l in lines if not l.startswith('#'))
        m = _DEFINES.search(code) or _ASSIGNS.search(code)  # named by its first definition, else its first assignment
        out.append((i, m[1] if m else '', len(lines)))
    return out

def long_cells(root: Path, limit: int = CELL_MAX) -> dict:
    "Notebook -> (lines, cell index, first name defined) of its longest exported cell, for notebooks with one over `limit` lines."
    out = {}
    for nb in sorted((root / 'nbs').glob('*.ipynb')):
        longest = max(((n, i, name) for i, name, n in exported_cells(nb)), default=(0, None, ''))
        if longest[0] > limit: out[nb.name] = longest
    return out

def artifact_code_lines(nb: Path) -> int:
    "Lines of code (neither blank nor a comment) in the code cells of a notebook outside its `parameters` cell."
    cells = [c for c in json.loads(nb.read_text())['cells']
             if c['cell_type'] == 'code' and 'parameters' not in c.get('metadata', {}).get('tags', [])]
    return sum(1 for c in cells for l in ''.join(c['source']).splitlines() if l.strip() and not l.strip().startswith('#'))

def long_artifacts(root: Path, limit: int = ARTIFACT_MAX) -> dict:
    "Artifact notebook (nbs/5* to nbs/9*) -> lines of code, for those over `limit`."
    nbs = [p for p in sorted((root / 'nbs').glob('*.ipynb')) if p.name[0] in '56789']
    return {p.name: n for p in nbs if (n := artifact_code_lines(p)) > limit}

def top_level_functions(root: Path) -> dict:
    "Public function name -> [(module file, line, whether it is a `@patch` method)] for every module that defines it at top level."
    out = defaultdict(list)
    for p in sorted((root / 'kgqa_nb').glob('*.py')):
        if p.name.startswith('_'): continue
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith('_'):
                patched = any(isinstance(d, ast.Name) and d.id == 'patch' or isinstance(d, ast.Call) and getattr(d.func, 'id', None) == 'patch'
                              for d in node.decorator_list)
                out[node.name].append((p.name, node.lineno, patched))
    return out

def duplicated_functions(root: Path) -> dict:
    "Name -> its definitions, for public function names defined at top level in two modules or more."
    return {k: v for k, v in top_level_functions(root).items() if len({m for m, _, _ in v}) > 1}

def where(defs: list) -> str:
    return ', '.join(f'kgqa_nb/{m}:{line}' + (' (@patch)' if p else '') for m, line, p in defs)

def over(found: dict, listed: dict, limit: int, unit: str, what) -> list:
    "Messages for items over `limit` and not listed, listed items that grew, and listed items that now comply (remove them)."
    msgs = [f'{what(k)}: {n} {unit} (at most {limit})' for k, n in found.items() if k not in listed]
    msgs += [f'{what(k)}: {found[k]} {unit}, more than the {n} it is listed with (a listed item may not grow)'
             for k, n in listed.items() if found.get(k, 0) > n]
    msgs += [f'{what(k)}: now at most {limit} {unit}: remove it from the list' for k in listed if k not in found]
    return msgs


# ---- the tree keeps its shape ----

def test_modules_are_at_most_900_lines():
    "No module over 900 lines (the generated index aside); a warning lists those over 700, the next to split."
    root = project_dirs.root
    warn = long_modules(root, MODULE_WARN)
    if warn:
        msg = f'modules over {MODULE_WARN} lines (split one before it reaches {MODULE_MAX}): ' + ', '.join(f'kgqa_nb/{m} {n}' for m, n in warn.items())
        print(msg); warnings.warn(msg)
    bad = over(long_modules(root), LONG_MODULES, MODULE_MAX, 'lines', lambda m: f'kgqa_nb/{m}')
    assert bad == [], '\n'.join(bad)

def test_exported_cells_are_at_most_60_lines():
    found = long_cells(project_dirs.root)
    what = lambda nb: f'nbs/{nb}' + (f', its exported cell {found[nb][1]} (defining {found[nb][2]})' if nb in found else '')
    bad = over({nb: n for nb, (n, _, _) in found.items()}, LONG_CELLS, CELL_MAX, 'lines', what)
    assert bad == [], '\n'.join(bad)

def test_artifact_notebooks_are_at_most_40_lines_of_code():
    "An artifact notebook reads as parameters, one library call, table, figure: its logic lives in a chapter."
    bad = over(long_artifacts(project_dirs.root), LONG_ARTIFACTS, ARTIFACT_MAX, 'lines of code outside the parameters cell', lambda n: f'nbs/{n}')
    assert bad == [], '\n'.join(bad)

def test_a_public_function_name_is_defined_in_one_module():
    "One name, one meaning: a public function is defined at top level in one module; listed exceptions only, each with its reason."
    dups = duplicated_functions(project_dirs.root)
    patch_only = {k for k, v in dups.items() if all(p for _, _, p in v)}
    bad = [f'{k} is defined in two modules: {where(v)}' for k, v in dups.items()
           if k not in (PATCH_METHODS if k in patch_only else {**SAME_PROTOCOL, **AWAITING_RENAME})]
    bad += [f'PATCH_METHODS lists {k}, which is not a @patch method of two modules now: remove it' for k in PATCH_METHODS if k not in patch_only]
    bad += [f'{k} is defined in one module now: remove it from the list' for k in {**SAME_PROTOCOL, **AWAITING_RENAME} if k not in dups]
    assert bad == [], '\n'.join(bad)

def test_the_lists_carry_reasons_and_no_name_twice():
    for lst in (PATCH_METHODS, SAME_PROTOCOL, AWAITING_RENAME): assert all(isinstance(v, str) and len(v) > 10 for v in lst.values())
    assert set(PATCH_METHODS) & set(SAME_PROTOCOL) == set(PATCH_METHODS) & set(AWAITING_RENAME) == set(SAME_PROTOCOL) & set(AWAITING_RENAME) == set()


# ---- each check catches a planted violation, naming the file and the number ----

def plant(root: Path, name: str, cells: list):
    "Write a notebook of (kind, source, tags) cells under root/nbs."
    nb = dict(cells=[dict(cell_type=k, metadata={'tags': t} if t else {}, source=s, **({'outputs': [], 'execution_count': None} if k == 'code' else {}))
                     for k, s, t in cells], metadata={}, nbformat=4, nbformat_minor=5)
    (root / 'nbs').mkdir(exist_ok=True); (root / 'nbs' / name).write_text(json.dumps(nb))

def test_a_planted_long_module_is_named_with_its_lines(tmp_path):
    (tmp_path / 'kgqa_nb').mkdir()
    (tmp_path / 'kgqa_nb' / 'big.py').write_text('x = 1\n' * 901)
    (tmp_path / 'kgqa_nb' / 'ok.py').write_text('x = 1\n' * 900)
    (tmp_path / 'kgqa_nb' / '_modidx.py').write_text('x = 1\n' * 5000)  # the generated index is not counted
    assert long_modules(tmp_path) == {'big.py': 901}
    assert over(long_modules(tmp_path), {}, MODULE_MAX, 'lines', lambda m: f'kgqa_nb/{m}') == ['kgqa_nb/big.py: 901 lines (at most 900)']
    assert long_modules(tmp_path, MODULE_WARN) == {'big.py': 901, 'ok.py': 900}

def test_the_lists_only_shrink(tmp_path):
    "A listed item that grew fails, and so does one that complies now (the list must lose it)."
    what = lambda m: f'kgqa_nb/{m}'
    assert over({'a.py': 950}, {'a.py': 940}, 900, 'lines', what) == ['kgqa_nb/a.py: 950 lines, more than the 940 it is listed with (a listed item may not grow)']
    assert over({}, {'a.py': 940}, 900, 'lines', what) == ['kgqa_nb/a.py: now at most 900 lines: remove it from the list']
    assert over({'a.py': 930}, {'a.py': 940}, 900, 'lines', what) == []

def test_a_planted_long_exported_cell_is_named_with_its_lines(tmp_path):
    body = '#| export\ndef big():\n' + '    x = 1\n' * 59  # 61 lines
    plant(tmp_path, '07_x.ipynb', [('markdown', '# X', None), ('code', body, None), ('code', 'def free():\n' + '    y = 2\n' * 80, None),
                                   ('code', '#| export\nclass Fine:\n' + '    z = 3\n' * 58, None)])
    assert long_cells(tmp_path) == {'07_x.ipynb': (61, 1, 'big')}  # an unexported cell of any length is not counted
    assert exported_cells(tmp_path / 'nbs' / '07_x.ipynb') == [(1, 'big', 61), (3, 'Fine', 60)]

def test_a_planted_long_artifact_is_named_with_its_lines(tmp_path):
    params = ('code', 'n: int = 1  # questions\n' * 30, ['parameters'])  # the parameters cell is not counted
    code = '\n'.join([f'y{i} = {i}' for i in range(41)] + ['# a comment', '', '#| echo: false'])
    plant(tmp_path, '59_fig.ipynb', [('markdown', '# Fig', None), params, ('code', code, None)])
    plant(tmp_path, '15_chapter.ipynb', [('code', code, None)])  # a chapter is not an artifact notebook
    assert long_artifacts(tmp_path) == {'59_fig.ipynb': 41}

def test_a_planted_duplicate_function_is_named_with_both_places(tmp_path):
    (tmp_path / 'kgqa_nb').mkdir()
    (tmp_path / 'kgqa_nb' / 'a.py').write_text('def twice(): pass\n\n@patch\ndef go(self: A): pass\ndef _private(): pass\n')
    (tmp_path / 'kgqa_nb' / 'b.py').write_text('x = 1\ndef twice(): pass\n@patch\ndef go(self: B): pass\ndef _private(): pass\nclass C:\n    def twice(self): pass\n')
    dups = duplicated_functions(tmp_path)
    assert set(dups) == {'twice', 'go'}  # private names and methods inside a class are not counted
    assert where(dups['twice']) == 'kgqa_nb/a.py:1, kgqa_nb/b.py:2'
    assert where(dups['go']) == 'kgqa_nb/a.py:4 (@patch), kgqa_nb/b.py:4 (@patch)'
