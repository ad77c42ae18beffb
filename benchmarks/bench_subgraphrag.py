"""SubgraphRAG retriever (kgqa_nb.subgraphrag): training questions/s and scoring triples/s, on the CPU (and on a GPU when
one is present, for scoring), for question graphs of a given size.

Synthetic question graphs of E triples over N = E / 8 entities (the ratio of SynthKGQA's 2,500-entity / 20,000-triple
graphs) with 384-d text vectors (all-MiniLM-L6-v2's width; random unit vectors, since the encoder is not what is measured).
(1) Training: questions/s of one Adam step per question (forward, BCE over all triples, backward).
(2) Scoring: triples/s of the block-wise forward pass (`SubgraphRAGRetriever.forward`) and of the plain concatenation it
replaces (`forward_concat`), with their ratio; the two are asserted equal. Times are the minimum over repeats.
(3) The training loop against the one it replaced: `train_retriever` reads each question once per run (`step_inputs`:
feature rows, graph, DDE) and gathers vectors from one table; the loop before read every question from its graph file at
every step, copied its label vectors and recomputed DDE. Both train the same epochs on the same question graphs (saved to
disk as the study reads them: random graphs of E triples over E / 8 entities, as SynthKGQA's, each with a two-hop
ground-truth path from its seed), scoring the validation questions after each epoch;
the ratio of their wall times is reported and their final weights are asserted identical (the maths is unchanged).
(4) The cheaper step (issue 36, item 1): seconds per training question of one epoch of `train_retriever` in its steady
state (its per-epoch validation included, 20 % of the questions held out as in the study, selection on label_recall@100)
on question graphs of the study's size (10,000 triples), for the reference step and for each option of `TrainConfig`
alone and combined, in one run, with the ratio to the reference. An epoch's time is (time of a 3-epoch run - time of a
1-epoch run) / 2, so what a run does once (reading each question, DDE, the full validation of the chosen epoch, compiling)
cancels; each run is timed `repeats` times interleaved with the others and the minimum is kept (the machine is shared).
The first-epoch times (one-off costs included) are reported too; `torch.compile`'s first compile is reported apart.
"""
import dataclasses
import os
import warnings
import tempfile
from pathlib import Path
import time

import numpy as np
import torch
import torch.nn.functional as F

from kgqa_nb.kg import KnowledgeGraph
from kgqa_nb.qgraphs import QuestionGraph, QuestionGraphs
from kgqa_nb.subgraphrag import (SubgraphRAGRetriever, TrainConfig, label_key, mean_metric, prepare_examples, text_features,
                                 train_retriever)
from kgqa_nb.text import HashingEncoder


