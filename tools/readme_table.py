"""Print the README's artifact table from params/manifest.yaml (paste it into README.md; a test checks they agree)."""
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
        outs = ', '.join(f'`{o}`' for o in spec['outputs'])
        yield f"| `{name}` | {spec.get('description', '')} | {paper_of(name)} | `{spec['notebook']}` | {outs} |"

if __name__ == '__main__':
    print('| artifact | what | paper | notebook | outputs |\n|---|---|---|---|---|')
    print('\n'.join(rows()))
