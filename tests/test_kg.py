"""KG loading: every malformed triple file is refused with its file and line (nothing half-loaded), headers are skipped,
TSV round trips keep odd labels, CoDEx-M loads in full or labelled view (named so), CoDEx's own entity file is read,
link-prediction splits in both layouts, and the real data (skipped where the data dir lacks it)."""
import json
from pathlib import Path

import numpy as np
import pytest

from kgqa_nb.core import MalformedFileError, data_dir
from kgqa_nb.kg import KnowledgeGraph, UnknownIdError, format_item, parse_item, read_triple_file, read_tsv
from kgqa_nb.loaders import LinkPredictionSplit, load_codex_m, load_ilpc2022, load_kg, load_metaqa_kb, load_split

TRIPLES = 'Q1\tP1\tQ2\nQ2\tP1\tQ3\nQ3\tP2\tQ1\n'


def kg_folder(tmp_path, triples: str, name='kg'):
    d = tmp_path / name; d.mkdir()
    (d / 'triples.tsv').write_text(triples)
    return d


# ---------------------------------------------------------------- strict triple files

@pytest.mark.parametrize('text,line,what', [
    (TRIPLES + 'Q4\tP1\n', 4, '2 tab-separated fields, expected 3'),  # old: an entity with ID ''
    ('Q1\tP1\tQ2\tQ9\n' + TRIPLES, 1, '4 tab-separated fields, expected 3'),  # old: the fourth column silently dropped
    (TRIPLES + 'Q4\tP1\tQ5\tQ6\n', 4, '4 tab-separated fields, expected 3'),  # old: pandas' "Error tokenizing data"
    (TRIPLES + 'Ada Lovelace\tP1\tQ2\n', 4, "head ID 'Ada Lovelace' contains whitespace"),  # old: an IRI error much later
    (TRIPLES + 'Q4\tP 1\tQ2\n', 4, "relation ID 'P 1' contains whitespace"),
    (TRIPLES + 'Q4\tP1\t<Q2>\n', 4, "tail ID '<Q2>' contains '<'"),
    (TRIPLES + 'Q4\t\tQ2\n', 4, 'empty relation ID'),
    ('Q1 P1 Q2\n', 1, 'look separated by spaces'),
])
def test_malformed_triples_named_by_file_and_line(tmp_path, text, line, what):
    d = kg_folder(tmp_path, text)
    with pytest.raises(MalformedFileError) as e: load_kg(str(d))
    msg = str(e.value)
    assert f'triples.tsv:{line}: ' in msg and what in msg, msg
    assert '\n' not in msg and 'tokenizing' not in msg
    assert e.value.line == line and e.value.path == d / 'triples.tsv'


@pytest.mark.parametrize('header', ['head\trelation\ttail', 'subject predicate object', 'h\tr\tt', 'Source\tRelation\tTarget'])
def test_header_line_is_skipped(tmp_path, header):
    kg = read_tsv(kg_folder(tmp_path, header + '\n' + TRIPLES))
    assert kg.num_triples == 3 and not {'head', 'subject', 'h', 'Source'} & set(kg.entity_ids)


def test_header_only_in_first_line(tmp_path):
    with pytest.raises(MalformedFileError, match=r'triples.tsv:4: 1 tab-separated field'):
        read_tsv(kg_folder(tmp_path, TRIPLES + 'subject predicate object\n'))


def test_line_numbers_count_blank_lines_and_crlf(tmp_path):
    p = tmp_path / 't.txt'
    p.write_text('Q1\tP1\tQ2\r\n\r\nQ2\tP1\tQ3\r\n')
    df = read_triple_file(p)
    assert df.values.tolist() == [['Q1', 'P1', 'Q2'], ['Q2', 'P1', 'Q3']] and df.index.tolist() == [1, 3]
    p.write_text('Q1\tP1\tQ2\n\nQ2\tP1\n')
    with pytest.raises(MalformedFileError, match='t.txt:3: 2 tab-separated'): read_triple_file(p)


def test_not_utf8_and_empty(tmp_path):
    p = tmp_path / 't.txt'
    p.write_bytes(b'Q1\tP1\tQ2\nQ\xff\tP1\tQ2\n')
    with pytest.raises(MalformedFileError, match='t.txt:2: not UTF-8'): read_triple_file(p)
    p.write_text('\n\n')
    with pytest.raises(MalformedFileError, match='no triples'): read_triple_file(p)


