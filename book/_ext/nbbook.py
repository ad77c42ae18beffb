"""Sphinx extension of the kgqa_nb book: shows the nbdev notebooks in `nbs/` the way nbdev's own pages would, and builds the
API index from them.

- `source-read`: before myst-nb parses a notebook, its JSON is rewritten in memory (the file is never touched): cells with
  `#| hide`, the `#| default_exp` cell and cells with `#| include: false` are dropped; every other `#|` directive line is
  removed from the code shown, and so are lines ending in `#| hide_line`; `#| echo: false` / `#| output: false` hide the
  input / the output (myst-nb's `remove-input` / `remove-output` tags); a cell flagged with a test flag (`#| slow`,
  `#| data`, …) gets the tag `needs-<flag>`, which `book.css` labels. Markdown headings ending in ` -` are dropped (nbdev
  does the same). Before each exported cell a MyST target `(kgqa_nb.<module>.<name>)=` is inserted for every public name
  it defines, so the API index can link to the cell. A library chapter's import cells (the code cells between its title
  and its first prose) are moved under that prose and collapsed, so the page opens with what the chapter teaches.
  An artifact notebook (committed without outputs) opens, under its title and first paragraph, with a section "Result"
  that `kgqa_nb.cards.artifact_card` writes from the committed files: the claim cards of `params/claims.yaml` (verdicts
  computed by `kgqa_nb.claims`), the figures, the main table of `params/cards.yaml` rounded to 3 significant digits, and
  the provenance (or, when nothing is committed, which need is missing). A last section, "Committed results", shows the
  other files its manifest outputs (`params/manifest.yaml`) have under each published profile's `figures/…` and
  `results/…` folders, rounded the same way, and where its executed copy is.
- `nbbook-api` directive: one section per module (chapter order), each public name of the module's `__all__` with its
  signature and the first line of its docstring (or the comment beside a constant), linked to its cell. It reads the
  notebooks and the modules' `__all__` with `ast`: nothing is imported, so it needs no data, network or GPU.
"""
from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

import nbformat
import pandas as pd
import yaml
from docutils import nodes
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

PACKAGE = 'kgqa_nb'
NBS = 'nbs'  # the folder of notebooks inside the book's source dir (a link to the repository's nbs/)
TEST_FLAGS = ('slow', 'gpu', 'llm', 'data')  # settings.ini tst_flags; book.css labels each

_DIRECTIVE = re.compile(r'^\s*#\s*\|\s*(.*?)\s*$')
_HIDE_LINE = re.compile(r'#\s*\|\s*hide_line\s*$')
_DROP = {'hide', 'default_exp'}
_EXPORTED = {'export', 'exports'}


def cell_directives(source: str) -> tuple[dict[str, str], str]:
    "nbdev's leading `#|` directives of a code cell as {name: argument} and the code after them."
    lines = source.splitlines(True)
    dirs, i = {}, 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if m:
            text = m.group(1)
            if text and ':' in text.split()[0]:  # Quarto form `#| echo: false`
                key, _, val = text.partition(':')
                dirs[key.strip()] = val.strip()
            elif text:
                name, _, arg = text.partition(' ')
                dirs[name.rstrip(':')] = arg.strip()
        elif lines[i].strip(): break
        i += 1
    code = ''.join(l for l in lines[i:] if not _HIDE_LINE.search(l))
    return dirs, code.strip('\n')


def default_exp(nb) -> str | None:
    "The module a notebook exports (`#| default_exp`), or None for an artifact notebook."
    for c in nb.cells:
        if c.cell_type == 'code':
            d, _ = cell_directives(c.source)
            if d.get('default_exp'): return d['default_exp'].split()[0]
    return None


