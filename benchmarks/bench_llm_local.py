"""The local LLM server (llama.cpp serving the registry GGUF, kgqa_nb.llm_local): prompt and generation tokens/s and seconds per
call per role, through the project's LLM client (cache off), against the offline stand-in server a user has without it.

Prompt speed: a call with max_tokens=1 on a prompt the server has not seen (its time is prompt processing); generation speed:
the same prompt again with the role's reply length (llama.cpp reuses the evaluated prompt, so that call's time is generation).
The server runs one thread: on a 2-core machine shared with other work, llama.cpp's threads wait for each other at every
layer and a second thread made generation 6-17x slower (16 tokens: 1.6 s with one thread, 9.7-26.5 s with two, same prompt,
load average 10). The load average before and after is recorded with the numbers.
Skipped, with the reason, where `make llm-local` has not installed the server and the model."""
import os, time

from kgqa_nb.llm import OfflineChatServer
from kgqa_nb.llm_local import REGISTRY_MODEL, LocalLLMServer, local_llm_missing

THREADS = 1  # llama.cpp threads of the server (see above)


def roles():
    "(role, endpoint, request payload, reply tokens) for the roles the companion runs, small inputs."
    from kgqa_nb import generate, kgrag, metrics, readers
    T = [('Alien (Q103569)', 'director (P57)', 'Ridley Scott (Q56005)'), ('Ridley Scott (Q56005)', 'place of birth (P19)', 'South Shields (Q646)'),
         ('Alien (Q103569)', 'cast member (P161)', 'Sigourney Weaver (Q102642)'), ('Alien (Q103569)', 'composer (P86)', 'Jerry Goldsmith (Q178517)')]
    return [('reader (few-shot completion)', 'complete', readers.few_shot_prompt('Where was the director of Alien born?', T), 16),
            ('reader (chat)', 'chat', readers.reader_messages('Where was the director of Alien born?', T), 32),
            ('subgraphrag reader (chat)', 'chat', readers.subgraphrag_messages('Where was the director of Alien born?', T), 64),
            ('LASM judge (chat)', 'chat', metrics.lasm_messages('Who directed Alien?', 'R. Scott', ['Ridley Scott']), 4),
            ('paraphraser (chat)', 'chat', generate.paraphrase_prompt('Who directed The Salt Harbour?'), 32),
            ('decomposer (chat)', 'chat', kgrag.decomposition_messages('Who directed the films that Tom Hanks acted in?'), 96),
            ('datapoint writer (chat)', 'chat', generate.datapoint_prompt(generate._EX_GRAPH_A, 2), 128)]


def _call(client, endpoint, payload, **kw):
    t0 = time.perf_counter()
    r = client.complete(payload, **kw) if endpoint == 'complete' else client.chat(payload, **kw)
    return r, time.perf_counter() - t0


def run(quick: bool = False) -> dict:
    if (why := local_llm_missing()): return dict(skipped=why)
    reps = 1 if quick else 3
    rows, tot = {}, dict(prompt_tokens=0, prompt_s=0.0, gen_tokens=0, gen_s=0.0)
    load_before = round(os.getloadavg()[0], 2)
    with LocalLLMServer(threads=THREADS) as srv:
        c = srv.client(cache=False, timeout=600)
        for role, endpoint, payload, n_out in roles():
            p_tok = p_s = g_tok = g_s = 0; per_call = []
            for i in range(reps):
                salt = f'{i} ' * (i > 0)  # a fresh prompt per repetition, so the first call pays its prompt in full
                pl = salt + payload if endpoint == 'complete' else [dict(payload[0], content=salt + payload[0]['content'])] + payload[1:]
                r1, s1 = _call(c, endpoint, pl, max_tokens=1)
                r2, s2 = _call(c, endpoint, pl, max_tokens=n_out)
                p_tok += r1.usage['prompt_tokens']; p_s += s1
                g_tok += r2.usage['completion_tokens']; g_s += s2; per_call.append(s2)
            rows[role] = dict(prompt_tokens=p_tok // reps, completion_tokens=g_tok // reps, prompt_tok_per_s=round(p_tok / p_s, 1),
                              gen_tok_per_s=round(g_tok / g_s, 1) if g_tok else None, s_per_call=round(sum(per_call) / reps, 2))
            for k, v in (('prompt_tokens', p_tok), ('prompt_s', p_s), ('gen_tokens', g_tok), ('gen_s', g_s)): tot[k] += v
    # the baseline a user has without the local server: the offline stand-in, same client and requests
    with OfflineChatServer() as off:
        from kgqa_nb.llm import LLMClient
        oc = LLMClient('openai', model='kgqa-offline', base_url=off.url, cache=False)
        t0 = time.perf_counter(); n = 0
        for role, endpoint, payload, n_out in roles():
            for _ in range(reps): _call(oc, endpoint, payload, max_tokens=n_out); n += 1
        offline_s = (time.perf_counter() - t0) / n
    mean_call = sum(r['s_per_call'] for r in rows.values()) / len(rows)
    return dict(model=REGISTRY_MODEL.describe(), server=f'llama-cpp-python (llama_cpp.server), {THREADS} thread(s), CPU', repetitions=reps,
                load_avg_1min=dict(before=load_before, after=round(os.getloadavg()[0], 2), cpu_count=os.cpu_count()),
                prompt_tok_per_s=round(tot['prompt_tokens'] / tot['prompt_s'], 1), gen_tok_per_s=round(tot['gen_tokens'] / tot['gen_s'], 1),
                roles=rows, offline_stand_in_s_per_call=round(offline_s, 4),
                ratio_local_over_offline_s_per_call=round(mean_call / offline_s, 1))
