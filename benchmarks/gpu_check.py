"""The GPU paths, run once (`make gpu-check`): every CUDA path of the project beside the CPU in the same run, on one GPU.

Sections (each compares the accelerator against the CPU of the same machine, in the same process):
- `ultra`: ULTRA 3g zero-shot on ILPC2022-small (`loaders.load_split`, `ultra.link_prediction_ranks`): MRR and Hits@1/3/10
  of the first test queries on both devices (equal within 1e-4), seconds per batch, and the share of one forward spent in
  its message-passing layers (on CUDA those run the portable PyTorch path: is it the bottleneck?); in the real run also the
  whole test set on the accelerator, checked against the committed CPU table (results/companion/ultra_ilpc2022_zero_shot.csv).
- `ultrag`: ULTRAG's per-query latency (the paper: 0.10 s on one GH200): SEPPR pruning to k = 30,000 entities
  (`ultrag.SEPPRPruner`, numpy, so on the CPU whatever the device), building the executor's graph
  (`ultra.UltraQueryExecutor`) and UltraQuery's batched execution (`ultrag.execute_batched`), on 2-hop queries that need a
  deleted fact (`ultra.missing_fact_queries`) of a ~33k-entity toy world; memberships equal within 1e-4.
- `subgraphrag`, `sr`: training throughput (questions/s) of `subgraphrag.train_retriever` and of `sr.train_sr` with the
  sentence encoder fine-tuned (`tune='encoder'`, the original's GPU mode), on `subgraphrag.two_hop_dataset` questions;
  the trained weights finite on both devices.
- `text`: all-MiniLM-L6-v2 strings/s (`text.TextEncoder(device=...)`) on toy-world labels and verbalised triples; the
  vectors equal within 1e-4.
- `rerun`: `kgqa rerun` (`rerun.rerun`) of the smoke profile with `device` set to the accelerator for every artifact
  whose notebook declares a `device` parameter, into a fresh folder (so nothing is read from an earlier run's cache).

Budget of the real run on one H100/H200 (< 8 minutes in all; the CPU baselines use the box's cores):
- ultra: 128 test queries x 2 directions on each device (CPU ~0.03 s/query on 16 cores: ~10 s), then the 5,804 ranked
  queries of the whole test set on the GPU (363 batches of 16; the CPU took 422 s on 2 cores): ~1 min;
- ultrag: the toy world at scale 7 (~32k entities, ~4 s to build and pick the queries), 6 timed queries + 1 warm-up on
  each device (CPU measured 10.8 s/query on 2 cores shared by a dozen processes: SEPPR 0.2 s, executor graph 4.7 s,
  execution 5.4 s; a quiet 16-core CPU a few seconds; the GPU expected well under 1 s): ~1.5 min;
- subgraphrag: 100 questions of ~1,000 triples (~10 s to build), 3 epochs (300 steps) per device (CPU ~20 questions/s on
  one quiet thread; 2,000-triple questions measured 1.4 questions/s on 2 cores shared by a dozen processes): < 1 min;
- sr: 100 questions (~300 training steps, batches of 16), 1 epoch per device, MiniLM fine-tuned: < 1 min;
- text: 2,000 strings per device (CPU 45 strings/s on 2 cores shared by a dozen processes; a quiet 16-core CPU several
  hundred): < 30 s;
- rerun: ultra_ilpc_zero_shot at smoke size (24 queries, two checkpoints) and retriever_study at smoke size with one seed
  per arm (`n_seeds: 1`, the rest the smoke defaults: 300 generated questions, 4 epochs): ~3 min.
`--device cpu --tiny` is the dry run: the same code paths at tiny sizes, the CPU standing in for the accelerator on both
sides (a couple of minutes on 2 cores); it never writes benchmarks/results/gpu.json. The exit status is 0 when every check
holds, 1 when one failed (the JSON is written either way, with the failed section's one-line error), 2 on bad input. The
JSON is rewritten after each section, so a run cut short keeps what it finished (`complete: false`).
"""
import argparse, json, math, shutil, sys, time, traceback
from pathlib import Path

import numpy as np
import torch

from kgqa_nb.core import Timer, get_device, project_dirs, provenance, write_text_atomic

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / 'results' / 'gpu.json'
COMPANION_ULTRA = project_dirs.root / 'results' / 'companion' / 'ultra_ilpc2022_zero_shot.csv'
SECTIONS = ('ultra', 'ultrag', 'subgraphrag', 'sr', 'text', 'pathgen', 'rerun')
TOL = 1e-4  # parity tolerance of metrics, memberships and vectors

