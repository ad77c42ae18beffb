"""Shared pytest set-up: quiet progress bars, no network for Hugging Face, and the project's one policy for tests that need
something a machine may lack, the same four flags as the notebooks (settings.ini `tst_flags`):

    @pytest.mark.data('codex', 'ilpc2022')   # folders of the data dir; skipped (with the reason) when one is missing
    @pytest.mark.slow                         # minutes of CPU; run with `pytest --flags slow`
    @pytest.mark.gpu                          # skipped without CUDA
    @pytest.mark.llm                          # calls a real LLM API; run with `pytest --flags llm` and a key in the environment

No test guards itself with `if path.exists()` or its own environment switch.
"""
import os
os.environ.setdefault('KGQA_PROGRESS', '0')
os.environ.setdefault('HF_HUB_OFFLINE', '1')

import pytest

MARKERS = {
    'data': 'data(*folders): needs these folders of the data dir (kgqa_nb.core.data_dir); skipped when one is missing',
    'slow': 'slow: minutes of CPU; runs only with --flags slow',
    'gpu': 'gpu: needs a CUDA GPU; skipped without one',
    'llm': 'llm: calls a real LLM API; runs only with --flags llm',
}


def pytest_addoption(parser):
    parser.addoption('--flags', nargs='*', default=[], help='test flags to run that are skipped by default: slow, llm')


def pytest_configure(config):
    for m in MARKERS.values(): config.addinivalue_line('markers', m)


def skip_reason(item, flags) -> str | None:
    "Why `item` cannot run here (None when it can)."
    for name in ('slow', 'llm'):
        if item.get_closest_marker(name) and name not in flags: return f'{MARKERS[name].split(": ", 1)[1]}'
    if item.get_closest_marker('gpu'):
        import torch
        if not torch.cuda.is_available(): return 'needs a CUDA GPU'
    m = item.get_closest_marker('data')
    if m:
        from kgqa_nb.core import data_dir
        missing = [f for f in (m.args or ('',)) if not data_dir(f).exists()]
        if missing: return f'needs {", ".join(repr(f) for f in missing if f) or "the data dir"} under {data_dir()} (set KGQA_DATA)'
    return None


def pytest_runtest_setup(item):
    why = skip_reason(item, set(item.config.getoption('--flags') or []))
    if why: pytest.skip(why)
