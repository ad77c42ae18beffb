"""Questions name only labelled entities (issue 37): on a toy world with half its labels taken away, a generation run never
writes a record naming an ID or an unlabelled seed or answer, and counts what it rejected for it; without the rule the same
run does name IDs. A generator that names an unlabelled entity is caught by validation. On CoDEx-M (data) no question
names an ID."""
import dataclasses, json

import numpy as np
import pandas as pd
import pytest

from kgqa_nb.kg import names_an_id, parse_item
from kgqa_nb.toyworld import make_toyworld
from kgqa_nb.sparql import OxigraphStore
from kgqa_nb.sampling import sample_seed_subgraph, subgraph_text
from kgqa_nb.generate import datapoint_prompt, offline_datapoint_model
from kgqa_nb.validate import validate_response
from kgqa_nb.dataset import id_naming_by_split
from kgqa_nb.synthkgqa import GenerationConfig, generate_cli, run_generation


@pytest.fixture(scope='module')
def half_labelled():
    "The toy world with the labels of about half its entities taken away (same graph, same indices), and its store."
    kg = make_toyworld()
    drop = np.random.default_rng(0).random(kg.num_entities) < 0.5
    g = dataclasses.replace(kg, entity_labels=[i if d else l for i, l, d in zip(kg.entity_ids, kg.entity_labels, drop)],
                            name='toyworld-half-labelled')
    assert 0.4 < 1 - g.labelled_mask.mean() < 0.6
    return g, OxigraphStore.from_kg(g, isolation='thread')


def records(folder):
    return [json.loads(l) for l in (folder / 'records.jsonl').read_text().splitlines()]


def labelled(g, item) -> bool:
    return g.has_label(g.entity_index[parse_item(item)[1] if '(' in item else item])


def test_run_names_only_labelled_entities_and_counts_the_rejections(half_labelled, tmp_path):
    g, store = half_labelled
    s = run_generation(tmp_path / 'run', GenerationConfig(n_target=40, batch_size=40), kg=g, store=store, verbose=False)
    recs = records(tmp_path / 'run')
    assert len(recs) == 40
    assert not any(names_an_id(r['question']) or names_an_id(r['paraphrased_question']) for r in recs)
    assert all(labelled(g, x) for r in recs for x in [*r['seed_entities'], r['answer_node'], *r['all_answers_wikidata']])
    assert s['rejected'].get('unlabelled_entity:answer', 0) > 0  # answers outside the labelled sample are caught and counted
    flog = json.loads((tmp_path / 'run' / 'filter_log.json').read_text())
    assert flog['rejected_by_family']['unlabelled_entity'] == sum(v for k, v in s['rejected'].items() if k.startswith('unlabelled_entity'))
    card = (tmp_path / 'run' / 'dataset_card.md').read_text()
    assert '## Questions naming an ID' in card and 'rejected: unlabelled_entity:answer' in card
    manifest = json.loads((tmp_path / 'run' / 'manifest.json').read_text())
    assert manifest['identity']['config']['labelled_only'] is True


def test_without_the_rule_the_same_run_names_ids(half_labelled, tmp_path):
    g, store = half_labelled
    run_generation(tmp_path / 'run', GenerationConfig(n_target=40, batch_size=40, labelled_only=False), kg=g, store=store, verbose=False)
    recs = records(tmp_path / 'run')
    naming = sum(names_an_id(r['question']) for r in recs)
    assert naming > 0
    assert id_naming_by_split({'all': pd.DataFrame(recs)}).loc['all', 'naming an ID'] >= naming


def test_a_generator_naming_an_unlabelled_entity_is_rejected(half_labelled):
    g, store = half_labelled
    reasons = []
    for i in range(40):  # samples drawn over every entity: the offline generator names whatever it was shown
        sample = sample_seed_subgraph(g, np.random.default_rng([3, i]))
        reply = offline_datapoint_model(datapoint_prompt(subgraph_text(g, sample.edges), 2))
        parsed, v = validate_response(g, store, sample, reply)
        reasons.append(v.reason)
        if v.ok: assert all(labelled(g, x) for x in [*v.details['seed_entities'], v.details['answer_node'], *v.all_answers])
        _, loose = validate_response(g, store, sample, reply, labelled_only=False)
        if v.reason and v.reason.startswith('unlabelled_entity'): assert loose.reason is None or not loose.reason.startswith('unlabelled')
    assert 'unlabelled_entity:seed' in reasons and 'unlabelled_entity:answer' in reasons


def test_cli_flag_turns_the_rule_off_and_records_it(tmp_path):
    out = tmp_path / 'run'
    assert generate_cli(['--kg', 'toyworld', '--n', '5', '--out', str(out), '--no-labelled-only']) == 0
    assert json.loads((out / 'manifest.json').read_text())['identity']['config']['labelled_only'] is False
    from kgqa_nb.runs import ManifestMismatch
    with pytest.raises(ManifestMismatch, match='config.labelled_only: folder has False, this run has True'):
        generate_cli(['--kg', 'toyworld', '--n', '5', '--out', str(out)])


@pytest.mark.data('codex')
def test_codex_questions_name_no_id(tmp_path):
    s = run_generation(tmp_path / 'run', GenerationConfig(kg='codex-m', n_target=30, batch_size=32), verbose=False)
    recs = records(tmp_path / 'run')
    assert len(recs) == 30 and not any(names_an_id(r['question']) or names_an_id(r['paraphrased_question']) for r in recs)
    assert any(r['n_hops'] >= 2 for r in recs)  # still multi-hop


def test_a_paraphrase_naming_an_id_is_rejected_and_counted(tmp_path):
    from kgqa_nb.llm import LLMClient
    from kgqa_nb.runs import GenerationError

    class IdParaphraser(LLMClient):
        "The offline paraphraser, with a bare ID copied into every paraphrase."
        def chat_many(self, batch, *args, **kw):
            return [r if isinstance(r, Exception) else dataclasses.replace(r, text=r.text.strip().rstrip('?') + ' (Q5)?')
                    for r in super().chat_many(batch, *args, **kw)]

    kg = make_toyworld()
    cfg = dict(n_target=5, max_candidates=16, batch_size=16)
    with pytest.raises(GenerationError, match='no record'):
        run_generation(tmp_path / 'on', GenerationConfig(**cfg), kg=kg, para=IdParaphraser('offline', cache_dir=tmp_path / 'c1'), verbose=False)
    flog = json.loads((tmp_path / 'on' / 'filter_log.json').read_text())
    assert flog['accepted'] == 0 and flog['rejected']['unlabelled_entity:paraphrase'] > 0
    s = run_generation(tmp_path / 'off', GenerationConfig(**cfg, labelled_only=False), kg=kg,
                       para=IdParaphraser('offline', cache_dir=tmp_path / 'c2'), verbose=False)
    assert s['records'] == 5 and all(names_an_id(r['paraphrased_question']) for r in records(tmp_path / 'off'))
