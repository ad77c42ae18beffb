"""SR path retriever (kgqa_nb.sr): questions/s of the beam search and steps/s of training, with the sentence encoder
fine-tuned ('encoder' mode, all-MiniLM-L6-v2 from the packaged copy) and with the frozen encoder + trained layer ('head').

Training: steps/s of one epoch (a step = one prefix and its next relation among sampled negatives). The search is compared in the same run with the way the original SR code scores a hop — the query and every candidate
relation encoded afresh for each step — against ours, which embeds the relation texts once per set of weights and the
queries of all live paths of a hop in one batch. Both run after a warm-up pass (in 'head' mode the frozen encoder's vectors
of every text are then cached, so the comparison is of the scoring alone). Both must keep the same paths (triple scores equal within 1e-4).
Data: the synthetic two-hop questions of the SubgraphRAG chapter (answer two hops away among random distractors).
The cheaper epoch (issue 36, item 1): seconds per training question of a steady-state `train_sr` epoch (the time of an
`epochs`-epoch run less that of a 1-epoch run, per extra epoch; 'head' mode on the packaged
all-MiniLM-L6-v2, the study's settings: max_hop 3, beam 10, selection on label_recall@100, 20 % of the questions held out
for validation, read from their graph files as the study reads them) on question graphs of the study's size (10,000
triples), for the reference and for `cache_frozen`, `val_subset` and both, each timed `repeats` times interleaved after a
warm-up run that fills the embedding store (as a study's first run does for its later ones); ratios to the reference.
"""
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
import time

import numpy as np
import torch
import torch.nn.functional as F

from kgqa_nb.sr import RelGraph, SRConfig, SRModel, beam_search, paths_to_scores, query_text, train_sr
from kgqa_nb.subgraphrag import prepare_examples, two_hop_dataset
from kgqa_nb.text import TextEncoder


def per_step_scorer(model: SRModel, question: str):
    "The original code's hop: encode the query and each of its candidate relations for every live path."
    @torch.no_grad()
    def scores(batch):
        out = []
        for seq, cands in batch:
            v = model.embed([query_text(question, [model.rel_texts[d] for d in seq])] + [model.rel_texts[i] for i in cands])
            out.append(F.log_softmax((v[1:] @ v[0]) / model.cfg.tau, 0).numpy())
        return out
    return scores


def per_step_scores(model: SRModel, ex) -> np.ndarray:
    g, c = RelGraph.from_example(ex, model.R), model.cfg
    kept = {int(s): beam_search(g, int(s), per_step_scorer(model, ex.texts[0]), c.beam, c.n_paths, c.max_hop)
            for s in np.nonzero(ex.topic.numpy())[0]}
    return paths_to_scores(g, kept, len(ex), c.max_nodes)


def _timed(f):
    t0 = time.perf_counter(); out = f(); return out, time.perf_counter() - t0


def bench_mode(tune: str, n: int, epochs: int) -> dict:
    kg, recs, graphs = two_hop_dataset(n=n)
    enc = TextEncoder('all-MiniLM-L6-v2')
    exs = list(prepare_examples(recs, graphs, enc))
    (model, hist), t_train = _timed(lambda: train_sr(exs, [], kg, enc, SRConfig(tune=tune, epochs=epochs, val_metric=None)))
    steps = hist[-1]['steps'] * len(hist)  # training steps (prefix -> next relation) over the epochs run
    model.eval()
    [model.example_scores(ex) for ex in exs]  # warm-up: relation vectors, encoder kernels, and in 'head' mode the frozen
    # vectors of every query text the search meets (cached in memory and on disk), so both scorers below run warm
    ours, t_ours = _timed(lambda: [model.example_scores(ex) for ex in exs])
    base, t_base = _timed(lambda: [per_step_scores(model, ex) for ex in exs])
    for a, b in zip(ours, base):
        fin = np.isfinite(a)
        assert (fin == np.isfinite(b)).all() and np.allclose(a[fin], b[fin], atol=1e-4), 'the two scorers keep different paths'
    return dict(tune=tune, questions=len(exs), relations=len(model.rel_texts), train_steps_per_s=round(steps / t_train, 1),
                search_questions_per_s=round(len(exs) / t_ours, 2),
                per_step_encoding_questions_per_s=round(len(exs) / t_base, 2), speedup_vs_per_step_encoding=round(t_base / t_ours, 2),
                same_paths=True)


def cheaper_epoch(n_train: int = 32, n_val: int = 8, E: int = 10_000, epochs: int = 3, threads: int = 1, repeats: int = 2) -> dict:
    "Seconds per training question (over `epochs` epochs, validation included) of the reference SR run and of its cached options."
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_subgraphrag import wide_questions
    from kgqa_nb.qgraphs import QuestionGraphs
    kg, recs, graphs = wide_questions(n_train + n_val, E, seed=2)
    tmp = Path(tempfile.mkdtemp()); enc = TextEncoder('all-MiniLM-L6-v2')
    qgs = QuestionGraphs([g.save(tmp / f'{g.id}.npz') for g in graphs])
    exs = prepare_examples(recs, qgs, enc, root=tmp); train, val = exs[n_val:], exs[:n_val]
    sub = max(n_val // 4, 1)
    base = dict(tune='head', epochs=epochs, patience=epochs + 1, max_hop=3, beam=10, seed=0)
    cfgs = {'reference': SRConfig(**base), 'cache_frozen': SRConfig(**base, cache_frozen=True),
            'val_subset_quarter': SRConfig(**base, val_subset=sub), 'combined': SRConfig(**base, cache_frozen=True, val_subset=sub)}
    torch.set_num_threads(threads)
    train_sr(train, val, kg, enc, cfgs['reference'], root=tmp)  # warm-up: fills the embedding store
    one, more = {k: [] for k in cfgs}, {k: [] for k in cfgs}; steps = None
    for _ in range(repeats):
        for k, c in cfgs.items():
            one[k].append(_timed(lambda: train_sr(train, val, kg, enc, dataclasses.replace(c, epochs=1), root=tmp))[1])
            (_, hist), t = _timed(lambda: train_sr(train, val, kg, enc, c, root=tmp)); more[k].append(t); steps = hist[-1]['steps']
    per_q = {k: max(min(more[k]) - min(one[k]), 1e-9) / (epochs - 1) / len(train) for k in cfgs}
    rows = [dict(lever=k, seconds_per_train_question=round(per_q[k], 4), speedup_vs_reference=round(per_q['reference'] / per_q[k], 2),
                 first_epoch_seconds_per_train_question=round(min(one[k]) / len(train), 4),
                 one_epoch_runs_s=[round(t, 2) for t in one[k]], runs_s=[round(t, 2) for t in more[k]]) for k in cfgs]
    return dict(train_questions=len(train), validation_questions=len(val), val_subset=sub, training_steps_per_epoch=steps,
                triples_per_question=E, epochs=epochs, tune='head', encoder=enc.key, threads=threads, repeats=repeats,
                load_average_1min=round(os.getloadavg()[0], 2), rows=rows)


def run(quick: bool = False) -> dict:
    return dict(device='cpu', cheaper_epoch=cheaper_epoch(4, 2, 1000, 2, repeats=1) if quick else cheaper_epoch(),
                rows=[bench_mode(t, 8 if quick else 16, 1) for t in ('head', 'encoder')])


if __name__ == '__main__':
    import json, sys
    print(json.dumps(run(quick='--quick' in sys.argv), indent=1))
