"""Print the README's artifact table from params/manifest.yaml (each entry's one-sentence `title`; paste it into README.md; a test checks they agree)."""
import yaml
from pathlib import Path

PAPER = {'kg_overview': 'all', 'ultra_ilpc_zero_shot': 'ULTRAG (ULTRA executor)'}  # by name; else by the name's prefix below
PREFIX = {'kgrag_': 'KG-RAG', 'ultrag_': 'ULTRAG', 'kgqagen_': 'KGQAGen'}


def paper_of(name: str) -> str:
    "The paper an artifact belongs to: listed by name, else by its name's prefix, else SynthKGQA."
    return PAPER.get(name) or next((p for pre, p in PREFIX.items() if name.startswith(pre)), 'SynthKGQA')

def rows():
    man = yaml.safe_load((Path(__file__).resolve().parents[1] / 'params' / 'manifest.yaml').read_text())
    for name, spec in man.items():
        outs = ', '.join(f'`{Path(o).name}`' for o in spec['outputs'])
        yield f"| `{name}` | {paper_of(name)} | {spec['title']} | `{spec['notebook']}` | {outs} |"

if __name__ == '__main__':
    print('| artifact | paper | what | notebook | outputs (under `results/`, `figures/`) |\n|---|---|---|---|---|')
    print('\n'.join(rows()))
