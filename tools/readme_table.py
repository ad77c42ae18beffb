"""Print the README's artifact table from params/manifest.yaml (each entry's one-sentence `title`; paste it into README.md; a test checks they agree)."""
import yaml
from pathlib import Path

PAPER = {'kg_overview': 'all', 'ultra_ilpc_zero_shot': 'ULTRAG (ULTRA executor)'}  # by name; else by the name's prefix below
PREFIX = {'kgrag_': 'KG-RAG', 'ultrag_': 'ULTRAG', 'kgqagen_': 'KGQAGen'}


def paper_of(name: str) -> str:
    "The paper an artifact belongs to: listed by name, else by its name's prefix, else SynthKGQA."
    return PAPER.get(name) or next((p for pre, p in PREFIX.items() if name.startswith(pre)), 'SynthKGQA')

def short_outputs(outputs, width: int = 10_000) -> str:
    "Output file names, those that extend another's stem ('x.csv', 'x_questions.csv') folded into it: `x{,_questions}.csv`."
    paths = [Path(o) for o in outputs]
    base = {}  # path -> the output whose stem it extends (same suffix), shortest stem first
    for q in paths:
        cands = [b for b in paths if b != q and b.suffix == q.suffix and q.stem.startswith(b.stem + '_')]
        if cands: base[q] = min(cands, key=lambda b: len(b.stem))
    cells = []
    for q in paths:
        if q in base: continue
        ext = [x.stem[len(q.stem):] for x in paths if base.get(x) == q]
        cells.append(f'`{q.stem}{{,{",".join(ext)}}}{q.suffix}`' if ext else f'`{q.name}`')
    if len(', '.join(cells)) <= width: return ', '.join(cells)
    more = lambda k: f' and {k} more (`params/manifest.yaml`)'
    kept = []
    while cells and len(', '.join(kept + cells[:1])) + len(more(len(cells) - 1)) <= width: kept.append(cells.pop(0))
    return ', '.join(kept) + more(len(cells))

ROW_WIDTH = 300  # the README's longest line (tests/test_hygiene.py)

def rows():
    man = yaml.safe_load((Path(__file__).resolve().parents[1] / 'params' / 'manifest.yaml').read_text())
    for name, spec in man.items():
        head = f"| `{name}` | {paper_of(name)} | {spec['title']} | `{spec['notebook']}` | "
        yield head + short_outputs(spec['outputs'], ROW_WIDTH - len(head) - 2) + ' |'

if __name__ == '__main__':
    print('| artifact | paper | what | notebook | outputs (under `results/`, `figures/`) |\n|---|---|---|---|---|')
    print('\n'.join(rows()))
