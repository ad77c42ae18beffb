"""`make book`: the notebooks of nbs/ rendered by Sphinx + myst-nb (book/), built here into a temporary folder with warnings
as errors. Every notebook has a page, chapters show their committed outputs and no nbdev directive, the search index
and the API index exist and every API link lands on its cell, and headless Chromium typesets the maths with the offline
MathJax (skipped where Debian's chromium is missing and cannot be installed; under CI=true that is a failure instead)."""
import ast, html, importlib.util, json, os, re, shutil, subprocess, sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / 'nbs').glob('*.ipynb'))
_spec = importlib.util.spec_from_file_location('nbbook', ROOT / 'book' / '_ext' / 'nbbook.py')
nbbook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nbbook)


@pytest.fixture(scope='module')
def book(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp('book')
    env = dict(os.environ, HF_HUB_OFFLINE='1')
    r = subprocess.run([sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html', str(ROOT / 'book'), str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, f'sphinx-build failed (warnings are errors):\n{r.stderr[-6000:]}'
    return out


class _Text(HTMLParser):
    "The text of a page as a reader sees it (no scripts or styles)."
    def __init__(self):
        super().__init__(); self.parts, self._skip = [], 0
    def handle_starttag(self, tag, attrs):
        if tag in ('script', 'style'): self._skip += 1
    def handle_endtag(self, tag):
        if tag in ('script', 'style'): self._skip -= 1
    def handle_data(self, data):
        if not self._skip: self.parts.append(data)


def page_text(path: Path) -> str:
    p = _Text(); p.feed(path.read_text()); return ''.join(p.parts)


def _squash(s: str) -> str: return ' '.join(s.split())


def first_output_line(nb) -> str | None:
    "A line of text the notebook's committed outputs show (the first non-blank one), or None."
    for c in nb.cells:
        for o in c.get('outputs', []):
            text = o.get('text') if o.output_type == 'stream' else o.get('data', {}).get('text/plain')
            if text and 'text/html' not in o.get('data', {}):
                line = next((l.strip() for l in ''.join(text).splitlines() if l.strip()), None)
                if line: return line
    return None


def test_every_notebook_has_a_page_in_the_toc(book):
    index = (book / 'index.html').read_text()
    for nb in NBS:
        assert (book / 'nbs' / f'{nb.stem}.html').exists(), nb.name
        assert f'href="nbs/{nb.stem}.html"' in index, f'{nb.name} missing from the table of contents'
    chapters = [nb.stem for nb in NBS if int(nb.stem[:2]) < 50]
    positions = [index.index(f'href="nbs/{s}.html"') for s in chapters]
    assert positions == sorted(positions), 'library chapters are not in notebook order'


@pytest.mark.parametrize('nb', [p for p in NBS if first_output_line(nbformat.read(p, as_version=4))], ids=lambda p: p.stem)
def test_chapter_pages_show_their_committed_outputs(book, nb):
    line = first_output_line(nbformat.read(nb, as_version=4))
    assert _squash(line) in _squash(page_text(book / 'nbs' / f'{nb.stem}.html'))


def test_no_nbdev_directive_is_shown(book):
    for nb in NBS:
        text = page_text(book / 'nbs' / f'{nb.stem}.html')
        shown = re.findall(r'(?m)^\s*#\s*\|.*$', text)
        assert shown == [], f'{nb.name}: {shown[:3]}'
        assert 'default_exp' not in text, nb.name


def test_search_index_exists(book):
    assert (book / 'search.html').exists()
    index = (book / 'searchindex.js').read_text()
    assert 'isomorphism' in index.lower()


def test_artifact_pages_show_their_committed_figures(book):
    "Artifact notebooks have no outputs: each page ends with the figures its published profiles committed."
    import yaml
    manifest = yaml.safe_load((ROOT / 'params' / 'manifest.yaml').read_text())
    shown = 0
    for entry in manifest.values():
        page = (book / 'nbs' / f'{Path(entry["notebook"]).stem}.html').read_text()
        for out in entry['outputs']:
            if not out.startswith('figures/') or not out.endswith('.png'): continue
            for fig in [ROOT / out, *(ROOT / 'figures').glob(f'*/{out[len("figures/"):]}')]:
                if not fig.is_file(): continue
                assert f'<code class="docutils literal notranslate"><span class="pre">{fig.relative_to(ROOT).as_posix()}</span>' in page
                srcs = re.findall(r'<img alt="' + re.escape(fig.relative_to(ROOT).as_posix()) + r'" src="\.\./(_images/[^"]+)"', page)
                assert srcs and (book / srcs[0]).read_bytes() == fig.read_bytes(), fig
                shown += 1
    assert shown > 0


def _module_all(module: str) -> list[str]:
    tree = ast.parse((ROOT / 'kgqa_nb' / f'{module}.py').read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == '__all__' for t in n.targets))


def test_api_index_links_every_public_name_to_its_cell(book):
    api = (book / 'api.html').read_text()
    links = re.findall(r'<a class="reference internal" href="(nbs/[^"#]+\.html)#([^"]+)"><span class="std std-ref">'
                       r'<span class="pre">([^<(]+)', api)
    shown = {name for _, _, name in links}
    pages: dict[str, str] = {}
    for page, anchor, name in links:
        text = pages.setdefault(page, (book / page).read_text())
        assert f'id="{anchor}"' in text, f'{name}: no anchor {anchor} in {page}'
    for nb in NBS:
        module = nbbook.default_exp(nbformat.read(nb, as_version=4))
        if not module: continue
        assert f'nbs/{nb.stem}.html' in api, nb.name
        missing = [n for n in _module_all(module) if html.escape(n) not in shown]
        assert missing == [], f'kgqa_nb.{module}: {missing} not in the API index'


def _nb(*cells) -> str:
    return nbformat.writes(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(c[3:]) if c.startswith('md:') else nbformat.v4.new_code_cell(c) for c in cells]))


