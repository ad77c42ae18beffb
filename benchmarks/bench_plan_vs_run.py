"""The plan against the run (issue 41, item 3). A small profile, Figure 4's reader as an LLM behind the local stand-in
server (`OfflineChatServer`) at a stated request limit, is planned by `kgqa_nb.plan.plan_profile`, then run by
`rerun.run_artifact` into a scratch folder. Compared: the calls the code makes (Figure 4 reads each question's
shortest-path triples and its GT triples once each, so two per row of its per-question CSV) with the plan's calls; the
requests the server received with the plan's API calls; the seconds between the first and the last request with the
plan's seconds for them (both at the server's limit, so the machine's speed hardly enters).

Before the dataset is built the plan counts the generated target, an upper bound (the zero-shot split keeps fewer). A
run builds the dataset first; the plan made after that reads the built split's sizes (`plan.read_count`), and its calls
are the run's. It counts every call as sent, where a prompt that repeats within the run (a question whose shortest-path
triples are exactly its GT triples) is answered by the cache: the API calls are an upper bound, reported here."""
import csv, os, tempfile, time
from pathlib import Path

RPM, LATENCY_S, MODEL = 1200, 0.05, 'gpt-4o-mini'


def measure(folder) -> dict:
    "Plan, then run, Figure 4's LLM reader against a stand-in server in `folder`; the planned and the measured numbers."
    import kgqa_nb.plan as pl, kgqa_nb.profiles as pr
    import kgqa_nb.readers  # noqa: F401  (the stand-in server answers as the offline reader model)
    from kgqa_nb.llm_server import OfflineChatServer
    from kgqa_nb.rerun import run_artifact
    folder = Path(folder)
    with OfflineChatServer(rpm=RPM, delay_s=LATENCY_S) as srv:
        prof = folder / 'plan-vs-run.yaml'
        prof.write_text(f'fig4_sp_reader:\n  reader: llm\n  reader_backend: openai\n  reader_model: {MODEL}\n  reader_base_url: {srv.url}\n'
                        f'plan:\n  limits: {{{MODEL}: {{rpm: {RPM}, seconds_per_call: {LATENCY_S}}}}}\n')
        datasets = [folder / 'out' / 'results' / 'datasets']  # where the run builds its dataset
        plan = lambda: pl.plan_profile(str(prof), ['fig4_sp_reader'], roots=[], prior=[], datasets=datasets)['artifacts'][0]['llm'][0]
        cold = plan()  # nothing built yet: the generation target
        t0 = time.perf_counter()
        run_artifact(pr.load_manifest()['fig4_sp_reader'], str(prof), out_root=folder / 'out')
        wall = time.perf_counter() - t0
        g = plan()  # the dataset the run built: its split sizes
        at = sorted(r['at'] for r in srv.requests)
        with open(folder / 'out' / 'results' / 'fig4_sp_reader_questions.csv') as f: rows = sum(1 for _ in csv.DictReader(f))
        made, sent = 2 * rows, len(srv.requests)
        span = at[-1] - at[0] if len(at) > 1 else 0.
        return dict(server=dict(rpm=RPM, latency_s=LATENCY_S, model=MODEL), questions_generated=cold['calls'] // 2, questions=rows,
                    planned_calls_before_the_dataset=cold['calls'], counted_before=cold.get('counted', ''),
                    planned_calls=g['calls'], counted=g.get('counted', ''), calls_made=made, planned_api_calls=cold['api_calls'], requests_sent=sent,
                    repeated_prompts_answered_by_cache=made - sent, planned_seconds=cold['seconds'],
                    planned_seconds_for_the_requests_sent=round(cold['seconds'] * sent / cold['api_calls'], 1) if cold['api_calls'] else None,
                    measured_seconds_first_to_last_request=round(span, 1), run_wall_seconds=round(wall, 1),
                    max_in_flight=srv.max_inflight, http_429=srv.throttled)


def run(quick: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as d:
        old = os.environ.get('KGQA_CACHE'); os.environ['KGQA_CACHE'] = str(Path(d) / 'cache')  # a cold LLM cache
        try: return measure(d)
        finally:
            if old is None: os.environ.pop('KGQA_CACHE', None)
            else: os.environ['KGQA_CACHE'] = old
