"""Paper claims as data (kgqa_nb.claims): the README's paper-vs-companion table is the generated one, every claim reads
committed files of a manifest artifact, and a doctored cell changes a verdict."""
import shutil, subprocess, sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from kgqa_nb.claims import ClaimError, VERDICTS, claim_verdicts, claims_markdown, load_claims, results_dir
from kgqa_nb.core import project_dirs
from kgqa_nb.profiles import load_manifest

ROOT = project_dirs.root


def test_readme_claims_block_is_the_generated_one():
    "The README's comparison table is what the claims and the committed CSVs give now (rerun tools/readme_claims.py --write)."
    block = subprocess.run([sys.executable, 'tools/readme_claims.py'], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert block.strip() in (ROOT / 'README.md').read_text(), \
        'README paper-vs-companion table is stale: run .venv/bin/python tools/readme_claims.py --write'


def test_every_claim_reads_committed_files_of_a_manifest_artifact():
    manifest = load_manifest()
    verdicts = claim_verdicts()
    assert len(verdicts) >= 20
    for v in verdicts:
        assert v['claim']['artifact'] in manifest, v['id']
        assert v['verdict'] in VERDICTS
        for s in v['sources']: assert (ROOT / s).is_file(), s
        for m in v['parts']: assert isinstance(m['value'], (int, float)), (v['id'], m)



# Manifest artifacts without a claim, each with the reason. An artifact with a paper number belongs in neither dict: it
# gets a claim in params/claims.yaml.
NO_PAPER_COUNTERPART = {
    'retriever_fidelity': "the companion's own check that its cheaper training step converges like SubgraphRAG's; no paper number",
    'retriever_study': "the training runs only (per-question rows); the paper's Section 6 numbers are claimed on "
                       "table4_gt_vs_sp, fig12_gap_by_group and fig14_metric_vs_k, which aggregate them",
}
# Artifacts with a paper counterpart whose companion profile publishes no CSV yet (a claim needs a committed cell): once
# one is committed, the test below fails until the artifact has a claim.
NOT_PUBLISHED = {
    'table3_mintaka': 'the Mintaka files are not in the data folder, so the companion run skips it and commits no CSV',
    'ultrag_oracle_vs_llm': "needs an LLM to write the queries (companion.yaml's not_run); no CSV is committed",
}


def test_every_manifest_artifact_has_a_claim_or_a_reason():
    "Each artifact is claimed, or listed above with a reason; a listed one exists, has no claim and (NOT_PUBLISHED) no CSV."
    manifest, claimed = load_manifest(), {c['artifact'] for c in load_claims()}
    listed = {**NO_PAPER_COUNTERPART, **NOT_PUBLISHED}
    assert not set(NO_PAPER_COUNTERPART) & set(NOT_PUBLISHED)
    missing = sorted(set(manifest) - claimed - set(listed))
    assert missing == [], f'manifest artifacts with no claim in params/claims.yaml and no reason in this test: {missing}'
    for name, why in listed.items():
        assert name in manifest, f'{name} is listed here but not in params/manifest.yaml'
        assert name not in claimed, f'{name} has a claim now: drop it from this test'
        assert len(why.strip()) >= 10, f'{name}: give a reason'
    for name in NOT_PUBLISHED:
        committed = [o for o in manifest[name].outputs if o.endswith('.csv') and (results_dir() / Path(o).name).is_file()]
        assert committed == [], f'{name} now has committed {committed}: add its claim to params/claims.yaml'


def test_the_artifact_check_fails_for_a_new_artifact(tmp_path):
    "A manifest entry with neither a claim nor a reason is named by the check above."
    f = tmp_path / 'manifest.yaml'
    raw = yaml.safe_load((ROOT / 'params' / 'manifest.yaml').read_text())
    raw['new_figure'] = dict(notebook='nbs/99_new_figure.ipynb', outputs=['results/new_figure.csv'])
    f.write_text(yaml.safe_dump(raw))
    manifest, claimed = load_manifest(f), {c['artifact'] for c in load_claims()}
    assert sorted(set(manifest) - claimed - set(NO_PAPER_COUNTERPART) - set(NOT_PUBLISHED)) == ['new_figure']

def _scratch_repo(tmp_path, claim_ids):
    (tmp_path / 'params').mkdir(); shutil.copy(ROOT / 'params' / 'companion.yaml', tmp_path / 'params')
    claims = [c for c in yaml.safe_load((ROOT / 'params' / 'claims.yaml').read_text()) if c['id'] in claim_ids]
    (tmp_path / 'params' / 'claims.yaml').write_text(yaml.safe_dump(claims, allow_unicode=True))
    shutil.copytree(results_dir(), tmp_path / 'results' / 'companion', ignore=shutil.ignore_patterns('executed'))
    return tmp_path


def test_a_doctored_cell_changes_the_verdict(tmp_path):
    root = _scratch_repo(tmp_path, {'ultra-ilpc-zero-shot', 'ultrag-rq1-kg-noise'})
    before = {v['id']: v['verdict'] for v in claim_verdicts(root=root)}
    assert before == {'ultra-ilpc-zero-shot': 'reproduced', 'ultrag-rq1-kg-noise': 'reproduced'}
    f = root / 'results' / 'companion' / 'ultra_ilpc2022_zero_shot.csv'
    df = pd.read_csv(f); df.loc[df.direction == 'both', 'mrr'] = 0.31; df.to_csv(f, index=False)
    f = root / 'results' / 'companion' / 'ultrag_neural_vs_symbolic_paired.csv'
    df = pd.read_csv(f); sel = (df.arm == 'deletion: witnesses deleted') & (df.metric == 'hits@1')
    df.loc[sel, ['difference', 'difference_lo', 'difference_hi']] = [-20.0, -30.0, -10.0]; df.to_csv(f, index=False)
    after = {v['id']: v['verdict'] for v in claim_verdicts(root=root)}
    assert after == {'ultra-ilpc-zero-shot': 'differs', 'ultrag-rq1-kg-noise': 'refuted'}
    assert '0.31' in claims_markdown(claim_verdicts(root=root))


def test_a_renamed_row_is_an_error_not_a_verdict(tmp_path):
    root = _scratch_repo(tmp_path, {'ultra-ilpc-zero-shot'})
    f = root / 'results' / 'companion' / 'ultra_ilpc2022_zero_shot.csv'
    df = pd.read_csv(f); df['direction'] = df['direction'].replace({'both': 'all'}); df.to_csv(f, index=False)
    with pytest.raises(ClaimError, match=r'ultra_ilpc2022_zero_shot.csv: 0 rows where'): claim_verdicts(root=root)


def test_a_bad_claims_file_is_one_line(tmp_path):
    f = tmp_path / 'claims.yaml'
    f.write_text(yaml.safe_dump([dict(id='x', paper='P', where='T', quantity='q', unit='', artifact='a', stand_in='gpt',
                                      rule='equal', statistic='s', parts=[dict(column='c', paper=1)])]))
    with pytest.raises(ClaimError, match="claim 'x': unknown stand_in 'gpt'"): load_claims(f)
