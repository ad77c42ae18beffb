"""The local LLM server (llama.cpp serving the registry GGUF, kgqa_nb.llm_local): prompt and generation tokens/s and seconds per
call per role, through the project's LLM client (cache off), against the offline stand-in server a user has without it.

Prompt speed: a call with max_tokens=1 on a prompt the server has not seen (its time is prompt processing); generation speed:
the same prompt again with the role's reply length (llama.cpp reuses the evaluated prompt, so that call's time is generation).
The server runs one thread: on a 2-core machine shared with other work, llama.cpp's threads wait for each other at every
layer and a second thread made generation 6-17x slower (16 tokens: 1.6 s with one thread, 9.7-26.5 s with two, same prompt,
load average 10). The load average before and after is recorded with the numbers.

Parser outcomes (`parsers`): every LLM role the project has gets `N_PROMPTS` real prompts built by the library's own message
builders (toy-world facts, MetaQA-style questions), sent as the role is run (chat; the few-shot reader and the KG-RAG floor
row's answerer through completions), and every reply is read by the role's own parser: the outcome is 'ok' or the parser's
named failure reason (KG-RAG `ISSUES`, ULTRAG `WRITE_ERRORS`, generate `ParseError.reason`, KGQAGen `ReplyError.reason`,
`few_shot_status`). Roles whose parser has no failure reason record how the library reads the unusable reply (e.g. the
decider reads a reply without a verdict as 'sufficient'). Reply lengths are the role's own, capped at `MAX_REPLY` tokens
so the run fits minutes on a CPU (a decomposition cut there is a 'no_end_marker', as it would be at the role's own limit).
llama-cpp-python 0.3.36's `gemma` chat format drops system messages (at debug level only): the first run of this table
sent the ULTRAG writer's prompt as ~41 tokens, without its relation table. The server now serves `kgqa-gemma`, which folds
the system text into the first user turn (`llm_local.fold_system`), so every chat role's instructions reach the model.
Skipped, with the reason, where `make llm-local` has not installed the server and the model."""
import os, re, time
from collections import Counter

from kgqa_nb.llm_server import OfflineChatServer
from kgqa_nb.llm_local import REGISTRY_MODEL, LocalLLMServer, local_llm_missing

THREADS = 1  # llama.cpp threads of the server (see above)
N_PROMPTS = 5  # prompts per role in the parser-outcome table
MAX_REPLY = 128  # reply tokens at most per call in the parser-outcome table (roles with a smaller limit keep theirs)


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


def _reason(parse):
    "An outcome function: 'ok' when `parse(text)` returns, else the named reason of what it raised."
    def f(text, finish):
        try: parse(text); return 'ok'
        except Exception as e:
            if getattr(e, 'reason', None): return e.reason
            raise  # a parser that crashes on a reply is a bug the table must not hide
    return f


