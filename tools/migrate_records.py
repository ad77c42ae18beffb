"""Bring the committed result records in line with what `core.provenance` writes now (issue 22, item 10).

    python tools/migrate_records.py            # rewrite the committed records under results/ and figures/ in place
    python tools/migrate_records.py --check    # list what would change, change nothing (exit status 1 when something would)

For each committed file under results/ and figures/:
- provenance records (`*.provenance.json`): every path of this machine is written as `core.portable` writes it (the
  repository as a relative path, the data, checkpoint and cache folders as $KGQA_DATA, $KGQA_CKPTS, $KGQA_CACHE, temporary
  files as <tmp>); a record without a `profile` gets the one it was published under (results/<dir>/ and figures/<dir>/:
  <dir>; results/ and figures/ themselves: the profile the executed record of the same artifact names, else paper); and a
  `migrated` field says which tool, at which commit, rewrote which keys. Every other field is kept as it was, the `git`
  block included: a record made from a dirty tree stays marked dirty;
- executed notebooks (`*.ipynb`) and dataset cards (`*.md`): the same path rewriting, on the text;
- the label of an LLM server on this machine, in provenance records and result tables (`*.csv`): `openai:MODEL@HOST`
  without the port and path (`LLMClient.describe` since 2026-12-07: a server started here takes a free port, so the port
  made a cold run's label differ from its replay's). Executed notebooks keep the lines their run printed.
Running it twice changes nothing the second time.
"""
import argparse, json, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = 'tools/migrate_records.py'
LOCAL_SERVER = re.compile(r'@https?://(127\.0\.0\.1|localhost|\[::1\]):\d+/v1\b')  # a label's local server with its port


def local_labels(text: str) -> str:
    "`text` with each label of a server on this machine as `LLMClient.describe` writes it now (host, no port)."
    return LOCAL_SERVER.sub(lambda m: '@' + m[1].strip('[]'), text)


def committed_files() -> list:
    "Files git tracks under results/ and figures/."
    out = subprocess.run(['git', 'ls-files', 'results', 'figures'], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / l for l in out.splitlines() if l]


def published_profile(path: Path, executed_profiles: dict) -> str:
    "The profile a record was published under, from where it lies."
    rel = path.relative_to(ROOT).parts  # ('results', 'companion', ...) or ('results', 'x.provenance.json')
    if len(rel) > 2 and rel[1] != 'executed': return rel[1]
    return executed_profiles.get(f'{rel[0]}/{path.name.replace(".provenance.json", "")}', 'paper')


def executed_profiles(files) -> dict:
    "'results/<output stem>' -> the profile named by the executed record that promised that output (top-level records only)."
    out = {}
    for f in files:
        if f.parent.name == 'executed' and f.parent.parent.name in ('results',) and f.name.endswith('.provenance.json'):
            rec = json.loads(f.read_text())
            for o in rec.get('outputs') or []:
                if rec.get('profile'): out[str(Path(o).with_suffix(''))] = rec['profile']
    return out


def migrate_record(path: Path, reps, commit: str, profiles: dict) -> str | None:
    "The record's new text, or None when it needs no change."
    from kgqa_nb.core import portable
    rec = json.loads(path.read_text())
    new = json.loads(local_labels(json.dumps(portable(rec, reps))))
    keys = [k for k in rec if new[k] != rec[k]]
    if not new.get('profile'):
        new = {**{k: v for k, v in new.items() if k != 'profile'}, 'profile': published_profile(path, profiles)}
        keys.append('profile')
    if not keys: return None
    done = (rec.get('migrated') or {}).get('keys', [])
    new['migrated'] = dict(by=TOOL, commit=commit, keys=sorted(set(done) | set(keys)))
    return json.dumps(new, indent=1) + '\n'


def migrate_text(path: Path, reps) -> str | None:
    "An executed notebook's or a card's new text, or None when it holds no path of this machine."
    from kgqa_nb.core import portable
    text = path.read_text()
    new = portable(text, reps)
    return None if new == text else new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--check', action='store_true', help='list what would change and change nothing')
    a = ap.parse_args(argv)
    from kgqa_nb.core import git_state, path_replacements, write_text_atomic
    reps, commit = path_replacements(root_as='.'), git_state()['commit']
    files = committed_files()
    profiles = executed_profiles(files)
    changed = []
    for f in files:
        if f.name.endswith('.provenance.json'): new = migrate_record(f, reps, commit, profiles)
        elif f.suffix in ('.ipynb', '.md'): new = migrate_text(f, reps)
        elif f.suffix == '.csv': new = None if (t := f.read_text()) == (n := local_labels(t)) else n
        else: continue
        if new is None: continue
        changed.append(f.relative_to(ROOT))
        if not a.check: write_text_atomic(f, new)
    for c in changed: print(('would rewrite ' if a.check else 'rewrote ') + str(c))
    print(f'{len(changed)} of {len(files)} committed files {"need migrating" if a.check else "were migrated"}')
    return 1 if a.check and changed else 0


if __name__ == '__main__': sys.exit(main())
