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


PLAN_TIME_FACTOR = 3  # the plan's seconds for the requests sent are within this factor of the measured seconds (plus SLACK_S of machine load)
SLACK_S = 30


def test_the_plan_is_the_runs_calls_once_the_dataset_is_built_and_the_server_sees_each_prompt_once(bench, tmp_path, monkeypatch):
    """Before the dataset is built the plan's calls bound Figure 4's reader's (the generated target); once the run has built
    it, the plan's calls are exactly the calls the run made. Every call reaches the server or the cache, the stated limit is
    kept, and the plan's seconds for the requests sent are within a stated factor of the measured ones."""
    for k in pr.LLM_ENV + ('KGQA_LLM_MODEL',): monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv('KGQA_CACHE', str(tmp_path / 'cache'))  # a cold LLM cache: nothing answered before
    m = bench.measure(tmp_path)
    assert m['questions'] > 0 and m['planned_calls_before_the_dataset'] == m['planned_api_calls'] > m['calls_made']
    assert 'upper bound' in m['counted_before'] and m['counted'].endswith('(exact)')
    assert m['planned_calls'] == m['calls_made'] == 2 * m['questions']
    planned, measured = m['planned_seconds_for_the_requests_sent'], m['measured_seconds_first_to_last_request']
    assert planned / PLAN_TIME_FACTOR <= measured <= PLAN_TIME_FACTOR * planned + SLACK_S
    assert 0 < m['requests_sent'] <= m['calls_made']
    assert m['requests_sent'] + m['repeated_prompts_answered_by_cache'] == m['calls_made']
    assert m['http_429'] == 0  # the client kept to the stated limit