def _graph(E, dim, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    N = max(E // 8, 4)
    ei = torch.randint(0, N, (2, E), generator=g)
    args = (F.normalize(torch.randn(dim, generator=g), dim=0), F.normalize(torch.randn(N, dim, generator=g), dim=1),
            torch.rand(N, generator=g) > 0.1, F.normalize(torch.randn(200, dim, generator=g), dim=1), ei,
            torch.randint(0, 200, (E,), generator=g), torch.arange(N) < 2)
    y = (torch.rand(E, generator=g) < 0.001).float()
    return tuple(a.to(device) for a in args), y.to(device)


def _best(f, repeats):
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available(): torch.cuda.synchronize()
        t0 = time.perf_counter(); f()
        if torch.cuda.is_available(): torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(E: int, dim: int = 384, device: str = 'cpu', steps: int = 5, repeats: int = 3) -> dict:
    torch.manual_seed(0)
    model = SubgraphRAGRetriever(dim).to(device)
    args, y = _graph(E, dim, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    def train():
        for _ in range(steps):
            loss = F.binary_cross_entropy_with_logits(model(*args), y); opt.zero_grad(); loss.backward(); opt.step()
    train()  # warm-up
    t_train = _best(train, repeats) / steps
    with torch.no_grad():
        fast = _best(lambda: model(*args), repeats)
        concat = _best(lambda: model.forward_concat(*args), repeats)
        assert torch.allclose(model(*args), model.forward_concat(*args), atol=1e-4)
    return dict(device=device, triples=E, entities=max(E // 8, 4), dim=dim, train_questions_per_s=round(1 / t_train, 2),
                score_triples_per_s=round(E / fast), score_concat_triples_per_s=round(E / concat), blockwise_speedup=round(concat / fast, 1))


def previous_loop(train, val, feats, cfg: TrainConfig) -> SubgraphRAGRetriever:
    "The training loop before `step_inputs`: each step reads its question from disk, copies its vectors and recomputes DDE."
    torch.manual_seed(cfg.seed)
    model = SubgraphRAGRetriever(feats.dim, cfg.hidden); opt = torch.optim.Adam(model.parameters(), lr=cfg.lr); key = label_key(cfg.labels)
    for ep in range(cfg.epochs):
        rng = np.random.default_rng([cfg.seed, ep]); order, para = rng.permutation(len(train)), rng.random(len(train))
        model.train()
        for i in order:
            ex = train[i]; y = ex.labels[key]
            if not y.any(): continue
            row = 1 if len(ex.q) > 1 and para[i] < cfg.paraphrase_p else 0
            x = (ex.q[row], torch.as_tensor(feats.entity_vectors(ex.nodes)), torch.as_tensor(feats.has_text[ex.nodes]),
                 torch.as_tensor(feats.rel), ex.edge_index, ex.rel, ex.topic)
            loss = F.binary_cross_entropy_with_logits(model(*x), y); opt.zero_grad(); loss.backward(); opt.step()
        mean_metric(model, val, feats, 'gt_recall@100')
    return model


def wide_questions(n: int, E: int, seed: int = 0) -> tuple:
    "(KG, records, question graphs): n random question graphs of E triples over E / 8 entities each, a two-hop GT path in each."
    rng = np.random.default_rng(seed); N, R = max(E // 8, 4), 50
    h, r, t = rng.integers(N, size=(n, E)), rng.integers(R, size=(n, E)), rng.integers(N, size=(n, E))
    h[:, 0], t[:, 0], h[:, 1], t[:, 1] = 0, 1, 1, 2  # seed 0 -> 1 -> answer 2
    off = (np.arange(n) * N)[:, None]; h, t = h + off, t + off
    kg = KnowledgeGraph.from_id_triples([(f'E{a}', f'P{b}', f'E{c}') for a, b, c in zip(h.ravel(), r.ravel(), t.ravel())],
                                        {f'E{i}': f'entity {i}' for i in range(n * N)}, {f'P{i}': f'relation {i}' for i in range(R)}, name=f'wide({n},{E})')
    ix = lambda q, a: np.array([kg.entity(f'E{x}') for x in a[q]])
    graphs = [QuestionGraph(f'w{q}', ix(q, h), np.array([kg.relation(f'P{x}') for x in r[q]]), ix(q, t), (np.arange(E) < 2).astype(np.uint8),
                            np.array([kg.entity(f'E{off[q, 0]}')]), np.array([kg.entity(f'E{off[q, 0] + 2}')])) for q in range(n)]
    recs = [dict(id=f'w{q}', question=f'question {q} about entity {off[q, 0]}', n_hops=2) for q in range(n)]
    return kg, recs, graphs


def compare_loops(n_questions: int = 40, E: int = 10_000, epochs: int = 2, threads: int = 1) -> dict:
    "Wall time of `epochs` epochs of the previous loop and of `train_retriever` on the same question-graph files; weights equal."
    kg, recs, graphs = wide_questions(n_questions, E)
    tmp = Path(tempfile.mkdtemp()); enc = HashingEncoder(dim=384)
    qgs = QuestionGraphs([g.save(tmp / f'{g.id}.npz') for g in graphs])
    exs = prepare_examples(recs, qgs, enc, root=tmp); feats = text_features(kg, enc, root=tmp)
    n_val = max(n_questions // 5, 1); train, val = exs[n_val:], exs[:n_val]
    cfg = TrainConfig(epochs=epochs, patience=epochs + 1, val_metric=None, seed=0)
    torch.set_num_threads(threads)
    warm = TrainConfig(epochs=1, patience=2, val_metric=None); previous_loop(train[:2], val[:1], feats, warm); train_retriever(train[:2], val[:1], feats, warm)
    old, t_old = _timed(lambda: previous_loop(train, val, feats, cfg))
    (new, hist), t_new = _timed(lambda: train_retriever(train, val, feats, cfg))
    same = all(torch.equal(a, b) for a, b in zip(old.state_dict().values(), new.state_dict().values()))
    assert same, 'the two loops must give identical weights'
    return dict(questions=len(train), validation=len(val), triples_per_question=round(float(np.mean([len(g) for g in graphs]))),
                epochs=epochs, threads=threads, previous_loop_s=round(t_old, 2), train_retriever_s=round(t_new, 2),
                speedup=round(t_old / t_new, 2), identical_weights=same)


def _timed(f):
    t0 = time.perf_counter(); out = f(); return out, time.perf_counter() - t0


LEVERS = {  # name -> TrainConfig options (besides epochs, seed); the reference first
    'reference': {},
    'neg_sample_1000': dict(neg_sample=1000),
    'neg_sample_250': dict(neg_sample=250),
    'questions_per_step_8': dict(questions_per_step=8),
    'bf16': dict(bf16=True),
    'compile': dict(compile=True),
    'val_subset_quarter': 'val_subset',
    'combined': dict(neg_sample=1000, questions_per_step=8, bf16=True, val_subset='val_subset'),
    'combined_neg250': dict(neg_sample=250, questions_per_step=8, bf16=True, val_subset='val_subset'),
    'combined_compile': dict(neg_sample=1000, questions_per_step=8, bf16=True, val_subset='val_subset', compile=True),
}


def cheaper_step(n_train: int = 24, n_val: int = 6, E: int = 10_000, threads: int = 2, repeats: int = 2) -> dict:
    "Seconds per training question of one epoch (validation included) for the reference step and each option; ratios to the reference."
    from kgqa_nb.subgraphrag import cpu_bf16_units, forward_precision
    kg, recs, graphs = wide_questions(n_train + n_val, E, seed=1)
    tmp = Path(tempfile.mkdtemp()); enc = HashingEncoder(dim=384)
    qgs = QuestionGraphs([g.save(tmp / f'{g.id}.npz') for g in graphs])
    exs = prepare_examples(recs, qgs, enc, root=tmp); feats = text_features(kg, enc, root=tmp)
    train, val = exs[n_val:], exs[:n_val]
    sub = max(n_val // 4, 1)
    cfgs = {k: TrainConfig(epochs=1, patience=5, seed=0, **{o: (sub if v == 'val_subset' else v) for o, v in
                                                          ({'val_subset': sub} if kw == 'val_subset' else kw).items()})
            for k, kw in LEVERS.items()}
    torch.set_num_threads(threads)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        _, t_compile_warm = _timed(lambda: train_retriever(train, val, feats, cfgs['compile']))  # compiles the forward pass
        train_retriever(train, val, feats, cfgs['combined_compile'])  # and its bf16, sampled form
        train_retriever(train[:2], val[:1], feats, cfgs['reference'])  # warm-up
        one, three = {k: [] for k in cfgs}, {k: [] for k in cfgs}
        for _ in range(repeats):
            for k, c in cfgs.items():
                one[k].append(_timed(lambda: train_retriever(train, val, feats, c))[1])
                three[k].append(_timed(lambda: train_retriever(train, val, feats, dataclasses.replace(c, epochs=3)))[1])
    per_q = {k: max(min(three[k]) - min(one[k]), 1e-9) / 2 / len(train) for k in cfgs}
    first = {k: min(one[k]) / len(train) for k in cfgs}
    rows = [dict(lever=k, options={o: getattr(cfgs[k], o) for o in ('neg_sample', 'questions_per_step', 'bf16', 'compile', 'val_subset')
                                   if getattr(cfgs[k], o) != getattr(TrainConfig(), o)},
                 seconds_per_train_question=round(per_q[k], 4), speedup_vs_reference=round(per_q['reference'] / per_q[k], 2),
                 first_epoch_seconds_per_train_question=round(first[k], 4), first_epoch_speedup=round(first['reference'] / first[k], 2),
                 one_epoch_runs_s=[round(t, 2) for t in one[k]], three_epoch_runs_s=[round(t, 2) for t in three[k]]) for k in cfgs]
    return dict(train_questions=len(train), validation_questions=len(val), val_subset=sub, triples_per_question=E,
                entities_per_question=max(E // 8, 4), dim=384, threads=threads, repeats=repeats,
                bf16_units=cpu_bf16_units() or 'none', bf16_used=forward_precision(True, 'cpu')[1],
                compile_first_epoch_s=round(t_compile_warm, 1), load_average_1min=round(os.getloadavg()[0], 2), rows=rows)


def run(quick: bool = False) -> dict:
    sizes = [1_000, 5_000] if quick else [1_000, 5_000, 20_000]
    out = {'cheaper_step': [cheaper_step(6, 2, 1000, repeats=1)] if quick else [cheaper_step(threads=n) for n in (2, 1)],
           'cpu': [measure(E, steps=2 if quick else 5, repeats=2 if quick else 3) for E in sizes],
           'training_loop': compare_loops(10, 1000, 1) if quick else compare_loops()}
    if torch.cuda.is_available(): out['cuda'] = [measure(E, device='cuda') for E in sizes + [100_000]]
    return out


if __name__ == '__main__':
    import json; print(json.dumps(run(quick=True), indent=1))