def role_prompts(n: int = N_PROMPTS) -> list:
    """(role, endpoint, [payload] * n, sampling, outcome(text, finish_reason) -> 'ok' | named reason) for every LLM role;
    payloads from the library's own message builders, outcomes from the role's own parser."""
    from kgqa_nb import generate, kgqagen, kgrag, metrics, readers, ultrag
    from kgqa_nb.dsl import DSLSyntaxError, parse_query
    from kgqa_nb.loaders import load_kg
    from kgqa_nb.sampling import subgraph_text
    kg = load_kg('toyworld')
    # n facts (not 'instance of') of n different heads, and each head's first 8 facts as its neighbourhood
    heads, picks = set(), []
    for e in range(0, len(kg.head), 97):
        h = int(kg.head[e])
        if kg.relation_labels[kg.rel[e]] != 'instance of' and h not in heads: heads.add(h); picks.append(e)
        if len(picks) == n: break
    nbhd = {h: [int(x) for x in (kg.head == h).nonzero()[0][:8]] for h in heads}
    facts = []  # (edge, question, neighbourhood edges, text triples)
    for e in picks:
        h, r, t = kg.triple_text(e)
        ph = generate.relation_phrasing(kg.relation_ids[kg.rel[e]], kg.relation_labels[kg.rel[e]])
        x = kg.entity_labels[kg.head[e]]
        q = ph.ask_tail.format(x=x) if ph.ask_tail else f'What is {ph.of_tail.format(x=x)}?'
        edges = list(dict.fromkeys([e] + nbhd[int(kg.head[e])]))
        facts.append((e, q, edges, [kg.triple_text(x) for x in edges]))
    bare = lambda tt: [(readers.item_label(a), readers.item_label(b), readers.item_label(c)) for a, b, c in tt]

    # KG-RAG (MetaQA-style movie questions, triples as its retriever writes them)
    metaqa = [('who directed the movies starred by [Tom Hanks]', 'Which movies did Tom Hanks star in?',
               ['(Forrest Gump, starred actors, Tom Hanks)', '(Big, starred actors, Tom Hanks)', '(Forrest Gump, directed by, Robert Zemeckis)'], 'Robert Zemeckis'),
              ('what genres are the films written by [Nora Ephron]', 'What genre is Sleepless in Seattle?',
               ['(Sleepless in Seattle, written by, Nora Ephron)', '(Sleepless in Seattle, has genre, Romance)', '(Julie & Julia, has genre, Drama)'], 'Romance'),
              ('which year was [Blade Runner] released', 'When was Blade Runner released?',
               ['(Blade Runner, release year, 1982)', '(Blade Runner, directed by, Ridley Scott)'], '1982'),
              ('what language is [Amelie] in', 'What language is Amelie in?',
               ['(Amelie, in language, French)', '(Amelie, directed by, Jean-Pierre Jeunet)', '(Amelie, release year, 2001)'], 'French'),
              ('who are the co-stars of [Keanu Reeves]', 'Who starred in The Matrix?',
               ['(The Matrix, starred actors, Keanu Reeves)', '(The Matrix, starred actors, Carrie-Anne Moss)', '(Speed, starred actors, Sandra Bullock)'], 'Carrie-Anne Moss')][:n]
    sub_answer = lambda tr: (lambda text, finish: ','.join(kgrag.parse_answer(text, kgrag.triple_entities(tr, kgrag.RELATION_PHRASES))[1]) or 'ok')
    issues = lambda parse: (lambda text, finish: ','.join(parse(text)[-1]) or 'ok')

    def writer(seeds):  # as `ultrag.LLMQueryWriter.write` reads a reply
        def f(text, finish):
            try:
                qtext, mentions = ultrag.parse_writer_reply(text)
                try: q = parse_query(qtext)
                except DSLSyntaxError: return 'syntax'
                ultrag.check_query(q, kg, seeds, mentions); return 'ok'
            except ultrag.QueryWriteError as err: return err.reason
        return f

    def tops(e):
        t = int(kg.tail[e]); others = [int(x) for x in kg.tail[kg.head == kg.head[e]][:4] if int(x) != t]
        return [(kg.entity_ids[t], 0.91)] + [(kg.entity_ids[o], round(0.6 / (i + 2), 3)) for i, o in enumerate(others)]
    def arbitrated(top):  # as `ultrag.LLMArbitrator.arbitrate` keeps the offered IDs of a reply
        offered = {x for x, _ in top}
        return lambda text, finish: 'ok' if any(x in offered for x in re.findall(r'Q[0-9]+', text)) else 'no offered ID (empty answer set)'
    decided = lambda text, finish: 'ok' if re.search(r'\b(IN)?SUFFICIENT\b', text.upper()) else 'no verdict (read as SUFFICIENT)'
    judged = lambda text, finish: 'ok' if re.match(r'\W*(yes|no|true|false|equivalent)\b', text or '', re.I) else 'no yes/no (read as no)'
    ans_lines = lambda text, finish: 'ok' if not readers.needs_double_check(text) else 'no ans: line (double check)'
    few_shot = lambda text, finish: readers.few_shot_status(text, finish)

    lasm = [('Who directed Alien?', 'R. Scott', ['Ridley Scott']), ('When was Blade Runner released?', '1982', ['1982']),
            ('What language is Amelie in?', 'Spanish', ['French']), ('Who wrote Hamlet?', 'Shakespeare', ['William Shakespeare']),
            ('What is the capital of France?', 'Lyon', ['Paris'])][:n]
    paraphrase = [f'Which {kg.relation_labels[kg.rel[e]]} does {kg.entity_labels[kg.head[e]]} have?' for e, *_ in facts]
    R = kgrag.ROLE_PARAMS
    cap = lambda p: {**p, 'max_tokens': min(p.get('max_tokens') or MAX_REPLY, MAX_REPLY)}
    rows = [
        ('KG-RAG decompose', 'chat', [kgrag.decomposition_messages(q) for q, *_ in metaqa], cap(R['decompose']),
         [lambda text, finish: ','.join(kgrag.parse_decomposition(text, finish)[-1]) or 'ok'] * n),
        ('KG-RAG answer', 'chat', [kgrag.answer_messages(sq, tr) for _, sq, tr, _ in metaqa], cap(R['answer']), [sub_answer(tr) for _, _, tr, _ in metaqa]),
        ('KG-RAG answer (few-shot completion, floor row)', 'complete',
         [readers.few_shot_prompt(sq, [tuple(x.strip() for x in t.strip('()').split(', ', 2)) for t in tr]) for _, sq, tr, _ in metaqa],
         dict(max_tokens=48, stop=['\n']), [few_shot] * n),
        ('KG-RAG reformulate', 'chat', [kgrag.reformulate_messages('Who directed [answer 1]?', [sq], [a]) for _, sq, _, a in metaqa], cap(R['reformulate']),
         [lambda text, finish: 'ok' if text.strip() else 'empty_reply'] * n),  # `KGRAG.reformulate` reads only an empty reply as a failure
        ('KG-RAG synthesize', 'chat', [kgrag.synthesis_messages(q, 'Two steps.', [sq, 'Who directed [answer 1]?'], [a, 'unknown']) for q, sq, _, a in metaqa],
         cap(R['synthesize']), [issues(kgrag.parse_final_answer)] * n),
        ('ULTRAG query writer', 'chat', [ultrag.writer_messages(q, kg, [kg.entity_ids[kg.head[e]]]) for e, q, *_ in facts], dict(max_tokens=MAX_REPLY),
         [writer([kg.entity_ids[kg.head[e]]]) for e, *_ in facts]),
        ('ULTRAG decider', 'chat', [ultrag.decider_messages(q, tops(e), kg) for e, q, *_ in facts], dict(max_tokens=8), [decided] * n),
        ('ULTRAG arbitrator', 'chat', [ultrag.arbitrator_messages(q, f'{kg.entity_ids[kg.head[e]]} -> {kg.relation_ids[kg.rel[e]]}', tops(e), kg) for e, q, *_ in facts],
         dict(max_tokens=48), [arbitrated(tops(e)) for e, *_ in facts]),
        ('reader (chat)', 'chat', [readers.reader_messages(q, bare(tt)) for _, q, _, tt in facts], dict(max_tokens=48), [ans_lines] * n),
        ('SubgraphRAG reader (chat)', 'chat', [readers.subgraphrag_messages(q, bare(tt)) for _, q, _, tt in facts], dict(max_tokens=64), [ans_lines] * n),
        ('few-shot reader (completion)', 'complete', [readers.few_shot_prompt(q, bare(tt)) for _, q, _, tt in facts], dict(max_tokens=48, stop=['\n']), [few_shot] * n),
        ('KGQAGen expander', 'chat', [kgqagen.expansion_prompt(tt, {kg.entity_text(int(kg.head[e])): len(edges)}, [kg.entity_text(int(kg.head[e]))]) for e, _, edges, tt in facts],
         dict(max_tokens=MAX_REPLY), [_reason(kgqagen.parse_expansion_reply)] * n),
        ('KGQAGen reviser', 'chat', [kgqagen.revision_prompt(q, f'SELECT ?x WHERE {{ wd:{kg.entity_ids[kg.head[e]]} wdt:P31 ?x }}', 'no rows',
                                                             [tt[0][2]], [list(tt[0])]) for e, q, _, tt in facts], dict(max_tokens=MAX_REPLY), [_reason(kgqagen.parse_revision_reply)] * n),
        ('LASM judge', 'chat', [metrics.lasm_messages(*x) for x in lasm], dict(max_tokens=4), [judged] * n),
        ('datapoint writer', 'chat', [generate.datapoint_prompt(subgraph_text(kg, edges[:6]), 2) for _, _, edges, _ in facts], dict(max_tokens=MAX_REPLY),
         [_reason(generate.parse_datapoint_response)] * n),
        ('paraphraser', 'chat', [generate.paraphrase_prompt(q) for q in paraphrase], dict(max_tokens=64), [_reason(generate.parse_paraphrase_response)] * n),
    ]
    return rows


