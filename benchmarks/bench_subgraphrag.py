"""SubgraphRAG retriever (kgqa_nb.subgraphrag): training questions/s and scoring triples/s, on the CPU (and on a GPU when
one is present, for scoring), for question graphs of a given size.

Synthetic question graphs of E triples over N = E / 8 entities (the ratio of SynthKGQA's 2,500-entity / 20,000-triple
graphs) with 384-d text vectors (all-MiniLM-L6-v2's width; random unit vectors, since the encoder is not what is measured).
(1) Training: questions/s of one Adam step per question (forward, BCE over all triples, backward).
(2) Scoring: triples/s of the block-wise forward pass (`SubgraphRAGRetriever.forward`) and of the plain concatenation it
replaces (`forward_concat`), with their ratio; the two are asserted equal. Times are the minimum over repeats.
"""
import time

import numpy as np
import torch
import torch.nn.functional as F

from kgqa_nb.subgraphrag import SubgraphRAGRetriever


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


def run(quick: bool = False) -> dict:
    sizes = [1_000, 5_000] if quick else [1_000, 5_000, 20_000]
    out = {'cpu': [measure(E, steps=2 if quick else 5, repeats=2 if quick else 3) for E in sizes]}
    if torch.cuda.is_available(): out['cuda'] = [measure(E, device='cuda') for E in sizes + [100_000]]
    return out


if __name__ == '__main__':
    import json; print(json.dumps(run(quick=True), indent=1))
