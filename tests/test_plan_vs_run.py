"""Issue 41, item 3: a small profile planned, then run against the local stand-in server with a request limit
(benchmarks/bench_plan_vs_run.py, which `make bench` runs and reports with its times)."""
import importlib.util
from pathlib import Path

import pytest

import kgqa_nb.profiles as pr

BENCH = Path(__file__).resolve().parent.parent / 'benchmarks' / 'bench_plan_vs_run.py'


@pytest.fixture
def bench():
    spec = importlib.util.spec_from_file_location('bench_plan_vs_run', BENCH)
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod


def test_the_plan_never_undercounts_the_calls_and_the_server_sees_each_prompt_once(bench, tmp_path, monkeypatch):
    """The plan's calls bound the calls Figure 4's reader makes (the plan counts the generated target; the run reads what the
    dataset's filters keep), every call the run makes reaches the server or the cache, and the stated limit is kept."""
    for k in pr.LLM_ENV + ('KGQA_LLM_MODEL',): monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv('KGQA_CACHE', str(tmp_path / 'cache'))  # a cold LLM cache: nothing answered before
    m = bench.measure(tmp_path)
    assert m['questions'] > 0 and m['planned_calls'] == m['planned_api_calls'] >= m['calls_made']
    assert 0 < m['requests_sent'] <= m['calls_made']
    assert m['requests_sent'] + m['repeated_prompts_answered_by_cache'] == m['calls_made']
    assert m['http_429'] == 0  # the client kept to the stated limit
