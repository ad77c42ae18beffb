"""Convert notebooks to and from a plain-text 'percent' form, for editing notebooks with ordinary text tools.

    python tools/nbpercent.py to-nb  draft.py  nbs/05_sampling.ipynb
    python tools/nbpercent.py to-py  nbs/05_sampling.ipynb  draft.py

Cells start with a marker line: `# %%` (code), `# %% [markdown]` (markdown, each line prefixed by '# '),
optionally followed by `tags=["parameters"]`. The text form has no outputs; when `to-nb` overwrites a notebook, a code cell
whose source is unchanged keeps the outputs it had (chapters are committed with the outputs `make chapters` gives them;
run it again after editing a chapter, and a test notices outputs that a re-execution no longer gives).
"""
import json, re, sys
from pathlib import Path

MARK = re.compile(r'^# %%(?P<md> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$')

def py_to_cells(text):
    cells, cur = [], None
    for line in text.splitlines():
        m = MARK.match(line)
        if m:
            if cur: cells.append(cur)
            cur = dict(md=bool(m['md']), tags=json.loads(m['tags']) if m['tags'] else [], lines=[])
        elif cur is not None: cur['lines'].append(line)
    if cur: cells.append(cur)
    out = []
    for c in cells:
        lines = c['lines']
        while lines and not lines[-1].strip(): lines.pop()
        while lines and not lines[0].strip(): lines.pop(0)
        if c['md']: lines = [l[2:] if l.startswith('# ') else l.lstrip('#') for l in lines]
        src = '\n'.join(lines)
        cell = dict(cell_type='markdown' if c['md'] else 'code', metadata={}, source=src.splitlines(keepends=True))
        if c['tags']: cell['metadata']['tags'] = c['tags']
        if not c['md']: cell.update(execution_count=None, outputs=[])
        out.append(cell)
    return out

def carry_outputs(cells, old_cells):
    "Give each new code cell the outputs of an old code cell with the same source (in order, each old cell used once)."
    pool = {}
    for c in old_cells:
        if c['cell_type'] == 'code' and c.get('outputs'): pool.setdefault(''.join(c['source']), []).append(c['outputs'])
    for c in cells:
        if c['cell_type'] == 'code' and pool.get(''.join(c['source'])): c['outputs'] = pool[''.join(c['source'])].pop(0)
    return cells

def to_nb(src, dst):
    cells = py_to_cells(Path(src).read_text())
    if Path(dst).exists(): carry_outputs(cells, json.loads(Path(dst).read_text())['cells'])
    nb = dict(cells=cells, metadata=dict(kernelspec=dict(display_name='python3', language='python', name='python3')),
              nbformat=4, nbformat_minor=5)
    for i, c in enumerate(nb['cells']): c['id'] = f'c{i:03d}'
    Path(dst).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')

def to_py(src, dst):
    nb = json.loads(Path(src).read_text())
    parts = []
    for c in nb['cells']:
        tags = c.get('metadata', {}).get('tags')
        head = '# %%' + (' [markdown]' if c['cell_type'] == 'markdown' else '') + (f' tags={json.dumps(tags)}' if tags else '')
        body = ''.join(c['source'])
        if c['cell_type'] == 'markdown': body = '\n'.join('# ' + l if l else '#' for l in body.splitlines())
        parts.append(head + '\n' + body + '\n')
    Path(dst).write_text('\n'.join(parts))

if __name__ == '__main__':
    cmd, src, dst = sys.argv[1:4]
    {'to-nb': to_nb, 'to-py': to_py}[cmd](src, dst)