def test_fast_and_slow_paths_agree(tmp_path):
    "A clean file (fast path) and the same file with a blank line (line-by-line path) give the same triples."
    rng = np.random.default_rng(0)
    rows = [f'Q{a}\tP{b}\tQ{c}' for a, b, c in rng.integers(0, 50, (300, 3))]
    (tmp_path / 'a.txt').write_text('\n'.join(rows) + '\n')
    (tmp_path / 'b.txt').write_text('\n'.join(rows[:100]) + '\n\n' + '\n'.join(rows[100:]))  # no final newline either
    a, b = read_triple_file(tmp_path / 'a.txt'), read_triple_file(tmp_path / 'b.txt')
    assert a.values.tolist() == b.values.tolist() == [r.split('\t') for r in rows]
    assert a.index.tolist() == list(range(1, 301)) and b.index.tolist() == list(range(1, 101)) + list(range(102, 302))


# ---------------------------------------------------------------- TSV metadata and round trips

def test_tsv_round_trip_keeps_quotes_and_parentheses(tmp_path):
    kg = KnowledgeGraph([0, 1], [0, 0], [1, 2], ['Q1', 'Q2', 'Q3'], ['P1'], ['The "Boss"', '(500) Days of Summer', 'a - b'],
                        ['is "x"'], ['', 'desc "q"', ''], name='odd')
    back = read_tsv(kg.to_tsv(tmp_path / 'odd'))
    assert back.entity_labels == kg.entity_labels and back.relation_labels == kg.relation_labels
    assert back.entity_descriptions == kg.entity_descriptions


def test_tsv_writer_refuses_what_tsv_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="ID 'Q 2' cannot be written"):
        KnowledgeGraph([0], [0], [1], ['Q1', 'Q 2'], ['P1']).to_tsv(tmp_path / 'a')
    with pytest.raises(ValueError, match='description of entity Q2'):
        KnowledgeGraph([0], [0], [1], ['Q1', 'Q2'], ['P1'], entity_descriptions=['', 'two\nlines']).to_tsv(tmp_path / 'b')


@pytest.mark.parametrize('text,match', [
    ('Q1\tAda\t\n', 'entities.tsv:1: the first line must be the header'),
    ('id\tlabel\tdescription\nQ1\tAda\n', 'entities.tsv:2: 2 tab-separated fields, expected 3'),
    ('id\tlabel\tdescription\nQ1\tAda\t\nQ1\tAda again\t\n', "entities.tsv:3: ID 'Q1' is listed twice"),
    ('id\tlabel\tdescription\nQ 1\tAda\t\n', "entities.tsv:2: ID 'Q 1' contains whitespace"),
])
def test_malformed_entity_file(tmp_path, text, match):
    d = kg_folder(tmp_path, TRIPLES)
    (d / 'entities.tsv').write_text(text)
    with pytest.raises(MalformedFileError, match=match): read_tsv(d)


def test_load_kg_paths_give_one_line_errors(tmp_path):
    d = kg_folder(tmp_path, TRIPLES)
    for arg, match in ((str(d / 'triples.tsv'), 'is a file but not N-Triples'), (str(tmp_path), 'is not a KG folder'),
                       (str(tmp_path / 'nope'), 'nothing exists there'), ('codexm', "unknown KG 'codexm'")):
        with pytest.raises(UnknownIdError, match=match) as e: load_kg(arg)
        assert '\n' not in str(e.value)


# ---------------------------------------------------------------- text forms of unlabelled entities

def test_text_forms_when_label_is_the_qid():
    kg = KnowledgeGraph([0], [0], [1], ['Q1', 'Q2'], ['P20'], ['Ada', 'Q2'], ['place of death'], name='t')
    assert kg.triple_text(0) == ('Ada (Q1)', 'place of death (P20)', 'Q2 (Q2)')
    assert kg.parse_entity('Q2 (Q2)') == 1 and kg.parse_entity(' q2  (Q2)') == 1
    assert parse_item(format_item('Q2', 'Q2')) == ('Q2', 'Q2')


# ---------------------------------------------------------------- CoDEx-M views on a miniature data dir