def test_cells_are_shown_the_way_nbdev_shows_them():
    "The rules of the book's notebook hook, on a small notebook."
    text = _nb('md:# Title\n> subtitle', '#| default_exp demo', '#| export\nimport os',
               '#| export\ndef f(x, y=1):\n    "Doc of f."\n    return x', '#| hide\nsecret = 1', '#|hide\nsecret = 2',
               '#| slow\n#| data\nz = f(1)', '#| echo: false\nshown_output = 1', 'a = 1\nb = 2  #| hide_line',
               'md:## Heading to drop -', '#| exporti\ndef _g(): pass')
    out = json.loads(nbbook.prepare_notebook(text))
    srcs = [''.join(c['source']) for c in out['cells']]
    assert not any('secret' in s or 'default_exp' in s or 'Heading to drop' in s for s in srcs)
    assert not any(re.search(r'(?m)^\s*#\s*\|', s) for s in srcs)
    assert 'import os' in srcs and 'a = 1' in srcs and 'def _g(): pass' in srcs
    i = srcs.index('def f(x, y=1):\n    "Doc of f."\n    return x')
    assert srcs[i - 1] == '(kgqa_nb.demo.f)=' and out['cells'][i - 1]['cell_type'] == 'markdown'
    tags = {s: c['metadata'].get('tags', []) for s, c in zip(srcs, out['cells'])}
    assert tags['z = f(1)'] == ['needs-slow', 'needs-data'] and tags['shown_output = 1'] == ['remove-input']
    assert nbbook.cell_definitions('def f(x, y=1):\n    "Doc of f."')[0] == dict(name='f', kind='function', sig='(x, y=…)', doc='Doc of f.')
    nb = nbformat.reads(_nb('#| default_exp demo', '#| export\nFILES = 1\ndef files(): pass'), as_version=4)
    assert [d['label'] for _, d in nbbook.notebook_definitions(nb)] == ['kgqa_nb.demo.files', 'kgqa_nb.demo.files-2']


def _chromium() -> str:
    exe = shutil.which('chromium') or shutil.which('chromium-browser')
    if exe: return exe
    why = "needs Debian's chromium for the browser check (`make browser` installs it as root)"
    if os.environ.get('CI', '').lower() in ('true', '1', 'yes'): pytest.fail(f'CI must run the browser check: {why}')
    pytest.skip(why)


def dump_dom(chromium: str, page: Path) -> str:
    "The page's DOM after its scripts ran (MathJax included), from headless Chromium."
    r = subprocess.run([chromium, '--headless', '--no-sandbox', '--disable-gpu', '--virtual-time-budget=10000', '--dump-dom',
                        page.as_uri()], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and '</html>' in r.stdout, r.stderr[-3000:]
    return r.stdout


@pytest.mark.parametrize('stem', ['08_isomorphism', '02_toyworld'])
def test_browser_typesets_the_maths_offline(book, stem):
    chromium = _chromium()
    page = book / 'nbs' / f'{stem}.html'
    raw = page.read_text()
    n_math = raw.count('class="math notranslate nohighlight"')
    assert n_math > 0 and '_static/mathjax/tex-chtml.js' in raw  # the local MathJax, not a CDN
    assert (book / '_static' / 'mathjax' / 'tex-chtml.js').exists()
    dom = dump_dom(chromium, page)
    assert dom.count('<mjx-container') >= n_math, 'MathJax did not typeset every formula'
    assert '\\mathcal' not in dom, 'raw TeX left on the page'
    assert not re.search(r'class="math notranslate nohighlight">\s*\\[(\[]', dom), 'a formula left as raw TeX'
    nb = nbformat.read(ROOT / 'nbs' / f'{stem}.ipynb', as_version=4)
    line = first_output_line(nb)
    if line: assert _squash(html.escape(line, quote=False)) in _squash(dom)