SIZES = {
    'real': dict(ultra_queries=128, ultra_batch=16, ultra_full_queries=0,
                 ultrag_scale=7.0, ultrag_k=30_000, ultrag_queries=6,
                 srag_questions=100, srag_distractors=1000, srag_epochs=3,
                 sr_questions=100, sr_epochs=1, text_strings=2000, text_batch=128,
                 pathgen_questions=60, pathgen_test=8, pathgen_dim=256, pathgen_layers=4, pathgen_steps=150,
                 rerun={'retriever_study': {'n_seeds': 1}}),
    'tiny': dict(ultra_queries=4, ultra_batch=2, ultra_full_queries=6,
                 ultrag_scale=0.25, ultrag_k=500, ultrag_queries=2,
                 srag_questions=6, srag_distractors=20, srag_epochs=1,
                 sr_questions=4, sr_epochs=1, text_strings=32, text_batch=16,
                 pathgen_questions=12, pathgen_test=2, pathgen_dim=32, pathgen_layers=2, pathgen_steps=30,
                 rerun={'ultra_ilpc_zero_shot': {'checkpoints': ['ultra_3g'], 'max_queries': 2, 'batch_size': 2},
                        'retriever_study': {'n_questions': 40, 'n_nodes': 100, 'max_triples': 500, 'labels': ['gt'],
                                            'n_seeds': 1, 'epochs': 1, 'sr_epochs': 1, 'sr_max_hop': 2, 'sr_beam': 3}}),
}


def sync(dev):
    "Wait for the device's queued work (so that wall times measure it)."
    if dev.type == 'cuda': torch.cuda.synchronize(dev)


def timed(f, dev):
    "(result, wall seconds) of `f()`, the device synchronised before and after."
    sync(dev); t0 = time.perf_counter(); out = f(); sync(dev)
    return out, time.perf_counter() - t0


def finite_weights(model) -> bool:
    "Every parameter of `model` is finite."
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def r(x, n=4):
    "A float rounded for the report (None stays None)."
    return None if x is None else round(float(x), n)


def ultra_ranks(model, g, queries, filter_triples, batch: int, dev) -> tuple:
    "Filtered ranks of both directions and the seconds per batch (one batch run first as a warm-up)."
    from kgqa_nb.ultra import link_prediction_ranks
    link_prediction_ranks(model, g, queries[:batch], filter_triples, 'tail', batch)  # warm-up: CUDA context, kernels
    ranks, secs = {}, 0.0
    for d in ('tail', 'head'):
        ranks[d], s = timed(lambda: link_prediction_ranks(model, g, queries, filter_triples, d, batch), dev); secs += s
    ranks['both'] = np.concatenate([ranks['tail'], ranks['head']])
    return ranks, secs / (2 * math.ceil(len(queries) / batch))


def metrics_of(ranks: dict) -> dict:
    "MRR and Hits@1/3/10 of each direction (`metrics.ranking_metrics`)."
    from kgqa_nb.metrics import ranking_metrics
    return {d: ranking_metrics(x) for d, x in ranks.items()}


def max_metric_diff(a: dict, b: dict) -> float:
    "Largest absolute difference between two `metrics_of` tables."
    return max(abs(a[d][k] - b[d][k]) for d in a for k in a[d])


def companion_diff(acc: dict) -> float:
    "Largest difference between the accelerator's whole-test-set metrics and the committed CPU table of ULTRA 3g."
    import pandas as pd
    t = pd.read_csv(COMPANION_ULTRA)
    t = t[(t.checkpoint == 'ultra_3g') & (t.split == 'test') & t.full_test_set.astype(bool)].set_index('direction')
    if set(t.index) != {'tail', 'head', 'both'}: raise ValueError(f'{COMPANION_ULTRA}: no whole-test-set rows of ultra_3g')
    return max(abs(acc[d][k] - float(t.loc[d, k])) for d in acc for k in acc[d])


