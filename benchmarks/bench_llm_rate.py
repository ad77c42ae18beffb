"""LLM calls at a server's rate limit (issue 30): the stand-in server (`OfflineChatServer`) admits 600 requests a minute
(a token bucket holding one second's worth; HTTP 429 with Retry-After beyond it) and takes 1 s per answer, as a hosted
model at a low tier would. The client learns the limit from the rate-limit headers, spaces its starts to it and keeps
enough calls in flight to reach it (`RateGate`). Baseline, same server, same run: the client as it was, a fixed 8 calls
in flight.

Two servers that state nothing (issue 41, item 6), where the gate finds the capacity by AIMD from its default 8 calls in
flight: the same 600/min limit without rate-limit headers (429 + Retry-After only, as a proxy in front of a model would),
and a queueing server like llama.cpp (`--parallel 10`) or vLLM: 10 answers at once, 1 s each, the rest wait in its queue,
nothing refused: a capacity of 600/min as well. The share reached is reported against that capacity.

Reported per run: requests, wall seconds, the achieved rate (per minute, and as a share of the limit) from the wall time
and from the ledger's own timestamps, the time spent waiting for the limit (the wall seconds during which the gate held
starts back for the rate, counted once however many calls waited), calls in flight at most, HTTP 429s, and the
checks that no call was lost or doubled: the server admitted exactly one request per prompt, and the ledger (one line per
answered call) and the cache (one record per reply) hold the same keys, one per prompt."""
import json, tempfile, time
from datetime import datetime
from pathlib import Path

from kgqa_nb.llm import LLMClient, triples_lookup_messages
from kgqa_nb.llm_spend import read_ledger
from kgqa_nb.llm_server import OfflineChatServer

RPM, LATENCY_S = 600, 1.0


def prompts(n: int) -> list:
    world = [(f'City{i}', 'country', f'Country{i % 97}') for i in range(n)]
    return [triples_lookup_messages(world[max(0, i - 3):i + 3], (f'City{i}', 'country', '?')) for i in range(n)]


def ledger_rate(path: Path) -> float:
    "Calls per minute between the first call's start and the last call's end, from the ledger's timestamps."
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ends = [datetime.fromisoformat(r['time']).timestamp() for r in rows]
    starts = [e - r['seconds'] for e, r in zip(ends, rows)]
    return len(rows) / (max(ends) - min(starts)) * 60


SERVERS = dict(stated=dict(rpm=RPM, burst_s=1.0), no_headers=dict(rpm=RPM, burst_s=1.0, rate_headers=False), queueing=dict(slots=10, rate_headers=False))


def one_run(n: int, max_concurrency: int, folder: Path, server: str = 'stated') -> dict:
    msgs, said = prompts(n), []
    with OfflineChatServer(delay_s=LATENCY_S, **SERVERS[server]) as srv:
        c = LLMClient('openai', model='kgqa-offline', base_url=srv.url, cache_dir=folder / 'llm', ledger=folder / 'calls.jsonl',
                      concurrency=min(8, max_concurrency), max_concurrency=max_concurrency, say=said.append)
        c._openai()  # the openai package's one-time import (1-3 s on a loaded machine) is not part of the rate
        t0 = time.perf_counter(); res = c.chat_many(msgs); wall = time.perf_counter() - t0
    led, cache_keys = folder / 'calls.jsonl', [json.loads(x)['key'] for x in c.cache_path.read_text().splitlines()]
    ledger_keys = [json.loads(x)['key'] for x in led.read_text().splitlines()]
    g = c.rate_stats()
    return dict(requests=n, wall_s=round(wall, 2), per_min=round(n / wall * 60, 1), share_of_limit=round(n / wall * 60 / RPM, 3),
                ledger_per_min=round(ledger_rate(led), 1), held_by_rate_limit_s=g['held_s'], starts_that_waited=g['waits'],
                peak_in_flight=g['peak_inflight'], http_429=g['throttled'], server_admitted=srv.admitted, aimd_steps_up=g['increases'],
                aimd_steps_down=g['decreases'], server_slots_busy_at_most=srv.max_busy if server == 'queueing' else None,
                ledger_calls=read_ledger(led)['calls'], cache_records=len(cache_keys),
                no_call_lost_or_doubled=(srv.admitted == n and sorted(ledger_keys) == sorted(cache_keys) and len(set(cache_keys)) == n
                                         and all(r.text for r in res)),
                closing_line=said[-1] if said else None)


def run(quick: bool = False) -> dict:
    n, n_base = (200, 80) if quick else (600, 240)
    with tempfile.TemporaryDirectory() as d:
        at_limit = one_run(n, 512, Path(d) / 'gate')
        fixed8 = one_run(n_base, 8, Path(d) / 'fixed8')
        blind = {s: one_run(n, 512, Path(d) / s, s) for s in ('no_headers', 'queueing')}
    return dict(server=dict(rpm=RPM, latency_s=LATENCY_S, bucket_s=1.0), rate_gate=at_limit, baseline_fixed_8=fixed8,
                speedup_vs_fixed_8=round(at_limit['per_min'] / fixed8['per_min'], 2),
                no_headers_aimd=dict(server='600/min, 429 + Retry-After only', **blind['no_headers']),
                queueing_aimd=dict(server='10 slots x 1 s (capacity 600/min), queues the rest, refuses nothing', **blind['queueing']))


if __name__ == '__main__': print(json.dumps(run(quick=True), indent=1))