def parser_outcomes(client, n: int = N_PROMPTS) -> dict:
    "Per role: calls, seconds per call, prompt/generated tokens, and replies by outcome ('ok' or the parser's named reason)."
    out = {}
    for role, endpoint, payloads, params, outcomes in role_prompts(n):
        outs, secs, p_tok, g_tok, finish = Counter(), 0.0, 0, 0, Counter()
        for payload, outcome in zip(payloads, outcomes):
            r, s = _call(client, endpoint, payload, **params)
            secs += s; p_tok += r.usage['prompt_tokens']; g_tok += r.usage['completion_tokens']; finish[r.finish_reason] += 1
            outs[outcome(r.text, r.finish_reason)] += 1
        k = len(payloads)
        out[role] = dict(endpoint=endpoint, calls=k, max_tokens=params.get('max_tokens'), s_per_call=round(secs / k, 2),
                         prompt_tokens_per_call=round(p_tok / k, 1), generated_tokens_per_call=round(g_tok / k, 1),
                         finish_reasons=dict(sorted(finish.items())), outcomes=dict(sorted(outs.items(), key=lambda kv: (kv[0] != 'ok', kv[0]))))
    return out


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
        parsers = parser_outcomes(c, 1 if quick else N_PROMPTS)
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
                roles=rows, parsers=parsers, offline_stand_in_s_per_call=round(offline_s, 4),
                ratio_local_over_offline_s_per_call=round(mean_call / offline_s, 1))