@torch.no_grad()
def message_passing_share(model, g, queries, B: int, dev, reps: int = 3) -> dict:
    """Median seconds of one ULTRA forward on B queries and of its 12 layers (message passing, then the layer's Linear and
    LayerNorm) called alone, 6 on the relation graph and 6 on the entity graph, on random states of the forward's shapes:
    a share near 1 says the forward is its message-passing layers (a noisy estimate: the layers are timed apart)."""
    gen = torch.Generator().manual_seed(0)
    def layer(conv, N, adj, rel):  # one layer's call: messages summed over `adj`, then the layer's combine
        x = torch.randn(N, B, conv.dim, generator=gen).to(dev)
        return lambda: conv(x, x, adj, rel.to(dev), model.chunk_size)
    rl, el = model.relation_model.layers, model.entity_model.layers
    f_rel = layer(rl[0], g.num_relations, g.rel_adj, rl[0].relation.weight.detach().cpu().unsqueeze(1).expand(-1, B, -1))
    f_ent = layer(el[0], g.num_nodes, g.adj, torch.randn(g.num_relations, B, el[0].dim, generator=gen))
    h, rq = torch.as_tensor(queries[:B, 0], device=dev), torch.as_tensor(queries[:B, 1], device=dev)
    fns = dict(forward=lambda: model(g, h, rq), relation_layer=f_rel, entity_layer=f_ent)
    for f in fns.values(): f()  # warm-up
    sec = {k: float(np.median([timed(f, dev)[1] for _ in range(reps)])) for k, f in fns.items()}
    layers = len(rl) * sec['relation_layer'] + len(el) * sec['entity_layer']
    return dict(batch=B, forward_s=r(sec['forward'], 5), relation_layer_s=r(sec['relation_layer'], 5), entity_layer_s=r(sec['entity_layer'], 5),
                layers_share_of_forward=r(layers / sec['forward'], 3))


def section_ultra(dev, s: dict, work: Path) -> dict:
    "ULTRA 3g zero-shot on ILPC2022-small: the same queries on the CPU and the accelerator, metrics within 1e-4."
    from kgqa_nb.loaders import load_split
    from kgqa_nb.ultra import load_ultra, ultra_graph
    split = load_split('ilpc2022-small')
    test, B = split.queries('test'), s['ultra_batch']
    q = test[:s['ultra_queries']]
    out, met = dict(split=repr(split), queries=len(q), batch_size=B), {}
    for side, d in (('cpu', torch.device('cpu')), ('accelerator', dev)):
        model, g = load_ultra('ultra_3g', device=d), ultra_graph(split.graph, d)
        ranks, spb = ultra_ranks(model, g, q, split.known, B, d)
        met[side] = metrics_of(ranks)
        out[side] = dict(device=str(d), seconds_per_batch=r(spb), ms_per_query=r(1000 * spb / B, 1), metrics=met[side],
                         message_passing=message_passing_share(model, g, q, B, d),
                         ranks_differing=None if side == 'cpu' else int((ranks['both'] != cpu_ranks).sum()))
        if side == 'cpu': cpu_ranks = ranks['both']
    out['max_metric_diff'] = max_metric_diff(met['cpu'], met['accelerator'])
    out['checks'] = dict(parity_cpu_vs_accelerator=out['max_metric_diff'] <= TOL)
    full_q = test[:s['ultra_full_queries']] if s['ultra_full_queries'] else test  # the real run: the whole test set
    ranks, spb = ultra_ranks(model, g, full_q, split.known, B, dev)
    full = metrics_of(ranks)
    out['test_set'] = dict(queries=len(full_q), ranked=int(len(ranks['both'])), whole=len(full_q) == len(test), seconds_per_batch=r(spb),
                           seconds=r(spb * 2 * math.ceil(len(full_q) / B), 1), metrics=full)
    if len(full_q) == len(test):  # against the committed CPU numbers of the same protocol
        out['test_set'].update(companion_table=str(COMPANION_ULTRA.relative_to(project_dirs.root)), max_diff_vs_companion_cpu=companion_diff(full))
        out['checks']['parity_test_set_vs_companion_cpu'] = out['test_set']['max_diff_vs_companion_cpu'] <= TOL
    out['speedup'] = r(out['cpu']['seconds_per_batch'] / out['accelerator']['seconds_per_batch'], 2)
    return out


def ultrag_query(q, kg, pruner, models: dict) -> dict:
    "One query: SEPPR pruning (CPU), then per device the executor's graph and the batched UltraQuery execution, timed."
    from kgqa_nb.dsl import query_entities
    from kgqa_nb.ultra import UltraQueryExecutor
    from kgqa_nb.ultrag import crisp_set, execute_batched
    leaf_sets = {e: crisp_set(kg, [e]) for e in query_entities(q)}
    pr, seppr_s = timed(lambda: pruner.prune(kg, leaf_sets), torch.device('cpu'))
    sub = {e: x[torch.as_tensor(pr.nodes)] for e, x in leaf_sets.items()}
    row = dict(sub_entities=pr.kg.num_entities, sub_triples=pr.kg.num_triples, seppr_s=seppr_s)
    for side, (model, d) in models.items():
        ex, build_s = timed(lambda: UltraQueryExecutor(model, pr.kg), d)
        x, exec_s = timed(lambda: execute_batched(ex, q, sub), d)
        row[side] = dict(build_graph_s=build_s, execute_s=exec_s, total_s=seppr_s + build_s + exec_s, x=x)
    return row