def mini_codex(root: Path, own_labels=False, bad_line=None):
    base = root / 'codex' / 'data'
    (base / 'triples' / 'codex-m').mkdir(parents=True); (base / 'relations' / 'en').mkdir(parents=True); (base / 'types' / 'en').mkdir(parents=True)
    splits = {'train': 'Q1\tP20\tQ2\nQ3\tP20\tQ2\nQ6\tP31\tQ5\n', 'valid': 'Q4\tP27\tQ5\n', 'test': 'Q1\tP27\tQ5\n'}
    if bad_line: splits['valid'] += bad_line
    for s, rows in splits.items(): (base / 'triples' / 'codex-m' / f'{s}.txt').write_text(rows)
    (base / 'relations' / 'en' / 'relations.json').write_text(json.dumps(
        {'P20': {'label': 'place of death', 'description': ''}, 'P27': {'label': 'country of citizenship'}, 'P31': {'label': 'instance of'}}))
    (base / 'types' / 'en' / 'types.json').write_text(json.dumps({'Q5': {'label': 'Spain (type)', 'description': ''}}))
    fb = root / 'fb15k237-wikidata-labels' / 'FB15k-237'; fb.mkdir(parents=True)
    (fb / 'entity2wikidata.json').write_text(json.dumps({'/m/1': {'wikidata_id': 'Q1', 'label': 'Ada', 'description': 'd'},
                                                         '/m/2': {'wikidata_id': 'Q2', 'label': 'Madrid', 'description': ''}}))
    if own_labels:
        (base / 'entities' / 'en').mkdir(parents=True)
        (base / 'entities' / 'en' / 'entities.json').write_text(json.dumps(
            {q: {'label': l, 'description': f'about {l}', 'wiki': ''} for q, l in
             (('Q1', 'Ada Lovelace'), ('Q2', 'Madrid'), ('Q3', 'Goya'), ('Q4', 'Lorca'), ('Q5', 'Spain'), ('Q6', 'Toledo'))}))
    return root


def test_codex_full_view_keeps_every_triple(tmp_path):
    kg = load_codex_m(root=mini_codex(tmp_path))
    assert (kg.name, kg.num_entities, kg.num_triples) == ('codex-m', 6, 5)
    madrid = kg.entity('Q2')
    assert sorted(kg.entity_ids[h] for h in kg.head[(kg.tail == madrid)]) == ['Q1', 'Q3']  # "who died in Madrid": both
    assert kg.entity_text(kg.entity('Q3')) == 'Q3 (Q3)' and kg.entity_text(kg.entity('Q5')) == 'Spain (type) (Q5)'
    lab = load_codex_m('labelled', root=tmp_path)
    assert (lab.name, lab.num_triples, sorted(lab.entity_ids)) == ('codex-m-labelled', 2, ['Q1', 'Q2', 'Q5'])
    assert load_kg('codex-m', root=tmp_path).name == 'codex-m' and load_kg('codex-m-labelled', root=tmp_path).name == 'codex-m-labelled'
    assert load_codex_m(splits=('train',), root=tmp_path).name == 'codex-m[train]'
    with pytest.raises(ValueError, match='unknown CoDEx-M view'): load_codex_m('all', root=tmp_path)


def test_codex_own_entity_file_labels_everything(tmp_path):
    kg = load_codex_m(root=mini_codex(tmp_path, own_labels=True))
    assert kg.entity_text(kg.entity('Q3')) == 'Goya (Q3)' and kg.entity_descriptions[kg.entity('Q3')] == 'about Goya'
    assert kg.entity_labels[kg.entity('Q1')] == 'Ada Lovelace'  # CoDEx's own label wins over the FB15k-237 one
    assert load_codex_m('labelled', root=tmp_path).num_triples == kg.num_triples == 5


def test_codex_malformed_files(tmp_path):
    mini_codex(tmp_path, bad_line='Q7\tP27\n')
    with pytest.raises(MalformedFileError, match=r'valid.txt:2: 2 tab-separated'): load_codex_m(root=tmp_path)
    (tmp_path / 'codex' / 'data' / 'triples' / 'codex-m' / 'valid.txt').write_text('Q4\tP27\tQ5\n')
    ents = tmp_path / 'codex' / 'data' / 'entities' / 'en'; ents.mkdir(parents=True)
    (ents / 'entities.json').write_text('{"Q1": {"label": "Ada"},\n "Q2": {"label": }}')
    with pytest.raises(MalformedFileError, match='entities.json:2: not valid JSON'): load_codex_m(root=tmp_path)
    (ents / 'entities.json').write_text('{"Q1": {"name": "Ada"}}')
    with pytest.raises(MalformedFileError, match='entry \'Q1\' has no "label"'): load_codex_m(root=tmp_path)


# ---------------------------------------------------------------- link-prediction splits

def write_split(folder: Path, files: dict):
    folder.mkdir(parents=True)
    for n, rows in files.items(): (folder / n).write_text(rows)
    return folder