def _comments(code: str) -> dict[int, str]:
    "Line number -> text of the comment on that line."
    out = {}
    try:
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            if t.type == tokenize.COMMENT: out.setdefault(t.start[0], t.string.lstrip('#').strip())
    except (tokenize.TokenError, IndentationError, SyntaxError): pass
    return out


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> str:
    "The parameter names of `fn`, defaults shown as `=…`, `self`/`cls` left out of methods."
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = [p.arg + ('=…' if d is not None else '') for p, d in zip(pos, defaults)]
    if method and out: out = out[1:]
    if a.vararg: out.append('*' + a.vararg.arg)
    elif a.kwonlyargs: out.append('*')
    out += [p.arg + ('=…' if d is not None else '') for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg: out.append('**' + a.kwarg.arg)
    return '(' + ', '.join(out) + ')'


def _patched_class(fn) -> list[str]:
    "The classes a fastcore `@patch` function is added to (the annotation of its first parameter), else []."
    is_patch = any((isinstance(d, ast.Name) and d.id == 'patch') or
                   (isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == 'patch')
                   for d in fn.decorator_list)
    args = fn.args.posonlyargs + fn.args.args
    if not is_patch or not args or args[0].annotation is None: return []
    return [n.id for n in ast.walk(args[0].annotation) if isinstance(n, ast.Name)]


def cell_definitions(code: str) -> list[dict]:
    "Public top-level names an exported cell defines: qualname, kind, signature and one-line doc."
    try: tree = ast.parse(code)
    except SyntaxError: return []
    comments, out = _comments(code), []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = (ast.get_docstring(node) or '').strip().split('\n')[0]
            classes = _patched_class(node)
            if classes:
                if not node.name.startswith('_'):
                    for cls in classes:
                        out.append(dict(name=f'{cls}.{node.name}', kind='method', sig=_params(node, True), doc=doc))
            elif not node.name.startswith('_'):
                out.append(dict(name=node.name, kind='function', sig=_params(node, False), doc=doc))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith('_'):
            doc = (ast.get_docstring(node) or '').strip().split('\n')[0]
            out.append(dict(name=node.name, kind='class', sig='', doc=doc))
            for sub in node.body:  # methods written in the class body
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and not sub.name.startswith('_'):
                    sdoc = (ast.get_docstring(sub) or '').strip().split('\n')[0]
                    out.append(dict(name=f'{node.name}.{sub.name}', kind='method', sig=_params(sub, True), doc=sdoc))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and not n.id.startswith('_') and n.id != '__all__':
                        out.append(dict(name=n.id, kind='data', sig='', doc=comments.get(node.lineno, '')))
    return out


def notebook_definitions(nb) -> list[tuple[int, dict]]:
    """(cell index, definition) for every public name the exported cells of `nb` define (first definition of a name), each
    with its MyST target `label`: `kgqa_nb.<module>.<name>` lowercased (docutils lowercases names), numbered when two names
    differ only in case (`GTSQA_FILES`, `gtsqa_files`)."""
    module = default_exp(nb) or ''
    seen, labels, out = set(), set(), []
    for i, c in enumerate(nb.cells):
        if c.cell_type != 'code': continue
        d, code = cell_directives(c.source)
        if not d.keys() & _EXPORTED: continue
        for item in cell_definitions(code):
            if item['name'] in seen: continue
            seen.add(item['name'])
            base = lbl = f'{PACKAGE}.{module}.{item["name"]}'.lower()
            n = 1
            while lbl in labels: n += 1; lbl = f'{base}-{n}'
            labels.add(lbl)
            out.append((i, dict(item, label=lbl)))
    return out


MAX_TABLE_ROWS = 40  # a committed CSV under the page's main table with up to this many rows is shown, a longer one is named


def _cards():
    "kgqa_nb.cards, imported on first use (the API index and the notebook rules need no library)."
    from kgqa_nb import cards
    return cards


_VERDICTS: dict[str, list] = {}


def _verdicts(root: Path) -> list:
    "Every claim judged from the committed files, once per build."
    if str(root) not in _VERDICTS: _VERDICTS[str(root)] = _cards().claim_verdicts(root=root)
    return _VERDICTS[str(root)]


def _link(rel: str) -> str: return '/../' + rel  # Sphinx reads '/x' from the book's source dir, and the repository is its parent


def artifact_name(name: str, root: Path) -> str | None:
    "The manifest artifact whose notebook is `name`, or None."
    try: manifest = yaml.safe_load((root / 'params' / 'manifest.yaml').read_text()) or {}
    except (OSError, yaml.YAMLError): return None
    return next((k for k, v in manifest.items() if isinstance(v, dict) and Path(str(v.get('notebook', ''))).name == name), None)


def result_card(artifact: str, root: Path) -> str:
    """Markdown opening an artifact page: `kgqa_nb.cards.artifact_card` (claim cards, figures, the main table rounded,
    provenance, or why nothing is committed) in a container the style sheet and the browser test find."""
    card = _cards().artifact_card(artifact, root, link=_link, verdicts=_verdicts(root))
    return f'## Result\n\n`````{{container}} nbbook-card\n{card}\n`````'


def committed_results(artifact: str, root: Path) -> str:
    """Markdown closing an artifact page: every file its published profiles committed that the card at the top does not
    show (the other tables rounded by `kgqa_nb.cards.card_table`, long ones named), and where its executed copy is."""
    cards = _cards()
    manifest = cards.load_manifest(root / 'params' / 'manifest.yaml')
    entry = cards.load_cards(root / 'params' / 'cards.yaml', manifest).get(artifact, {})
    parts, top, n = [], True, 0
    for profile, d in cards.published_profiles(root).items():
        files = cards.published_files(artifact, d, root, manifest)
        executed = root / 'results' / d / 'executed' / f'{artifact}.ipynb'
        if not files and not executed.is_file(): continue
        main, _ = cards.main_table(artifact, files, {artifact: entry}) if files and top else (None, '')
        found = []
        for f in files:
            shown = f.relative_to(root).as_posix()
            if top and (f == main or f.suffix == '.png'): found.append(f'`{shown}`: shown under *Result* at the top of the page.'); continue
            if f.suffix == '.png': found.append(f'![{shown}]({_link(shown)})\n\n`{shown}`'); continue
            if f.suffix != '.csv': found.append(f'`{shown}`'); continue
            df = pd.read_csv(f)
            if df.empty: found.append(f'`{shown}`: no rows, only the header (its provenance record says why)')
            elif len(df) <= MAX_TABLE_ROWS:
                n += 1
                found.append(f'`{shown}`:\n\n' + cards.card_table(df, key=f't{n}-', what=f.name))
            else: found.append(f'`{shown}`: {len(df):,} rows, {df.shape[1]} columns (not shown)')
        top = top and not files
        if executed.is_file(): found.append(f'The executed notebook, with its outputs: `{executed.relative_to(root).as_posix()}`.')
        head = ('### Paper profile\n\nWritten by `make figures` to `results/` and `figures/`.' if not d else
                f'### Profile `{profile}`\n\nWritten by `kgqa rerun --profile {profile}` to `results/{d}/` and `figures/{d}/`.')
        parts.append(head + '\n\n' + '\n\n'.join(found))
    if not parts: return ''
    return ('## Committed results\n\nArtifact notebooks are committed without outputs; these are the files its last run with '
            'a published profile wrote, as committed in the repository. Numbers are rounded to 3 significant digits; the '
            'CSV files hold them in full.\n\n' + '\n\n'.join(parts))


def imports_after_intro(cells: list) -> list:
    """A library chapter's cells with its leading code cells (the imports between the title and the first prose) moved
    under the first prose cell and collapsed (myst-nb's `hide-input`), so the page opens with what the chapter teaches."""
    if not cells or cells[0].cell_type != 'markdown': return cells
    k = 1  # the code cells (and the API targets before them) up to the first prose
    while k < len(cells) and (cells[k].cell_type == 'code' or cells[k].metadata.get('nbbook_target')): k += 1
    if k == 1 or k == len(cells): return cells
    for c in cells[1:k]:
        if c.cell_type == 'code': c.metadata['tags'] = [*c.metadata.get('tags', []), 'hide-input']
    return [cells[0], cells[k], *cells[1:k], *cells[k + 1:]]


def prepare_notebook(text: str, name: str = '', root: Path | None = None) -> str:
    """The notebook JSON `text` as the book shows it (see the module docstring); an artifact notebook `name` gets its
    committed results from the repository `root` appended."""
    nb = nbformat.reads(text, as_version=4)
    module = default_exp(nb)
    anchors: dict[int, list[str]] = {}
    if module:
        for i, item in notebook_definitions(nb): anchors.setdefault(i, []).append(item['label'])
    cells = []
    for i, c in enumerate(nb.cells):
        if c.cell_type == 'markdown':
            src = c.source.strip()
            if src.startswith('#') and src.endswith(' -') and '\n' not in src: continue
            cells.append(c)
            continue
        if c.cell_type != 'code':
            cells.append(c)
            continue
        d, code = cell_directives(c.source)
        if d.keys() & _DROP or d.get('include', '').lower() == 'false': continue
        tags = list(c.metadata.get('tags', []))
        if d.get('echo', '').lower() == 'false': tags.append('remove-input')
        if d.get('output', '').lower() == 'false': tags.append('remove-output')
        tags += [f'needs-{f}' for f in TEST_FLAGS if f in d]
        if tags: c.metadata['tags'] = tags
        c.source = code
        if i in anchors:
            cells.append(nbformat.v4.new_markdown_cell('\n'.join(f'({a})=' for a in anchors[i]), metadata={'nbbook_target': True}))
        cells.append(c)
    if module: cells = imports_after_intro(cells)
    artifact = artifact_name(name, root) if name and root and not module else None
    if artifact:
        at = next((i + 1 for i, c in enumerate(cells) if c.cell_type == 'markdown'), 0)  # under the title and its paragraph
        cells.insert(at, nbformat.v4.new_markdown_cell(result_card(artifact, root)))
        results = committed_results(artifact, root)
        if results: cells.append(nbformat.v4.new_markdown_cell(results))
    nb.cells = cells
    for c in nb.cells: c.pop('id', None)  # inserted cells have none; ids are not needed to render
    nb.nbformat_minor = min(nb.nbformat_minor, 4)
    return json.dumps(nb)


def on_source_read(app, docname: str, source: list[str]):
    path = Path(app.env.doc2path(docname))
    if path.suffix == '.ipynb':
        root = (Path(app.srcdir) / NBS).resolve().parent
        app.env.note_dependency(str(root / 'params' / 'manifest.yaml'))
        if artifact_name(path.name, root):  # its card reads the claims, the card choices and the published files
            for f in [*(root / 'params').glob('*.yaml'), *(root / 'results').rglob('*.csv'), *(root / 'figures').rglob('*.png')]:
                if not {'executed', 'runs'} & set(f.relative_to(root).parts): app.env.note_dependency(str(f))
        source[0] = prepare_notebook(source[0], path.name, root)


# ---------------------------------------------------------------------------------------------------------- API index

def _module_all(path: Path) -> list[str] | None:
    "The `__all__` list of a module file, read without importing it."
    try: tree = ast.parse(path.read_text())
    except (OSError, SyntaxError): return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == '__all__' for t in node.targets):
            try: return list(ast.literal_eval(node.value))
            except ValueError: return None
    return None