def section_ultrag(dev, s: dict, work: Path) -> dict:
    "ULTRAG per-query latency on a k-entity SEPPR subgraph (the paper's k = 30,000) on the CPU and the accelerator."
    from kgqa_nb.toyworld import make_toyworld
    from kgqa_nb.ultra import load_ultra, missing_fact_queries
    from kgqa_nb.ultrag import SEPPRPruner
    kg, deleted = make_toyworld(seed=0, scale=s['ultrag_scale'], missing_fraction=0.05, return_deleted=True)
    qs = [q for q, _ in missing_fact_queries(kg, deleted, limit=s['ultrag_queries'] + 1)]
    if len(qs) < 2: raise ValueError(f'{kg.name}: only {len(qs)} missing-fact queries')
    models = {side: (load_ultra('ultraquery', device=d), d) for side, d in (('cpu', torch.device('cpu')), ('accelerator', dev))}
    pruner = SEPPRPruner(s['ultrag_k'])
    rows = [ultrag_query(q, kg, pruner, models) for q in qs]  # the first is a warm-up (CUDA context, kernels): not in the medians
    diff = max(float((row['cpu']['x'] - row['accelerator']['x']).abs().max()) for row in rows)
    med = lambda side, k: r(np.median([row[side][k] for row in rows[1:]]))
    out = dict(kg=kg.name, kg_entities=kg.num_entities, kg_triples=kg.num_triples, k=s['ultrag_k'], queries=len(rows) - 1,
               query_shape='2-hop chain needing a deleted fact', mean_sub_entities=r(np.mean([x['sub_entities'] for x in rows]), 1),
               mean_sub_triples=r(np.mean([x['sub_triples'] for x in rows]), 1), seppr_s=r(np.median([x['seppr_s'] for x in rows[1:]])),
               seppr_device='cpu (numpy: ultrag.SEPPRPruner takes no device)', max_membership_diff=diff)
    for side in models: out[side] = dict(device=str(models[side][1]), **{k: med(side, k) for k in ('build_graph_s', 'execute_s', 'total_s')})
    out['paper_latency_s'] = 0.10  # ULTRAG's reported per-query latency on one GH200
    out['speedup_total'] = r(out['cpu']['total_s'] / out['accelerator']['total_s'], 2)
    out['checks'] = dict(parity_memberships=diff <= TOL)
    return out


def encoder_cpu():
    "The packaged MiniLM on the CPU: the frozen text features (not what is measured) come out the same on every machine."
    from kgqa_nb.text import TextEncoder
    return TextEncoder('all-MiniLM-L6-v2', device='cpu')


def with_training_checks(out: dict) -> dict:
    "A training section's result with its speed-up and checks (finite weights and final loss on both devices)."
    out['speedup'] = r(out['accelerator']['questions_per_s'] / out['cpu']['questions_per_s'], 2)
    out['checks'] = dict(weights_finite=out['cpu']['weights_finite'] and out['accelerator']['weights_finite'],
                         loss_finite=all(math.isfinite(out[x]['final_loss']) for x in ('cpu', 'accelerator')))
    return out


def section_subgraphrag(dev, s: dict, work: Path) -> dict:
    "SubgraphRAG retriever training questions/s on the CPU and the accelerator (`subgraphrag.train_retriever`), weights finite."
    from kgqa_nb.subgraphrag import TrainConfig, prepare_examples, text_features, train_retriever, two_hop_dataset
    kg, recs, graphs = two_hop_dataset(n=s['srag_questions'], n_distractors=s['srag_distractors'], seed=0)
    enc, root = encoder_cpu(), work / 'embeddings'
    exs, feats = prepare_examples(recs, graphs, enc, root=root), text_features(kg, enc, root=root)
    cfg, n = TrainConfig(epochs=s['srag_epochs'], val_metric=None), len(exs) * s['srag_epochs']
    out = dict(questions=len(exs), triples_per_question=r(np.mean([len(ex) for ex in exs]), 1), epochs=cfg.epochs, steps=n)
    for side, d in (('cpu', torch.device('cpu')), ('accelerator', dev)):
        train_retriever(exs[:2], [], feats, TrainConfig(epochs=1, val_metric=None), device=str(d))  # warm-up
        (model, hist), sec = timed(lambda: train_retriever(exs, [], feats, cfg, device=str(d)), d)
        out[side] = dict(device=str(d), seconds=r(sec, 2), questions_per_s=r(n / sec, 1), final_loss=r(hist[-1]['loss']),
                         weights_finite=finite_weights(model))
    return with_training_checks(out)


