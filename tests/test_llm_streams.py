"""Every LLM role concurrent (issue 41, item 1): each role's pipeline against the local rate-limited stand-in server
(`OfflineChatServer` on 127.0.0.1, stated limits, 50 ms a reply), the workloads of benchmarks/bench_llm_throughput.py.
The server counts the requests in flight (events, not times): the role's pipeline has more than one in flight at its peak,
the one-by-one loop exactly one, and both give the same results with every call made once (none lost, none doubled)."""
import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location('bench_llm_throughput', HERE.parent / 'benchmarks' / 'bench_llm_throughput.py')
bench = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(bench)
SERVER = dict(rpm=6000, delay_s=0.05)  # a stated limit (rate-limit headers) and a reply latency the calls can overlap in


@pytest.mark.parametrize('role', bench.ROLES)
def test_role_runs_its_questions_side_by_side_with_the_loops_results(role, tmp_path):
    par = bench.run_role(role, 8, tmp_path / 'par', **SERVER)
    seq = bench.run_role(role, 8, tmp_path / 'seq', parallel=False, **SERVER)
    assert par['results'] == seq['results']
    assert par['requests'] == seq['requests'] >= 8
    assert seq['peak_in_flight'] == 1  # the measurement sees a serial role as one
    assert par['peak_in_flight'] > 1, f'{role}: at most {par["peak_in_flight"]} call in flight'
    assert (par['lost'], par['doubled'], par['server_admitted']) == (0, 0, par['requests'])


def test_an_unknown_role_is_named(tmp_path):
    with pytest.raises(ValueError, match="role must be one of"): bench.workload('writer', 2, tmp_path)
