# Sphinx configuration of the kgqa_nb book (`make book`): every notebook of nbs/ with its committed outputs, not re-executed.
# `nbs` in this folder is a link to the repository's nbs/, so the notebooks are read where they are.
import configparser
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / '_ext'))

_settings = configparser.ConfigParser()
_settings.read(HERE.parent / 'settings.ini')
project = _settings['DEFAULT']['title']
copyright = _settings['DEFAULT']['copyright']
author = _settings['DEFAULT']['author']
release = version = _settings['DEFAULT']['version']

extensions = ['myst_nb', 'sphinx.ext.mathjax', 'nbbook']
root_doc = 'index'
exclude_patterns = ['_build', '**/.ipynb_checkpoints']

# myst-nb: render the committed outputs only; maths with $…$, $$…$$ and amsmath environments
nb_execution_mode = 'off'
nb_merge_streams = True
myst_enable_extensions = ['dollarmath', 'amsmath']
myst_heading_anchors = 3
myst_footnote_sort = False  # a card table's footnotes (kgqa_nb.cards) stay under the table, not at the page's end

# MathJax 3 offline: the tex-chtml component and its fonts come from the pinned PyPI package sphinx-mathjax-offline
# (its import name has hyphens, so it is found by file, not loaded as an extension); its static/ folder is copied into
# _static/, so the book needs no CDN.
_mathjax = importlib.util.find_spec('sphinx-mathjax-offline')
if _mathjax is None or not _mathjax.submodule_search_locations:
    raise RuntimeError('the book needs MathJax from the package sphinx-mathjax-offline: run make install')
_mathjax_static = Path(list(_mathjax.submodule_search_locations)[0]) / 'static'
mathjax_path = 'mathjax/tex-chtml.js'

html_theme = 'sphinx_book_theme'
html_title = 'kgqa_nb — the book'
html_static_path = ['_static', str(_mathjax_static)]
html_last_updated_fmt = None
html_theme_options = {
    'home_page_in_toc': True,
    'show_toc_level': 2,
    'use_download_button': True,
    'use_fullscreen_button': False,
    'navbar_persistent': [],  # pydata-sphinx-theme 0.20 adds a second search field in a top bar unless this is set
}