def section_sr(dev, s: dict, work: Path) -> dict:
    "SR training questions/s with the sentence encoder fine-tuned ('encoder' mode), CPU vs accelerator, weights finite."
    from kgqa_nb.sr import SRConfig, train_sr
    from kgqa_nb.subgraphrag import prepare_examples, two_hop_dataset
    kg, recs, graphs = two_hop_dataset(n=s['sr_questions'], seed=0)
    enc, root = encoder_cpu(), work / 'embeddings'
    exs = prepare_examples(recs, graphs, enc, root=root)
    cfg = SRConfig(tune='encoder', epochs=s['sr_epochs'], val_metric=None)
    out = dict(questions=len(exs), tune=cfg.tune, encoder=enc.name, epochs=cfg.epochs, batch_size=cfg.batch_size)
    for side, d in (('cpu', torch.device('cpu')), ('accelerator', dev)):
        train_sr(exs[:1], [], kg, enc, SRConfig(tune='encoder', epochs=1, val_metric=None), root=root, device=str(d))  # warm-up
        (model, hist), sec = timed(lambda: train_sr(exs, [], kg, enc, cfg, root=root, device=str(d)), d)
        steps = sum(h['steps'] for h in hist)
        out[side] = dict(device=str(d), seconds=r(sec, 2), steps=steps, steps_per_s=r(steps / sec, 1),
                         questions_per_s=r(len(exs) * len(hist) / sec, 2), final_loss=r(hist[-1]['loss']), weights_finite=finite_weights(model))
    return with_training_checks(out)


def section_text(dev, s: dict, work: Path) -> dict:
    "Text-encoder strings/s (all-MiniLM-L6-v2) on the CPU and the accelerator, the vectors equal within 1e-4."
    from kgqa_nb.loaders import load_kg
    from kgqa_nb.text import TextEncoder
    kg, rng, n = load_kg('toyworld'), np.random.default_rng(0), s['text_strings'] // 2
    texts = [kg.entity_labels[i] for i in rng.choice(kg.num_entities, n, replace=False)] + \
            [f'({kg.entity_labels[h]}, {kg.relation_labels[r_]}, {kg.entity_labels[t]})' for h, r_, t in kg.triples[rng.choice(kg.num_triples, n, replace=False)]]
    out, vecs = dict(encoder='all-MiniLM-L6-v2', strings=len(texts), batch_size=s['text_batch']), {}
    for side, d in (('cpu', torch.device('cpu')), ('accelerator', dev)):
        enc = TextEncoder('all-MiniLM-L6-v2', device=str(d))
        enc.encode(texts[:s['text_batch']], batch_size=s['text_batch'], progress_bar=False)  # warm-up: load, kernels
        vecs[side], sec = timed(lambda: enc.encode(texts, batch_size=s['text_batch'], progress_bar=False), d)
        out[side] = dict(device=str(enc.model.device), seconds=r(sec, 3), strings_per_s=r(len(texts) / sec, 1))
    out['max_abs_diff'] = float(np.abs(vecs['cpu'] - vecs['accelerator']).max())
    out['min_cosine'] = float((vecs['cpu'] * vecs['accelerator']).sum(1).min())
    out['speedup'] = r(out['accelerator']['strings_per_s'] / out['cpu']['strings_per_s'], 2)
    out['checks'] = dict(parity_vectors=out['max_abs_diff'] <= TOL, finite=bool(np.isfinite(vecs['accelerator']).all()))
    return out


