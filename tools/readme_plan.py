"""The paper plan's totals in README.md, written from the plan itself (issue 41, item 7), never by hand.

    python tools/readme_plan.py            # plan the paper profile (no network call) and rewrite the README's plan sentence
    python tools/readme_plan.py --check    # exit 1 when the README's sentence is not the plan's
    python tools/readme_plan.py --plan F   # use a plan JSON `kgqa rerun --plan` wrote (e.g. _smoke/plans/paper.json)

The sentence sits between `<!-- plan:paper -->` and `<!-- /plan:paper -->`. It is the plan a fresh clone makes: prompt
sizes from the committed measurements (`plan.MEASURED_PROMPTS`), times from the committed runs' provenance, no cache of
the machine it runs on, so every machine writes the same sentence from the same commit."""
import argparse, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = '<!-- plan:paper -->', '<!-- /plan:paper -->'
BLOCK = re.compile(re.escape(START) + r'.*?' + re.escape(END), re.S)


def plan_sentence(plan: dict) -> str:
    "The README's one sentence of a plan's totals: calls, interactive cost and hours side by side (and one after another), batch cost, what ends last, the slowest artifacts."
    from kgqa_nb.plan import fmt_seconds
    t, sb = plan['total'], plan['total']['side_by_side']
    slow = sorted((a for a in plan['artifacts'] if a.get('seconds')), key=lambda a: -a['seconds'])[:3]
    how = (f"with {sb['jobs']} artifacts side by side (`--jobs {sb['jobs']}`, each model's limits shared by the artifacts calling it at "
           f"once; {fmt_seconds(t['seconds'])} one after another)" if sb['jobs'] > 1 else 'one artifact at a time')
    return (f"`kgqa rerun --profile {plan['profile']} --plan` plans {t['api_calls']:,} LLM calls: ${t['cost_usd']:,.2f} and about "
            f"{fmt_seconds(sb['seconds'])} interactive at the stated limits {how}, ${t['batch_cost_usd']:,.2f} where the code batches a role "
            f"through the Batch API" + (f"; as the profile runs it (Batch API for {', '.join(t['llm_batch'])}, each batch counted at its "
               f"{plan['settings']['batch_hours']:g} h deadline, then its requests interactively should none come back) ${t['run_cost_usd']:,.2f}, about {fmt_seconds(sb['run_seconds'])}"
               + (f" ({fmt_seconds(t['run_seconds'])} one after another)" if sb['jobs'] > 1 else '') if t.get('llm_batch') else '')
            + (f"; it ends with {' -> '.join(sb['chain'])}, each starting when the one before it ends" if sb['jobs'] > 1 and len(sb['chain']) > 1 else '')
            + f"; the longest artifacts: " + ', '.join(f"{a['artifact']} {fmt_seconds(a['seconds'])}" for a in slow) + '.')


def with_sentence(readme: str, sentence: str) -> str:
    "The README text with its plan block holding `sentence`; ValueError when it has no block."
    if len(BLOCK.findall(readme)) != 1: raise ValueError(f'README.md must hold exactly one {START} ... {END} block')
    import textwrap  # the README reads in short lines (tests/test_hygiene.py): the sentence wrapped, the block on lines of its own
    text = textwrap.fill(sentence, width=118, break_long_words=False, break_on_hyphens=False)
    return BLOCK.sub(lambda m: f'{START}\n{text}\n{END}', readme)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--check', action='store_true', help='exit 1 when the README differs from the plan')
    ap.add_argument('--plan', help='a plan JSON written by kgqa rerun --plan (default: plan the paper profile now)')
    a = ap.parse_args(argv)
    if a.plan: plan = json.loads(Path(a.plan).read_text())
    else:
        from kgqa_nb.core import project_dirs
        from kgqa_nb.plan import plan_profile, prior_runs
        plan = plan_profile('paper', roots=[], prior=prior_runs([project_dirs.results]))  # what a fresh clone plans
    readme = ROOT / 'README.md'
    old = readme.read_text(); new = with_sentence(old, plan_sentence(plan))
    if a.check:
        if new != old: print('README.md: the paper plan sentence is not the plan\'s; run python tools/readme_plan.py', file=sys.stderr); return 1
        print('README.md states the paper plan as it is'); return 0
    if new != old: readme.write_text(new)
    print(plan_sentence(plan))
    return 0


if __name__ == '__main__': sys.exit(main())