def _title(nb) -> tuple[str, str]:
    "The chapter's H1 title and its one-line `> subtitle`."
    for c in nb.cells:
        if c.cell_type == 'markdown':
            lines = c.source.strip().splitlines()
            title = next((l[2:].strip() for l in lines if l.startswith('# ')), '')
            sub = next((l[1:].strip() for l in lines if l.startswith('>')), '')
            return title, sub
    return '', ''


_CODE = re.compile(r'`([^`]+)`')


def _inline(text: str) -> list[nodes.Node]:
    "Docstring text with `backticks` shown as code."
    out, pos = [], 0
    for m in _CODE.finditer(text):
        if m.start() > pos: out.append(nodes.Text(text[pos:m.start()]))
        out.append(nodes.literal(m.group(1), m.group(1)))
        pos = m.end()
    if pos < len(text): out.append(nodes.Text(text[pos:]))
    return out


class ApiIndex(SphinxDirective):
    "One section per exported module: each public name, its signature and one-line doc, linked to the defining cell."
    has_content = False

    def _xref(self, target: str, child: nodes.Node, reftype='ref') -> addnodes.pending_xref:
        return addnodes.pending_xref('', child, refdomain='std', reftype=reftype, reftarget=target, refexplicit=True,
                                     refwarn=True, refdoc=self.env.docname)

    def run(self):
        srcdir = Path(self.env.srcdir)
        root = (srcdir / NBS).resolve().parent
        out = []
        for path in sorted((srcdir / NBS).glob('*.ipynb')):
            self.env.note_dependency(str(path))
            nb = nbformat.read(path, as_version=4)
            module = default_exp(nb)
            if not module: continue
            mod_file = root / PACKAGE / (module.replace('.', '/') + '.py')
            self.env.note_dependency(str(mod_file))
            public = _module_all(mod_file)
            defs = [item for _, item in notebook_definitions(nb)]
            shown = [d for d in defs if public is None or d['name'].split('.')[0] in public]
            title, sub = _title(nb)
            sec = nodes.section(ids=[nodes.make_id(f'api-{PACKAGE}.{module}')])
            sec += nodes.title('', '', nodes.literal(f'{PACKAGE}.{module}', f'{PACKAGE}.{module}'))
            para = nodes.paragraph()
            para += self._xref(f'/{NBS}/{path.stem}', nodes.inline(text=f'{path.stem}: {title}'), reftype='doc')
            if sub: para += [nodes.Text(' — ')] + _inline(sub)
            sec += para
            items = nodes.bullet_list(classes=['nbbook-api'])
            by_class: dict[str, nodes.bullet_list] = {}
            for d in shown:
                entry = nodes.paragraph()
                shown_name = d['name'] + d['sig']
                entry += nodes.literal('', '', self._xref(d['label'], nodes.Text(shown_name)))
                if d['kind'] == 'class': entry += nodes.emphasis(text=' class')
                if d['doc']: entry += [nodes.Text(' — ')] + _inline(d['doc'])
                li = nodes.list_item('', entry)
                cls = d['name'].split('.')[0] if d['kind'] == 'method' else None
                if cls in by_class: by_class[cls] += li
                else: items += li
                if d['kind'] == 'class':
                    by_class[d['name']] = nodes.bullet_list()
                    li += by_class[d['name']]
            for sub_list in by_class.values():
                if not sub_list.children: sub_list.parent.remove(sub_list)
            sec += items
            out.append(sec)
        return out


def setup(app):
    app.connect('source-read', on_source_read)
    app.add_directive('nbbook-api', ApiIndex)
    app.add_css_file('book.css')
    return dict(parallel_read_safe=True, parallel_write_safe=True)
