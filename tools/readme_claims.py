"""The README's paper-vs-companion table, generated from params/claims.yaml and the committed results (kgqa_nb.claims).

    .venv/bin/python tools/readme_claims.py           # print the block
    .venv/bin/python tools/readme_claims.py --write   # replace the block between the claim markers in README.md

tests/test_claims.py fails when the README's block is not what this prints (rerun with --write after a republish)."""
import sys
from kgqa_nb.claims import claim_verdicts, claims_markdown, replace_block
from kgqa_nb.core import project_dirs

if __name__ == '__main__':
    block = claims_markdown(claim_verdicts())
    if sys.argv[1:] == ['--write']:
        readme = project_dirs.root / 'README.md'
        readme.write_text(replace_block(readme.read_text(), block))
        print(f'README.md: claims block rewritten ({sum(l.startswith("| ") for l in block.splitlines()) - 1} claims)')
    elif sys.argv[1:]: sys.exit('usage: readme_claims.py [--write]')
    else: print(block)