def test_transductive_split(tmp_path):
    d = write_split(tmp_path / 'fb', {'train.tsv': 'head\trelation\ttail\n' + TRIPLES, 'valid.tsv': 'Q1\tP2\tQ3\n', 'test.tsv': 'Q9\tP1\tQ1\n'})
    sp = load_split(str(d))
    assert isinstance(sp, LinkPredictionSplit) and not sp.inductive and sp.name == 'fb'
    assert sp.graph.num_triples == 3 and sp.entity_ids == ['Q1', 'Q2', 'Q3', 'Q9'] and sp.relation_ids == ['P1', 'P2']
    assert sp.graph.degree()[3] == 0  # a test entity without training edges is an isolated node
    assert sorted(map(tuple, sp.known.tolist())) == sorted(map(tuple, np.concatenate([sp.graph.triples, sp.valid, sp.test]).tolist()))
    assert [sp.entity_ids[sp.test[0, 0]], sp.relation_ids[sp.test[0, 1]], sp.entity_ids[sp.test[0, 2]]] == ['Q9', 'P1', 'Q1']
    assert sp.queries('valid') is sp.valid
    with pytest.raises(ValueError, match="'test' or 'valid'"): sp.queries('train')


def test_inductive_split_ignores_the_training_graph(tmp_path):
    d = write_split(tmp_path / 'ilpc', {'train.txt': 'Q70\tP1\tQ71\n', 'inference.txt': TRIPLES,
                                        'inference_validation.txt': 'Q1\tP2\tQ2\n', 'inference_test.txt': 'Q3\tP1\tQ8\n'})
    sp = load_split(str(d), name='mine')
    assert sp.inductive and sp.name == 'mine' and 'Q70' not in sp.entity_ids and 'Q8' in sp.entity_ids
    assert len(sp.known) == 5


@pytest.mark.parametrize('files,match', [
    ({'train.txt': TRIPLES, 'valid.txt': 'Q1\tP1\tQ2\n'}, 'holds neither train/valid/test'),
    ({'train.txt': TRIPLES, 'valid.txt': 'Q1\tP1\tQ2\n', 'test.txt': 'Q1\tP1\n'}, 'test.txt:1: 2 tab-separated'),
])
def test_split_errors(tmp_path, files, match):
    d = write_split(tmp_path / 's', files)
    with pytest.raises((FileNotFoundError, MalformedFileError, UnknownIdError), match=match): load_split(str(d))


def test_missing_split_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match='is not a folder'): load_split(str(tmp_path / 'absent'))
    with pytest.raises(FileNotFoundError, match='ILPC2022-large not found'): load_ilpc2022('large', root=tmp_path)


def test_metaqa_erratum_and_strictness(tmp_path):
    base = tmp_path / 'metaqa'; base.mkdir()
    for f in ('train.tsv', 'dev.tsv', 'test.tsv'): (base / f).write_text('0\t0\t1\n')
    (base / 'relation2text.txt').write_text('0\tdirected by\n')
    (base / 'entity2text.txt').write_text('0\tKismet\n1\tWilliam Dieterle\n1\tSomeone else\n')
    with pytest.raises(MalformedFileError, match="entity2text.txt:3: ID '1' is listed twice"): load_metaqa_kb(root=tmp_path)
    (base / 'entity2text.txt').write_text('0\tKismet\n1\tWilliam Dieterle\n')
    kg = load_metaqa_kb(root=tmp_path)
    assert kg.triple_text(0) == ('Kismet (M0)', 'directed by (R0)', 'William Dieterle (M1)')


# ---------------------------------------------------------------- real data

def _need(folder):
    if not (data_dir() / folder).exists(): pytest.skip(f'{folder} not in the data dir')


def test_real_codex_m_views():
    _need('codex')
    full, lab = load_kg('codex-m'), load_kg('codex-m-labelled')
    assert (full.name, full.num_entities, full.num_relations, full.num_triples) == ('codex-m', 17_050, 51, 206_205)
    assert lab.name == 'codex-m-labelled' and (lab.num_entities, lab.num_triples) == (4_252, 45_031)
    madrid, p20 = full.entity('Q2807'), full.relation('P20')  # "who died in Madrid?"
    assert int(((full.tail == madrid) & (full.rel == p20)).sum()) == 67
    bare = next(i for i, (l, q) in enumerate(zip(full.entity_labels, full.entity_ids)) if l == q)
    assert full.parse_entity(full.entity_text(bare)) == bare


def test_real_splits():
    _need('ilpc2022'); _need('codex')
    ilpc, cx = load_split('ilpc2022-small'), load_split('codex-m')
    assert ilpc.inductive and ilpc.test.shape == (2902, 3) and ilpc.graph.num_triples == 20_960
    assert not cx.inductive and cx.graph.num_triples == 185_584 and (len(cx.valid), len(cx.test)) == (10_310, 10_311)
    assert len(cx.known) == 206_205


def test_real_metaqa_labels():
    _need('metaqa')
    kg = load_metaqa_kb()
    assert kg.entity_labels[kg.entity('M29')] == 'Michel Bouquet' and kg.entity_labels[kg.entity('M22446')] == 'Michèle Mercier'