def section_pathgen(dev, s: dict, work: Path) -> dict:
    """RoG's and GCR's path generator the way the paper profile runs its 7B/8B models: an `hf:` transformers checkpoint
    (here a small random-init Llama written to the work folder, so nothing is downloaded) loaded in bfloat16 on CUDA,
    fine-tuned with rank-8 LoRA adapters (merged after), then RoG's beam search and GCR's trie-constrained decoding.
    Checks on each device: the loss falls (mean of the first fifth of steps against the last fifth; `final_loss` is that
    last-fifth mean here, not one step's loss as in the training sections), the weights stay finite, every GCR sequence
    is a path of its KG-Trie."""
    from kgqa_nb.pathgen import GCR, RoG, make_generator, path_prompt, question_relgraph, record_seeds, tiny_generator, training_pairs
    from kgqa_nb.sr import relation_texts
    from kgqa_nb.spanalysis import tree_records
    from kgqa_nb.toyworld import make_toyworld
    kg = make_toyworld(scale=0.2)
    train = tree_records(kg, s['pathgen_questions'], seed=100, max_hops=2, max_seeds=1).to_dict('records')
    test = tree_records(kg, s['pathgen_test'], seed=3, max_hops=2, max_seeds=1).to_dict('records')
    pairs = training_pairs(train, kg)
    ckpt = work / 'pathgen-checkpoint'
    g0 = tiny_generator([path_prompt(r['question']) for r in train + test] + [t for _, t in pairs], layers=s['pathgen_layers'], dim=s['pathgen_dim'])
    g0.model.save_pretrained(ckpt); g0.tok.save_pretrained(ckpt)
    out = dict(checkpoint=f'random-init Llama, {s["pathgen_layers"]} layers, d={s["pathgen_dim"]}', train_questions=len(train), pairs=len(pairs),
               steps=s['pathgen_steps'], lora_rank=8, test_questions=len(test))
    for side, d in (('cpu', torch.device('cpu')), ('accelerator', dev)):
        rog = RoG(make_generator(f'hf:{ckpt}', device=str(d)), steps=s['pathgen_steps'], batch_size=8, lr=2e-3, lora_rank=8)
        _, fit_s = timed(lambda: rog.fit(train, kg), d)
        h = rog.gen.history; k = max(1, len(h) // 5)
        _, beam_s = timed(lambda: [rog.retrieve(r, kg) for r in test], d)
        gcr, inside, n_seqs = GCR.from_rog(rog), True, 0
        for r_ in test:
            trie, _, _ = gcr.gen.build_trie(question_relgraph(kg), record_seeds(r_, kg), relation_texts(kg), gcr.max_hops)
            seqs = gcr.gen.constrained_paths(r_['question'], trie, gcr.n_paths)
            n_seqs += len(seqs); inside &= all(q in trie for q in seqs)
        out[side] = dict(device=str(d), dtype=str(next(rog.gen.model.parameters()).dtype).removeprefix('torch.'), fit_seconds=r(fit_s, 2),
                         steps_per_s=r(len(h) / fit_s, 2), beam_seconds_per_question=r(beam_s / len(test), 3),
                         loss_first=r(np.mean(h[:k])), loss_last=r(np.mean(h[-k:])), final_loss=r(np.mean(h[-k:])),
                         weights_finite=finite_weights(rog.gen.model), gcr_sequences=n_seqs, gcr_inside_trie=bool(inside))
    out['speedup'] = r(out['accelerator']['steps_per_s'] / out['cpu']['steps_per_s'], 2)
    out['checks'] = dict(loss_falls=all(out[x]['loss_last'] < out[x]['loss_first'] for x in ('cpu', 'accelerator')),
                         weights_finite=out['cpu']['weights_finite'] and out['accelerator']['weights_finite'],
                         gcr_inside_trie=out['cpu']['gcr_inside_trie'] and out['accelerator']['gcr_inside_trie'],
                         bfloat16_on_cuda=dev.type != 'cuda' or out['accelerator']['dtype'] == 'bfloat16')
    return out


def device_artifacts() -> list:
    "Names of the artifacts whose notebook declares a `device` parameter."
    from kgqa_nb.profiles import load_manifest, notebook_parameters
    return [n for n, a in load_manifest().items() if any(p.name == 'device' for p in notebook_parameters(a.notebook))]


def section_rerun(dev, s: dict, work: Path) -> dict:
    "`kgqa rerun` of the smoke profile with `device` set to the accelerator for every artifact that takes one, into a fresh folder."
    import pandas as pd, yaml
    from kgqa_nb.profiles import read_profile
    from kgqa_nb.rerun import rerun
    names, prof = device_artifacts(), read_profile('smoke')
    for n in names: prof[n] = {**(prof.get(n) or {}), **s['rerun'].get(n, {}), 'device': str(dev)}
    path, out_root = work / 'profile.yaml', work / 'rerun'
    write_text_atomic(path, '# the smoke profile with device set, written by benchmarks/gpu_check.py\n' + yaml.safe_dump(prof, sort_keys=False))
    with Timer() as t: records = rerun(str(path), only=names, out_root=out_root, heartbeat=60.)
    out = dict(profile='smoke', device=str(dev), overrides=s['rerun'], seconds=r(t.s, 1),
               artifacts=[{k: v for k, v in rec.items() if k != 'outputs'} for rec in records])
    # an artifact skipped only because it needs an LLM (ultrag_oracle_vs_llm) is not a device failure; any other skip is
    checks = {f'{rec["artifact"]}_ok': rec['status'] == 'ok' for rec in records
              if not (rec['status'] == 'skipped' and all(w.startswith('needs an LLM') for w in rec.get('reason', '').split('; ')))}
    ultra_csv = out_root / 'results' / 'ultra_ilpc2022_zero_shot.csv'
    if 'ultra_ilpc_zero_shot' in names and ultra_csv.exists():  # the table records the device each checkpoint ran on
        checks['ultra_ilpc_zero_shot_ran_on_device'] = set(pd.read_csv(ultra_csv)['device']) == {str(dev)}
    out['checks'] = checks
    return out


RUNNERS = dict(ultra=section_ultra, ultrag=section_ultrag, subgraphrag=section_subgraphrag, sr=section_sr, text=section_text,
               pathgen=section_pathgen, rerun=section_rerun)


def run_section(name: str, dev, s: dict, work: Path) -> dict:
    "One section's figures and checks; an exception becomes `error` (one line) and a failed section, so the others still run."
    print(f'== {name}', file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try: res = RUNNERS[name](dev, s, work)
    except Exception as e:
        traceback.print_exc()
        res = dict(error=f'{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}', checks={})
    res['seconds'] = r(time.perf_counter() - t0, 1)
    res['ok'] = 'error' not in res and bool(res['checks']) and all(res['checks'].values())
    return res


def versions(dev) -> dict:
    "The accelerator's name and the versions that decide what runs on it."
    cuda = dev.type == 'cuda'
    return dict(device=torch.cuda.get_device_name(dev) if cuda else 'cpu (dry run: the CPU stands in for the accelerator)',
                device_type=dev.type, torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version() if cuda else None,
                compute_capability='.'.join(map(str, torch.cuda.get_device_capability(dev))) if cuda else None,
                gpu_memory_gib=r(torch.cuda.get_device_properties(dev).total_memory / 2**30, 1) if cuda else None,
                cpu_threads=torch.get_num_threads())


def table(rep: dict) -> str:
    "The short table printed at the end: one line per section, the accelerator's figure beside the CPU's."
    fig = dict(ultra=('seconds_per_batch', 's/batch'), ultrag=('total_s', 's/query'), subgraphrag=('questions_per_s', 'questions/s'),
               sr=('questions_per_s', 'questions/s'), text=('strings_per_s', 'strings/s'), pathgen=('steps_per_s', 'steps/s'))
    lines = [f'{"section":<12} {"ok":<4} {"seconds":>8} {"accelerator":>12} {"cpu":>12}  {"unit":<12} checks']
    for name, sec in rep['sections'].items():
        k, unit = fig.get(name, (None, ''))
        acc, cpu = ((sec.get('accelerator') or {}).get(k), (sec.get('cpu') or {}).get(k)) if k else (None, None)
        show = lambda v: '' if v is None else f'{v:.4g}'
        checks = sec.get('error') or ', '.join(f'{c}={v}' for c, v in sec['checks'].items())
        lines.append(f'{name:<12} {"yes" if sec["ok"] else "NO":<4} {sec["seconds"]:>8.1f} {show(acc):>12} {show(cpu):>12}  {unit:<12} {checks}')
    return '\n'.join(lines)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--device', default='cuda', help='the accelerator: cuda, cuda:N, or cpu for the dry run')
    ap.add_argument('--tiny', action='store_true', help='tiny sizes: the dry run of the same code paths (a couple of minutes on a CPU)')
    ap.add_argument('--only', nargs='*', choices=SECTIONS, help='sections to run (default: all; the report then holds only these)')
    ap.add_argument('--out', help='the JSON report (default: benchmarks/results/gpu.json for the real run, _smoke/gpu_check/ otherwise)')
    ap.add_argument('--work', help='scratch folder, new or empty (default: _smoke/gpu_check/work[-tiny], emptied first)')
    ap.add_argument('--merge', nargs='+', metavar='REPORT', help='no run: join the reports of runs that split the sections '
                    '(--only) on one device into one report at --out (a device lease too small to carry every input at once)')
    ap.add_argument('--note', action='append', default=[], help='with --merge: a line on how the runs were made, kept in the report (repeatable)')
    return ap.parse_args(argv)


def merge_reports(reps: list) -> dict:
    "One report from the reports of `--only` runs (or merged reports) on the same device and versions, each section from exactly one run."
    same = ('device', 'device_type', 'torch', 'cuda', 'tiny')
    for k in same:
        if len({json.dumps(x.get(k)) for x in reps}) > 1: raise ValueError(f'the reports differ in {k!r}: {[x.get(k) for x in reps]}')
    sections = {}
    for x in reps:
        twice = set(sections) & set(x['sections'])
        if twice: raise ValueError(f'section(s) {sorted(twice)} appear in more than one report')
        sections.update(x['sections'])
    sections = {n: sections[n] for n in SECTIONS if n in sections}
    done = list(sections) == list(SECTIONS)
    return {**{k: v for k, v in reps[0].items() if k not in ('sections', 'provenance', 'seconds', 'complete', 'ok', 'cpu_threads')},
            'cpu_threads': sorted({x.get('cpu_threads') for x in reps}, key=str)[-1], 'seconds': r(sum(x['seconds'] for x in reps), 1),
            'complete': done, 'ok': done and all(s_['ok'] for s_ in sections.values()), 'sections': sections,
            'parts': [p for x in reps for p in (x['parts'] if 'parts' in x else [dict(sections=list(x['sections']), seconds=x['seconds'], provenance=x['provenance'])])]}


def main(argv=None) -> int:
    a = parse(argv)
    if a.merge:
        try:
            reps = [json.loads(Path(f).read_text()) for f in a.merge]
            rep = {**merge_reports(reps), 'notes': [n for x in reps for n in x.get('notes', [])] + a.note}  # a merged report's notes are kept
            out = Path(a.out) if a.out else DEFAULT_OUT if rep['device_type'] == 'cuda' and not rep['tiny'] else project_dirs.scratch / 'gpu_check' / 'gpu-merged.json'
            if out.resolve() == DEFAULT_OUT.resolve() and (rep['device_type'] != 'cuda' or rep['tiny']):
                raise ValueError(f'{DEFAULT_OUT.relative_to(project_dirs.root)} holds the real run only (on CUDA, without --tiny): give another --out')
        except (OSError, ValueError, KeyError) as e:
            print(f'gpu_check --merge: {type(e).__name__}: {e}', file=sys.stderr); return 2
        out.parent.mkdir(parents=True, exist_ok=True); write_text_atomic(out, json.dumps(rep, indent=1, default=str) + '\n')
        print(table(rep)); print(f'{rep["device"]}: {"all checks hold" if rep["ok"] else "FAILED"} (merged from {len(rep["parts"])} runs); wrote {out}')
        return 0 if rep['ok'] else 1
    real = not a.tiny and a.device.startswith('cuda')
    out = Path(a.out) if a.out else DEFAULT_OUT if real else project_dirs.scratch / 'gpu_check' / f'gpu-{a.device}{"-tiny" if a.tiny else ""}.json'
    try:
        dev = get_device(a.device)
        if dev.type not in ('cuda', 'cpu'): raise RuntimeError(f'device {a.device!r} is neither CUDA nor the CPU')
        if not real and out.resolve() == DEFAULT_OUT.resolve():
            raise RuntimeError(f'{DEFAULT_OUT.relative_to(project_dirs.root)} holds the real run only (on CUDA, without --tiny): give another --out')
        if a.work and Path(a.work).exists() and any(Path(a.work).iterdir()):
            raise RuntimeError(f'--work {a.work} is not empty: give a new or empty folder (the default one is emptied first)')
    except RuntimeError as e:
        hint = '; the dry run on this machine is --device cpu --tiny' if a.device.startswith('cuda') and not torch.cuda.is_available() else ''
        print(f'gpu_check: {e}{hint}', file=sys.stderr); return 2
    s = SIZES['tiny' if a.tiny else 'real']
    work = Path(a.work) if a.work else project_dirs.scratch / 'gpu_check' / f'work{"-tiny" if a.tiny else ""}'
    if not a.work: shutil.rmtree(work, ignore_errors=True)  # a fresh folder: no run cached by an earlier check is reused
    work.mkdir(parents=True, exist_ok=True)
    rep, sections, t0 = dict(**versions(dev), tiny=a.tiny, sizes=s), {}, time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    for n in a.only or SECTIONS:  # the report is rewritten after each section: a run cut short keeps what it finished
        sections[n] = run_section(n, dev, s, work)
        done = len(sections) == len(a.only or SECTIONS)
        rep.update(seconds=r(time.perf_counter() - t0, 1), complete=done, ok=done and all(x['ok'] for x in sections.values()),
                   sections=sections, provenance=provenance(dict(device=a.device, tiny=a.tiny, only=a.only), benchmark='gpu_check'))
        write_text_atomic(out, json.dumps(rep, indent=1, default=str) + '\n')
    print(table(rep)); print(f'{rep["device"]}: {"all checks hold" if rep["ok"] else "FAILED"} in {rep["seconds"]:.0f} s; wrote {out}')
    return 0 if rep['ok'] else 1


if __name__ == '__main__': sys.exit(main())
