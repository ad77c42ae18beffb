"""Loaders of the published layouts (issue 15): each test writes a small file in the exact published layout, reads it,
and damages it to check that the loader refuses it by name (file, line or field). No network: downloads use file:// URLs."""
import bz2, gzip, hashlib, io, json, os, pickle, zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kgqa_nb.core import MalformedFileError, data_dir
from kgqa_nb import loaders as K
from kgqa_nb.kg import KnowledgeGraph, UnknownIdError, read_synth_kgqa
from kgqa_nb.loaders import DOWNLOADS, Download, fetch, load_hetionet, load_kg, load_wikikg2, read_hetionet_json, read_hetionet_tsv, read_ogb_mapping, read_ogb_split, read_ogbl_wikikg2, write_ogb_layout
from kgqa_nb.dataset import (GTSQA_COLUMNS, empty_record, iter_gtsqa, load_gtsqa, load_kgqagen, load_mintaka, read_kgqagen, read_mintaka,
                             record_answers)
from kgqa_nb.qgraphs import question_graph_from_record


# ------------------------------------------------------------------ the synth-kgqa numpy layout (GTSQA's KG)

QIDS = ['Q7259', 'Q5679', 'Q84', 'Q145', 'Q42']
PIDS = ['P22', 'P19', 'P17']
TRIPLES = [[0, 0, 1], [0, 1, 2], [2, 2, 3], [1, 1, 2], [4, 1, 2]]


def write_synth_layout(folder: Path):
    "The layout exactly as SynthKGQA's preprocessing writes it: (2, E) edges, object arrays taken from pandas columns."
    folder.mkdir(parents=True, exist_ok=True)
    tr = np.array(TRIPLES)
    ents = pd.DataFrame({'entity': QIDS, 'title': ['Ada Lovelace', 'Lord Byron', 'London', 'United Kingdom', 'Douglas Adams'],
                         'desc': ['mathematician', 'poet', 'capital of England', 'country', 'writer']})
    rels = pd.DataFrame({'relation': PIDS, 'title': ['father', 'place of birth', 'country']})
    np.save(folder / 'edge_ids.npy', np.stack([tr[:, 0], tr[:, 2]], axis=1).T)
    np.save(folder / 'relation_types.npy', tr[:, 1])
    for name, values in (('node_labels', ents['title'].values), ('node_ids', ents['entity'].values), ('node_descriptions', ents['desc'].values),
                         ('relation_labels', rels['title'].values), ('relation_ids', rels['relation'].values)):
        np.save(folder / f'{name}.npy', values)  # object arrays: saved with pickle, as numpy does for pandas' text columns
    return folder


def test_synth_layout_reads_as_published(tmp_path):
    g = read_synth_kgqa(write_synth_layout(tmp_path / 'ogbl_wikikg2'))
    assert g.triples.tolist() == TRIPLES and g.entity_ids == QIDS and g.relation_ids == PIDS
    assert g.triple_text(0) == ('Ada Lovelace (Q7259)', 'father (P22)', 'Lord Byron (Q5679)')
    assert g.entity_descriptions[2] == 'capital of England' and g.relation_descriptions is None
    back = read_synth_kgqa(g.to_synth_kgqa(tmp_path / 'again'))
    assert (back.triples.tolist(), back.entity_labels, back.relation_labels) == (g.triples.tolist(), g.entity_labels, g.relation_labels)


@pytest.mark.parametrize('file', ['edge_ids.npy', 'relation_types.npy', 'node_labels.npy', 'node_ids.npy', 'relation_ids.npy'])
def test_synth_layout_truncated_file_is_named(tmp_path, file):
    folder = write_synth_layout(tmp_path / 'kg')
    p = folder / file; p.write_bytes(p.read_bytes()[:-5])
    with pytest.raises(MalformedFileError, match=f'{file}: not a complete .npy array'): read_synth_kgqa(folder)


@pytest.mark.parametrize('file, arr, match', [
    ('edge_ids.npy', np.array([0, 1, 2]), r'expected a \(2, E\) integer array'),
    ('edge_ids.npy', np.array([[0, 0, 2, 1, 4], [1, 2, 3, 2, 5]]), r'entity index 5 at position \[1, 4\] is outside the 5 entity rows'),
    ('edge_ids.npy', np.array([[0, 0, 2, 1, -1], [1, 2, 3, 2, 2]]), r'entity index -1 at position \[0, 4\]'),
    ('relation_types.npy', np.array([0, 1, 2, 1, 3]), r'relation index 3 at position \[4\] is outside the 3 relation rows'),
    ('relation_types.npy', np.array([0.0, 1, 2, 1, 1]), r'expected \(5,\) integers'),
    ('node_labels.npy', np.array(['a', 'b', None, 'd', 'e'], dtype=object), r'node labels \[2\] is None, not text'),
    ('node_labels.npy', pd.Series(['a', 'b', float('nan'), 'd', 'e']).values, r'node labels \[2\] is nan, not text'),
    ('node_descriptions.npy', np.array(['a', 'b'], dtype=object), r'2 node descriptions, expected 5'),
    ('node_ids.npy', np.array(['Q7259', 'Q5679', 'Q84', 'Q7259', 'Q42'], dtype=object), r"node id \[3\] 'Q7259' is listed twice \(first at \[0\]\)"),
    ('node_ids.npy', np.array(['Q7259', 'Q5679', '', 'Q145', 'Q42'], dtype=object), r'empty node id'),
    ('relation_ids.npy', np.array(['P22', 'P<19>', 'P17'], dtype=object), r"relation id \[1\] 'P<19>' contains '<'"),
    ('relation_labels.npy', np.array([['father', 'x']], dtype=object), r'expected a 1-D array'),
])
def test_synth_layout_damage_is_named(tmp_path, file, arr, match):
    folder = write_synth_layout(tmp_path / 'kg')
    np.save(folder / file, arr, allow_pickle=True)
    with pytest.raises(MalformedFileError, match=f'{file}: .*{match}' if not match.startswith('empty') else match): read_synth_kgqa(folder)


class Boom:
    "Unpickling this runs code (creates a file): what a hostile .npy could hold."
    def __init__(self, path): self.path = str(path)
    def __reduce__(self): return (open, (self.path, 'w'))


def test_numeric_files_are_never_unpickled(tmp_path):
    folder = write_synth_layout(tmp_path / 'kg')
    trap = tmp_path / 'pwned'
    np.save(folder / 'relation_types.npy', np.array([Boom(trap)] * 5, dtype=object), allow_pickle=True)
    with pytest.raises(MalformedFileError, match='relation_types.npy: holds Python objects where numbers belong'): read_synth_kgqa(folder)
    assert not trap.exists()


def test_synth_layout_needs_its_two_arrays(tmp_path):
    folder = write_synth_layout(tmp_path / 'kg'); (folder / 'relation_types.npy').unlink()
    with pytest.raises(FileNotFoundError, match='no relation_types.npy'): read_synth_kgqa(folder)


# ------------------------------------------------------------------ ogbl-wikikg2 in OGB's layout

SPLITS = {'train': [[0, 0, 1], [0, 1, 2], [2, 2, 3]], 'valid': [[1, 1, 2]], 'test': [[4, 1, 2]]}


def ogb(tmp_path, **kw):
    return write_ogb_layout(tmp_path / 'ogbl_wikikg2', QIDS, PIDS, SPLITS, **kw)


def text_mapping(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'entity.csv').write_text('idx,entity,title,desc\n0,Q84,London,capital of England\n1,Q42,Douglas Adams,\n'
                                       '2,Q7259,Ada Lovelace,English mathematician\n3,Q5679,Lord Byron,English poet\n4,Q145,United Kingdom,country\n')
    (folder / 'relation.csv').write_text('idx,relation,title,desc\n0,P22,father,male parent\n1,P19,place of birth,\n2,P17,,\n')
    return folder


@pytest.mark.parametrize('numpy1_names', [True, False])
def test_ogb_split_layout(tmp_path, numpy1_names):
    g = read_ogbl_wikikg2(ogb(tmp_path, numpy1_names=numpy1_names))
    assert g.triples.tolist() == TRIPLES and g.entity_ids == QIDS and g.relation_ids == PIDS and g.name == 'wikikg2-ogb'
    assert g.entity_labels == QIDS  # OGB publishes no labels
    only_train = read_ogbl_wikikg2(tmp_path / 'ogbl_wikikg2', splits=('train',))
    assert only_train.triples.tolist() == SPLITS['train']


def test_ogb_split_file_is_what_ogb_reads(tmp_path):
    "The split dicts hold numpy arrays under OGB's keys; valid/test may carry the negatives, which are ignored."
    import torch
    folder = ogb(tmp_path)
    torch.save({'head': np.array([1]), 'relation': np.array([1]), 'tail': np.array([2]),
                'head_neg': np.zeros((1, 500), np.int64), 'tail_neg': np.zeros((1, 500), np.int64)}, folder / 'split' / 'time' / 'valid.pt')
    assert read_ogb_split(folder / 'split' / 'time' / 'valid.pt').tolist() == [[1, 1, 2]]
    assert read_ogbl_wikikg2(folder).num_triples == 5


def test_ogb_raw_layout(tmp_path):
    folder = tmp_path / 'ogbl_wikikg2'
    write_ogb_layout(folder, QIDS, PIDS, {})
    (folder / 'split' / 'time').rmdir(); (folder / 'split').rmdir(); (folder / 'raw').mkdir()
    tr = np.array(SPLITS['train'])
    with gzip.open(folder / 'raw' / 'edge.csv.gz', 'wt') as f: f.write(''.join(f'{h},{t}\n' for h, _, t in tr))
    with gzip.open(folder / 'raw' / 'edge_reltype.csv.gz', 'wt') as f: f.write(''.join(f'{r}\n' for _, r, _ in tr))
    assert read_ogbl_wikikg2(folder).triples.tolist() == SPLITS['train']
    with gzip.open(folder / 'raw' / 'edge.csv.gz', 'wt') as f: f.write('0,1\n0,2\n2;3\n')
    with pytest.raises(MalformedFileError, match=r"edge.csv.gz:3: expected 2 comma-separated non-negative integers, got '2;3'"): read_ogbl_wikikg2(folder)
    with gzip.open(folder / 'raw' / 'edge.csv.gz', 'wt') as f: f.write('0,1\n0,2\n')
    with pytest.raises(MalformedFileError, match='edge_reltype.csv.gz: 3 relations for 2 edges'): read_ogbl_wikikg2(folder)


@pytest.mark.parametrize('content, match', [
    ('node idx,entity\n0,Q7259\n', r":1: the first line must be the header 'node idx,entity id'"),
    ('node idx,entity id\n0,Q7259\n2,Q5679\n', r":3: index '2' out of order: this row must hold index 1"),
    ('node idx,entity id\n0,Q7259\n1\n', r':3: expected "index,ID"'),
    ('node idx,entity id\n0,Q7259\n1,Q7259\n', r":3: entity id 'Q7259' is listed twice \(first at line 2\)"),
    ('node idx,entity id\n0,Q7259\n1,Q 42\n', r":3: entity id 'Q 42' contains whitespace"),
])
def test_ogb_mapping_strict(tmp_path, content, match):
    p = tmp_path / 'nodeidx2entityid.csv.gz'
    with gzip.open(p, 'wt') as f: f.write(content)
    with pytest.raises(MalformedFileError, match='nodeidx2entityid.csv.gz' + match): read_ogb_mapping(p, ('node idx', 'entity id'))


def test_ogb_truncated_files(tmp_path):
    folder = ogb(tmp_path)
    m = folder / 'mapping' / 'nodeidx2entityid.csv.gz'; keep = m.read_bytes()
    m.write_bytes(keep[:-6])
    with pytest.raises(MalformedFileError, match='nodeidx2entityid.csv.gz: damaged or truncated gz file'): read_ogbl_wikikg2(folder)
    m.write_bytes(keep)
    p = folder / 'split' / 'time' / 'train.pt'; p.write_bytes(p.read_bytes()[:300])
    with pytest.raises(MalformedFileError, match='train.pt: not a readable torch.save file'): read_ogbl_wikikg2(folder)


def test_ogb_split_contents_checked(tmp_path):
    import torch
    folder = ogb(tmp_path); p = folder / 'split' / 'time' / 'test.pt'
    torch.save({'head': np.array([4]), 'tail': np.array([2])}, p)
    with pytest.raises(MalformedFileError, match='test.pt: expected a dict with head, relation and tail arrays'): read_ogbl_wikikg2(folder)
    torch.save({'head': np.array([4, 1]), 'relation': np.array([1]), 'tail': np.array([2])}, p)
    with pytest.raises(MalformedFileError, match='test.pt: head, relation and tail must be 1-D integer arrays of one length'): read_ogbl_wikikg2(folder)
    torch.save({'head': np.array([5]), 'relation': np.array([1]), 'tail': np.array([2])}, p)
    with pytest.raises(MalformedFileError, match=r'test.pt: entity index 5 at position \[0, 0\] is outside the 5 entity rows'): read_ogbl_wikikg2(folder)


def test_ogb_split_file_cannot_run_code(tmp_path):
    "A .pt whose pickle would run code is refused by torch's weights-only loader, and the code never runs."
    import torch
    folder = ogb(tmp_path); trap = tmp_path / 'pwned'
    torch.save({'head': Boom(trap), 'relation': np.array([1]), 'tail': np.array([2])}, folder / 'split' / 'time' / 'test.pt')
    with pytest.raises(MalformedFileError, match='test.pt: not a readable torch.save file'): read_ogbl_wikikg2(folder)
    assert not trap.exists()


def test_gtsqa_filter_from_wikikg90m_text(tmp_path):
    g = read_ogbl_wikikg2(ogb(tmp_path), text=text_mapping(tmp_path / 'wikikg90mv2_mapping'))
    assert g.name == 'wikikg2' and g.entity_ids == ['Q7259', 'Q5679', 'Q84', 'Q145'] and g.relation_ids == ['P22', 'P19']
    assert g.triples.tolist() == [[0, 0, 1], [0, 1, 2], [1, 1, 2]]  # P17's triple and Douglas Adams's are dropped
    assert g.entity_descriptions[0] == 'English mathematician'
    (tmp_path / 'wikikg90mv2_mapping' / 'entity.csv').write_text('idx,entity,title\n0,Q84,London\n')
    with pytest.raises(MalformedFileError, match='entity.csv:1: the header must name entity, title and desc'): read_ogbl_wikikg2(tmp_path / 'ogbl_wikikg2', text=tmp_path / 'wikikg90mv2_mapping')
    (tmp_path / 'wikikg90mv2_mapping' / 'entity.csv').write_text('idx,entity,title,desc\n0,Q84,London,city\n1,Q42,Douglas Adams,writer,extra\n')
    with pytest.raises(MalformedFileError, match='entity.csv:3: not a CSV row'): read_ogbl_wikikg2(tmp_path / 'ogbl_wikikg2', text=tmp_path / 'wikikg90mv2_mapping')


def test_load_wikikg2_prefers_the_synth_layout(tmp_path):
    ogb(tmp_path)
    assert load_wikikg2(root=tmp_path).name == 'wikikg2-ogb'
    text_mapping(tmp_path / 'wikikg90mv2_mapping')
    assert load_kg('wikikg2', root=tmp_path).num_entities == 4
    write_synth_layout(tmp_path / 'ogbl_wikikg2')
    g = load_kg('wikikg2', root=tmp_path)
    assert (g.name, g.num_entities) == ('wikikg2', 5)
    assert load_wikikg2(root=tmp_path, layout='ogb').num_entities == 4
    with pytest.raises(FileNotFoundError, match=r'run kgqa_nb.loaders.fetch\("ogbl-wikikg2"\)'): load_wikikg2(root=tmp_path / 'empty')


def test_registry_names_its_data_folders():
    assert K.KGS['wikikg2'].folder == 'ogbl_wikikg2' and K.KGS['hetionet'].folder == 'hetionet' and K.KGS['toyworld'].folder is None
    assert K.KGS['wikikg2'].downloads == ('ogbl-wikikg2',)
    with pytest.raises(K.UnknownIdError, match='unknown KG'): K.load_kg('not-registered')


@pytest.mark.data('ogbl-wikikg')
def test_real_wikikg2_relation_table():
    pids = read_ogb_mapping(data_dir('ogbl-wikikg') / 'mapping' / 'reltype2relid.csv.gz', ('reltype', 'rel id'))
    assert len(pids) == 535 and len(set(pids)) == 535 and all(p.startswith('P') for p in pids)


# ------------------------------------------------------------------ Hetionet

HET = {'metanode_kinds': ['Biological Process', 'Compound', 'Disease', 'Gene'],
       'metaedge_tuples': [['Compound', 'Disease', 'treats', 'both'], ['Gene', 'Gene', 'regulates', 'forward'],
                           ['Gene', 'Biological Process', 'participates', 'both']],
       'kind_to_abbrev': {'Biological Process': 'BP', 'Compound': 'C', 'Disease': 'D', 'Gene': 'G', 'treats': 't', 'regulates': 'r', 'participates': 'p'},
       'nodes': [{'kind': 'Compound', 'identifier': 'DB00997', 'name': 'Doxorubicin', 'data': {'source': 'DrugBank'}},
                 {'kind': 'Disease', 'identifier': 'DOID:1612', 'name': 'breast cancer', 'data': {}},
                 {'kind': 'Gene', 'identifier': 7157, 'name': 'TP53', 'data': {}},
                 {'kind': 'Gene', 'identifier': 1026, 'name': 'CDKN1A', 'data': {}},
                 {'kind': 'Biological Process', 'identifier': 'GO:0006915', 'name': 'apoptotic process', 'data': {}}],
       'edges': [{'source_id': ['Compound', 'DB00997'], 'target_id': ['Disease', 'DOID:1612'], 'kind': 'treats', 'direction': 'both', 'data': {}},
                 {'source_id': ['Gene', 7157], 'target_id': ['Gene', 1026], 'kind': 'regulates', 'direction': 'forward', 'data': {}},
                 {'source_id': ['Gene', 7157], 'target_id': ['Biological Process', 'GO:0006915'], 'kind': 'participates', 'direction': 'both', 'data': {}}]}
NODES_TSV = ('id\tname\tkind\nCompound::DB00997\tDoxorubicin\tCompound\nDisease::DOID:1612\tbreast cancer\tDisease\nGene::7157\tTP53\tGene\n'
             'Gene::1026\tCDKN1A\tGene\nBiological Process::GO:0006915\tapoptotic process\tBiological Process\n')
EDGES_SIF = ('source\tmetaedge\ttarget\nCompound::DB00997\tCtD\tDisease::DOID:1612\nGene::7157\tGr>G\tGene::1026\n'
             'Gene::7157\tGpBP\tBiological Process::GO:0006915\n')


def hetionet_folder(tmp_path, json_too=True, tsv=True):
    base = tmp_path / 'hetionet'; base.mkdir(parents=True, exist_ok=True)
    if json_too: (base / 'hetionet-v1.0.json.bz2').write_bytes(bz2.compress(json.dumps(HET).encode()))
    if tsv:
        (base / 'hetionet-v1.0-nodes.tsv').write_text(NODES_TSV)
        with gzip.open(base / 'hetionet-v1.0-edges.sif.gz', 'wt') as f: f.write(EDGES_SIF)
        (base / 'hetionet-v1.0-metagraph.json').write_text(json.dumps({k: HET[k] for k in ('metanode_kinds', 'metaedge_tuples', 'kind_to_abbrev')}))
    return base


def test_hetionet_json_and_tsv_give_one_graph(tmp_path):
    base = hetionet_folder(tmp_path)
    hj = read_hetionet_json(base / 'hetionet-v1.0.json.bz2')
    ht = read_hetionet_tsv(base / 'hetionet-v1.0-nodes.tsv', base / 'hetionet-v1.0-edges.sif.gz', base / 'hetionet-v1.0-metagraph.json')
    for g in (hj, ht):
        assert g.entity_ids == ['Compound::DB00997', 'Disease::DOID:1612', 'Gene::7157', 'Gene::1026', 'Biological_Process::GO:0006915']
        assert g.relation_ids == ['CtD', 'Gr_G', 'GpBP'] and g.relation_labels == ['treats', 'regulates', 'participates']
        assert g.triples.tolist() == [[0, 0, 1], [2, 1, 3], [2, 2, 4]]
        assert g.entity_labels[2] == 'TP53' and g.entity_descriptions[4] == 'Biological Process'
    assert hj.relation_descriptions == ht.relation_descriptions == ['Compound treats Disease', 'Gene regulates Gene (forward)',
                                                                    'Gene participates Biological Process']
    bare = read_hetionet_tsv(base / 'hetionet-v1.0-nodes.tsv', base / 'hetionet-v1.0-edges.sif.gz')
    assert bare.relation_labels == ['CtD', 'Gr>G', 'GpBP'] and bare.triples.tolist() == hj.triples.tolist()
    assert load_kg('hetionet', root=tmp_path).name == 'hetionet'
    (base / 'hetionet-v1.0.json.bz2').unlink()
    assert load_hetionet(root=tmp_path).relation_labels == ['treats', 'regulates', 'participates']  # the TSV layout, with the metagraph
    with pytest.raises(FileNotFoundError, match='Hetionet not found'): load_hetionet(root=tmp_path / 'none')


def _json_with(tmp_path, **change):
    p = tmp_path / 'het.json'; p.write_text(json.dumps({**HET, **change})); return p


@pytest.mark.parametrize('change, match', [
    (dict(nodes=HET['nodes'] + [HET['nodes'][2]]), r"nodes\[5\]: node \['Gene', 7157\] is listed twice \(first as nodes\[2\]\)"),
    (dict(nodes=HET['nodes'] + [{'kind': 'Gene', 'name': 'x'}]), r'nodes\[5\]: expected \{"kind": text, "identifier"'),
    (dict(edges=HET['edges'] + [{**HET['edges'][0], 'target_id': ['Disease', 'DOID:0']}]), r'edges\[3\].target_id \["Disease", "DOID:0"\] is not a node'),
    (dict(edges=HET['edges'] + [{**HET['edges'][0], 'direction': 'sideways'}]), r'edges\[3\]: expected'),
    (dict(edges=HET['edges'] + [{**HET['edges'][0], 'kind': 'cures'}]), r"edges\[3\]: kind_to_abbrev has no abbreviation for \['cures'\]"),
    (dict(kind_to_abbrev=None), 'no "kind_to_abbrev" object'),

])
def test_hetionet_json_damage_is_named(tmp_path, change, match):
    with pytest.raises(MalformedFileError, match='het.json: ' + match): read_hetionet_json(_json_with(tmp_path, **change))


def test_hetionet_abbreviations_from_the_metagraph_file(tmp_path):
    "A JSON without kind_to_abbrev takes the abbreviations from hetionet-v1.0-metagraph.json beside it."
    base = hetionet_folder(tmp_path)
    (base / 'hetionet-v1.0.json.bz2').write_bytes(bz2.compress(json.dumps({**HET, 'kind_to_abbrev': None}).encode()))
    assert load_hetionet(root=tmp_path).relation_ids == ['CtD', 'Gr_G', 'GpBP']
    (base / 'hetionet-v1.0-metagraph.json').unlink()
    with pytest.raises(MalformedFileError, match='no "kind_to_abbrev" object'): load_hetionet(root=tmp_path)


def test_hetionet_truncated_archive(tmp_path):
    base = hetionet_folder(tmp_path, tsv=False); p = base / 'hetionet-v1.0.json.bz2'
    p.write_bytes(p.read_bytes()[:-20])
    with pytest.raises(MalformedFileError, match='hetionet-v1.0.json.bz2: damaged or truncated bz2 file'): load_hetionet(root=tmp_path)
    p.write_bytes(bz2.compress(json.dumps(HET).encode()[:-30]))
    with pytest.raises(MalformedFileError, match=r'hetionet-v1.0.json.bz2:1: not valid JSON'): load_hetionet(root=tmp_path)


@pytest.mark.parametrize('nodes, edges, match', [
    ('id\tkind\tname\n', EDGES_SIF, r"nodes.tsv:1: the first line must be the header 'id<TAB>name<TAB>kind'"),
    (NODES_TSV + 'Gene::7157\tTP53\tGene\n', EDGES_SIF, r"nodes.tsv:7: node 'Gene::7157' is listed twice \(first on line 4\)"),
    (NODES_TSV + 'Gene::1\tA1BG\n', EDGES_SIF, r'nodes.tsv:7: 2 tab-separated fields, expected 3 \(id, name, kind\)'),
    (NODES_TSV + '1\tA1BG\tGene\n', EDGES_SIF, r"nodes.tsv:7: node id '1' does not start with its kind 'Gene'"),
    (NODES_TSV, 'source\tmetaedge\ttarget\nGene::7157\tGr>G\tGene::1\n', r"edges.sif:2: 'Gene::1' is not a node of nodes.tsv"),
    (NODES_TSV, EDGES_SIF + 'Gene::7157\tGxG\tGene::1026\n', r"edges.sif:5: unknown metaedge 'GxG'"),
    (NODES_TSV, EDGES_SIF.replace('source\tmetaedge\ttarget\n', ''), r"edges.sif:1: the first line must be the header 'source<TAB>metaedge<TAB>target'"),
])
def test_hetionet_tsv_damage_is_named(tmp_path, nodes, edges, match):
    (tmp_path / 'nodes.tsv').write_text(nodes); (tmp_path / 'edges.sif').write_text(edges)
    (tmp_path / 'meta.json').write_text(json.dumps({k: HET[k] for k in ('metanode_kinds', 'metaedge_tuples', 'kind_to_abbrev')}))
    with pytest.raises(MalformedFileError, match=match): read_hetionet_tsv(tmp_path / 'nodes.tsv', tmp_path / 'edges.sif', tmp_path / 'meta.json')


# ------------------------------------------------------------------ downloads (file:// URLs: no network)

@pytest.fixture
def downloads():
    "A scratch entry in DOWNLOADS, removed afterwards."
    added = []
    def add(name, d): DOWNLOADS[name] = d; added.append(name)
    yield add
    for n in added: DOWNLOADS.pop(n, None)


def test_fetch_states_the_size_before_downloading_and_prints_the_digest(tmp_path, downloads):
    src = tmp_path / 'src.jsonl'; src.write_bytes(b'{"id": 1}\n' * 300)
    dest = tmp_path / 'data' / 'x' / 'src.jsonl'
    downloads('x', Download(src.as_uri(), 'x/src.jsonl'))
    seen = []
    fetch('x', root=tmp_path / 'data', echo=lambda m: seen.append((m, dest.exists())))
    assert seen[0] == (f'x: downloading {src.as_uri()} (3 kB) to {dest}', False)  # stated before the file exists
    assert seen[1][0].split()[1:3] == ['sha256', hashlib.sha256(src.read_bytes()).hexdigest()]
    seen.clear(); fetch('x', root=tmp_path / 'data', echo=seen.append)
    assert seen == []  # already there: nothing downloaded, nothing said


def test_fetch_verifies_a_pinned_digest(tmp_path, downloads):
    src = tmp_path / 'src.txt'; src.write_text('published\n')
    downloads('good', Download(src.as_uri(), 'good.txt', size=10, sha256=hashlib.sha256(b'published\n').hexdigest()))
    said = []
    assert fetch('good', root=tmp_path / 'data', echo=said.append).read_text() == 'published\n'
    assert said == [f'good: downloading {src.as_uri()} (10 B) to {tmp_path / "data" / "good.txt"}']  # pinned: no digest line
    downloads('bad', Download(src.as_uri(), 'bad.txt', sha256='0' * 64))
    with pytest.raises(ValueError, match='checksum mismatch'): fetch('bad', root=tmp_path / 'data', echo=said.append)
    assert not (tmp_path / 'data' / 'bad.txt').exists() and not list((tmp_path / 'data').glob('bad*'))
    with pytest.raises(UnknownIdError, match="unknown download 'nope'"): fetch('nope', root=tmp_path)


def test_fetch_unpacks_an_archive_as_ogb_does(tmp_path, downloads):
    "wikikg-v2.zip holds wikikg-v2/, which becomes ogbl_wikikg2/ (OGB's folder name); then load_wikikg2 reads it."
    made = write_ogb_layout(tmp_path / 'build' / 'wikikg-v2', QIDS, PIDS, SPLITS)
    archive = tmp_path / 'wikikg-v2.zip'
    with zipfile.ZipFile(archive, 'w') as z:
        for f in made.rglob('*'): z.write(f, f.relative_to(tmp_path / 'build'))
    downloads('wk', Download(archive.as_uri(), 'wikikg-v2.zip', unpack=('wikikg-v2', 'ogbl_wikikg2')))
    out = fetch('wk', root=tmp_path / 'data', echo=lambda m: None)
    assert out == tmp_path / 'data' / 'ogbl_wikikg2' and load_wikikg2(root=tmp_path / 'data').num_triples == 5
    (tmp_path / 'data2').mkdir(); (tmp_path / 'data2' / 'wikikg-v2.zip').write_bytes(archive.read_bytes()[:100])
    with pytest.raises(MalformedFileError, match='wikikg-v2.zip: not a complete zip archive'): fetch('wk', root=tmp_path / 'data2')


def test_download_table_never_carries_an_invented_digest():
    for name, d in DOWNLOADS.items():
        assert d.sha256 is None or (len(d.sha256) == 64 and set(d.sha256) <= set('0123456789abcdef')), name
        assert d.url.startswith('https://'), name
    assert {'ogbl-wikikg2', 'gtsqa-test', 'gtsqa-with-graphs-test', 'gtsqa-with-graphs-train-00021', 'mintaka-test', 'kgqagen-10k',
            'hetionet-json', 'hetionet-nodes', 'hetionet-edges'} <= set(DOWNLOADS)


# ------------------------------------------------------------------ GTSQA parquet, both configurations

def gtsqa_rows(ids, graph: bool):
    rows = []
    for i in ids:
        r = empty_record(id=i, question=f'Who directed film {i}?', paraphrased_question=None if i % 2 else f'Film {i} was directed by whom?',
                         seed_entities=['Alien (Q103569)'], answer_node='Ridley Scott (Q56005)',
                         answer_subgraph=[['Alien (Q103569)', 'director (P57)', 'Ridley Scott (Q56005)']],
                         sparql_query='SELECT ?a WHERE { wd:Q103569 wdt:P57 ?a }', all_answers_wikidata=['Q56005'], all_answers_wikikg2=['Q56005'],
                         full_answer_subgraph_wikidata=[['Q103569', 'P57', 'Q56005']], full_answer_subgraph_wikikg2=[['Q103569', 'P57', 'Q56005']],
                         n_hops=1, graph_isomorphism='(1)', redundant=False, minimal_graph_isomorphism='(1)',
                         minimal_seeds_and_queries=str({'Q103569': 'SELECT ?a WHERE { wd:Q103569 wdt:P57 ?a }'}), test_type=['training'])
        if graph: r['graph'] = [['Alien (Q103569)', 'director (P57)', 'Ridley Scott (Q56005)'], ['Alien (Q103569)', 'cast member (P161)', 'Sigourney Weaver (Q102642)']]
        rows.append(r)
    return pd.DataFrame(rows)


def write_gtsqa(root: Path, config: str, split: str, n_per_file: int = 2):
    from kgqa_nb.dataset import gtsqa_files
    files = gtsqa_files(split, config, root)
    for k, f in enumerate(files):
        f.parent.mkdir(parents=True, exist_ok=True)
        gtsqa_rows(range(k * n_per_file, (k + 1) * n_per_file), config == 'gtsqa-with-graphs').to_parquet(f)
    return files


def test_gtsqa_plain_config(tmp_path):
    write_gtsqa(tmp_path, 'gtsqa', 'train', 3)
    df = load_gtsqa('train', root=tmp_path, allow_download=False)
    assert len(df) == 3 and list(df.columns) == list(GTSQA_COLUMNS) and df.answer_subgraph[0][0][1] == 'director (P57)'
    assert isinstance(df.seed_entities[0], list) and record_answers(df.iloc[0]) == {'Q56005'}


def test_gtsqa_with_graphs_reads_every_shard_in_order(tmp_path):
    files = write_gtsqa(tmp_path, 'gtsqa-with-graphs', 'train')
    assert len(files) == 22 and files[0].name == 'train-00000-of-00022.parquet' and files[-1].name == 'train-00021-of-00022.parquet'
    ids = [r['id'] for r in iter_gtsqa('train', 'gtsqa-with-graphs', allow_download=False, root=tmp_path)]
    assert ids == list(range(44))
    files[7].unlink()
    with pytest.raises(FileNotFoundError, match=r"GTSQA train \(gtsqa-with-graphs\): 1 of 22 published file\(s\) missing, e.g. .*train-00007-of-00022.parquet; run kgqa_nb.loaders.fetch\('gtsqa-with-graphs-train-00007'\)"):
        load_gtsqa('train', config='gtsqa-with-graphs', root=tmp_path, allow_download=False)


@pytest.mark.parametrize('col, value, match', [
    ('id', 'seven', r'id must be an integer'),
    ('seed_entities', ['Alien'], r"seed_entities must be a list of 'Label \(ID\)'"),
    ('answer_node', 'Ridley Scott', r"answer_node must be 'Label \(ID\)'"),
    ('answer_subgraph', [['Alien (Q103569)', 'director', 'Ridley Scott (Q56005)']], r'answer_subgraph must be a list of'),
    ('n_hops', -1, r'n_hops must be a non-negative integer'),
    ('test_type', [], r'test_type must be a list of categories'),
    ('graph', [['Alien (Q103569)', 'director (P57)']], r'graph must be a list of'),
])
def test_gtsqa_bad_field_is_named_by_row_and_id(tmp_path, col, value, match):
    f = write_gtsqa(tmp_path, 'gtsqa-with-graphs', 'test', 3)[0]
    df = gtsqa_rows(range(3), True); df[col] = df[col].astype(object); df.at[2, col] = value
    if col == 'id': df['id'] = ['0', '1', value]  # parquet holds one type per column: the whole column is text
    df.to_parquet(f)
    row, rid = (1, repr('0')) if col == 'id' else (3, 2)
    with pytest.raises(MalformedFileError, match=rf"test-00000-of-00001.parquet: row {row} \(id {rid}\): {match}"):
        load_gtsqa('test', config='gtsqa-with-graphs', root=tmp_path, allow_download=False)


def test_gtsqa_truncated_or_wrong_layout(tmp_path):
    f = write_gtsqa(tmp_path, 'gtsqa', 'test')[0]
    keep = f.read_bytes(); f.write_bytes(keep[: len(keep) // 2])
    with pytest.raises(MalformedFileError, match='test.parquet: not a complete parquet file'): load_gtsqa('test', root=tmp_path, allow_download=False)
    gtsqa_rows(range(2), False).drop(columns=['n_hops']).to_parquet(f)
    with pytest.raises(MalformedFileError, match=r"test.parquet: missing column\(s\) \['n_hops'\]"): load_gtsqa('test', root=tmp_path, allow_download=False)
    with pytest.raises(ValueError, match="unknown GTSQA config 'gtsqa-plus'"): load_gtsqa('test', config='gtsqa-plus', root=tmp_path)


def test_gtsqa_download_goes_through_fetch(tmp_path, monkeypatch, downloads):
    "A missing file is fetched (here from a file:// copy standing in for Hugging Face), then read."
    src = tmp_path / 'hf' / 'test.parquet'; src.parent.mkdir(); gtsqa_rows(range(2), False).to_parquet(src)
    monkeypatch.setitem(DOWNLOADS, 'gtsqa-test', Download(src.as_uri(), 'gtsqa/gtsqa/test.parquet'))
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)
    assert len(load_gtsqa('test', root=tmp_path / 'data')) == 2
    assert (tmp_path / 'data' / 'gtsqa' / 'gtsqa' / 'test.parquet').read_bytes() == src.read_bytes()


def test_with_graphs_record_becomes_the_question_graph():
    g = KnowledgeGraph.from_id_triples([('Q103569', 'P57', 'Q56005'), ('Q103569', 'P161', 'Q102642'), ('Q56005', 'P27', 'Q145')],
                                       {'Q103569': 'Alien', 'Q56005': 'Ridley Scott', 'Q102642': 'Sigourney Weaver', 'Q145': 'United Kingdom'},
                                       {'P57': 'director', 'P161': 'cast member', 'P27': 'country of citizenship'})
    rec = gtsqa_rows([0], True).to_dict('records')[0]
    rec['full_answer_subgraph_wikikg2'] = [['Q999', 'P999', 'Q998']]  # not read: the published graph is the graph
    qg = question_graph_from_record(g, rec, check_labels=True)
    assert (qg.id, len(qg), qg.triple_scores.tolist()) == ('0', 2, [1, 0])
    assert qg.triple_scores_sp.tolist() == [1, 0] and qg.info == dict(source='published', n_triples=2, n_gt=1, n_gt_in_graph=1)
    rec['graph'] = rec['graph'][1:]  # the GT triple is not in the published graph: counted, not added
    assert question_graph_from_record(g, rec).info['n_gt_in_graph'] == 0 and len(question_graph_from_record(g, rec)) == 1
    rec['graph'] = [['Alien (Q103569)', 'producer (P162)', 'Ridley Scott (Q56005)']]
    with pytest.raises(UnknownIdError, match=r"question 0: graph triple 0: unknown relation ID 'P162'"): question_graph_from_record(g, rec)


# ------------------------------------------------------------------ Mintaka

MINTAKA = [
    {'id': 'a9011ddf', 'question': 'What is the seventh tallest mountain in North America?', 'translations': {'de': 'Wie heißt der siebthöchste Berg Nordamerikas?'},
     'questionEntity': [{'name': 'Q49', 'entityType': 'entity', 'label': 'North America', 'mention': 'North America', 'span': [40, 53]},
                        {'name': 7, 'entityType': 'ordinal', 'mention': 'seventh', 'span': [12, 19]}],
     'answer': {'answerType': 'entity', 'answer': [{'name': 'Q1153188', 'label': {'en': 'Mount Lucania', 'de': 'Mount Lucania', 'hi': None}}],
                'mention': 'Mount Lucania'}, 'category': 'geography', 'complexityType': 'ordinal'},
    {'id': '88bdb808', 'question': 'How many games are in the Uncharted series?', 'translations': {},
     'questionEntity': [{'name': 'Q1064135', 'entityType': 'entity', 'label': 'Uncharted', 'mention': 'Uncharted', 'span': [26, 35]}],
     'answer': {'answerType': 'entity', 'answer': [{'name': 'Q17150', 'label': "Uncharted: Drake's Fortune"}, {'name': 'Q17146', 'label': 'Uncharted 2: Among Thieves'}],
                'mention': 'Uncharted: Drake\'s Fortune (2007), Uncharted 2: Among Thieves (2009)', 'answerNum': 2},
     'category': 'videogames', 'complexityType': 'count'},
    {'id': 'e343ad26', 'question': 'Has Lady Gaga ever made a song with Ariana Grande?', 'lang': 'en',
     'questionEntity': [{'name': 'Q19848', 'entityType': 'entity', 'mention': 'Lady Gaga', 'span': [4, 13]},
                        {'name': 'Q151892', 'entityType': 'entity', 'label': 'Ariana Grande', 'mention': 'Ariana Grande', 'span': [36, 49]}],
     'answer': {'answerType': 'boolean', 'answer': [True], 'mention': 'Yes'}, 'category': 'music', 'complexityType': 'yesno'},
    {'id': 'b41ae115', 'question': 'Who won the 2040 Olympic marathon?', 'questionEntity': [],
     'answer': {'answerType': 'entity', 'answer': None, 'mention': ''}, 'category': 'sports', 'complexityType': 'generic'},
]


def test_mintaka_maps_to_the_schema(tmp_path):
    p = tmp_path / 'mintaka_test.json'; p.write_text(json.dumps(MINTAKA, indent=4, ensure_ascii=False))
    df = read_mintaka(p)
    assert df.seed_entities.tolist() == [['North America (Q49)'], ['Uncharted (Q1064135)'], ['Q19848 (Q19848)', 'Ariana Grande (Q151892)'], []]  # label optional
    assert df.answer_node[0] == 'Mount Lucania (Q1153188)' and df.all_answers_wikidata[1] == ['Q17150', 'Q17146']
    assert df.answer_node[1] == "Uncharted: Drake's Fortune (Q17150)"  # the first release writes a label as a plain string
    assert (df.answer_type[2], df.answer_values[2], df.all_answers_wikidata[2]) == ('boolean', [True], ['True'])
    assert df.complexity_type.tolist() == ['ordinal', 'count', 'yesno', 'generic'] and df.lang.tolist() == ['en'] * 4
    assert df.all_answers_wikidata[3] == [] and df.category[0] == 'geography'
    assert record_answers(df.iloc[1]) == {'Q17150', 'Q17146'}
    (tmp_path / 'mintaka').mkdir(); (tmp_path / 'mintaka' / 'mintaka_dev.json').write_text(json.dumps(MINTAKA[:1]))
    assert len(load_mintaka('dev', root=tmp_path, allow_download=False)) == 1
    with pytest.raises(FileNotFoundError, match=r"run kgqa_nb.loaders.fetch\('mintaka-train'\)"): load_mintaka('train', root=tmp_path, allow_download=False)


def _line_of(text: str, needle: str) -> int:
    "Line where the record holding `needle` starts (its opening brace)."
    lines = text.split('\n'); i = next(k for k, l in enumerate(lines) if needle in l)
    return max(k for k in range(i + 1) if lines[k].strip() == '{') + 1


@pytest.mark.parametrize('change, match', [
    (lambda r: r.pop('question'), 'question must be text'),
    (lambda r: r.update(complexityType='tricky'), "complexityType 'tricky' is not one of"),
    (lambda r: r['answer'].update(answerType='person'), "answer.answerType 'person' is not one of"),
    (lambda r: r['answer']['answer'][0].update(name='Mount Lucania'), r"answer.answer\[0\] is not \{\"name\": QID"),
    (lambda r: r['questionEntity'][0].update(name='North America'), r"questionEntity\[0\].name 'North America' is not a QID"),
    (lambda r: r['questionEntity'][1].pop('entityType'), r'questionEntity\[1\] needs entityType and name'),
    (lambda r: r['answer'].update(answer='Q1153188'), r'answer.answer must be a list or null'),
])
def test_mintaka_bad_record_is_named_by_line_and_field(tmp_path, change, match):
    items = json.loads(json.dumps(MINTAKA)); change(items[0]); items = items[1:3] + items[:1]
    text = json.dumps(items, indent=4); p = tmp_path / 'mintaka_train.json'; p.write_text(text)
    with pytest.raises(MalformedFileError, match=rf"mintaka_train.json:{_line_of(text, 'a9011ddf')}: record 'a9011ddf': {match}"): read_mintaka(p)


def test_mintaka_truncated_or_not_an_array(tmp_path):
    p = tmp_path / 'mintaka_train.json'; text = json.dumps(MINTAKA, indent=4)
    p.write_text(text[: len(text) // 2])
    with pytest.raises(MalformedFileError, match='the file ends early'): read_mintaka(p)
    p.write_text(text[:-2])  # only the closing bracket is lost
    with pytest.raises(MalformedFileError, match="expected ',' or ']' after a record; the file ends early"): read_mintaka(p)
    p.write_text(json.dumps({'data': MINTAKA}))
    with pytest.raises(MalformedFileError, match='mintaka_train.json:1: expected a JSON array of records'): read_mintaka(p)
    p.write_text(text + '\n[]')
    with pytest.raises(MalformedFileError, match='text after the closing'): read_mintaka(p)
    p.write_text('[]'); assert len(read_mintaka(p)) == 0


# ------------------------------------------------------------------ KGQAGen-10k

KGQAGEN = [
    {'id': 1, 'seed': 'Q219457', 'question': "Which work that follows 'The Adventures of Captain Hatteras' is part of the 'Voyages Extraordinaires' series?",
     'answer': ['A Journey to the Center of the Earth'],
     'sparql': 'SELECT ?workLabel WHERE { wd:Q319149 wdt:P156 ?work . ?work wdt:P179 wd:Q3048935 . SERVICE wikibase:label { bd:serviceParam wikibase:language "en" . } }',
     'proof': [['The Adventures of Captain Hatteras (Q319149)', 'followed by (P156)', 'A Journey to the Center of the Earth (Q219457)'],
               ['A Journey to the Center of the Earth (Q219457)', 'part of the series (P179)', 'Voyages Extraordinaires (Q3048935)']]},
    {'id': 14, 'seed': 'Q259037', 'question': "What subclass of amusement park has the Library of Congress authority ID 'sh85020382'?",
     'answer': ['traveling carnival'], 'sparql': 'SELECT ?itemLabel WHERE { ?item wdt:P279 wd:Q194195 ; wdt:P244 "sh85020382" . }',
     'proof': [['traveling carnival (Q259037)', 'subclass of (P279)', 'amusement park (Q194195)'],
               ['traveling carnival (Q259037)', 'Library of Congress authority ID (P244)', 'sh85020382']]},
    {'id': 21, 'seed': 'Q5', 'question': 'Which two people were both born in Pisa?', 'answer': ['Galileo Galilei', 'Somebody Else'],
     'sparql': 'SELECT ?pLabel WHERE { ?p wdt:P19 wd:Q13373 . }', 'proof': [['Galileo Galilei (Q307)', 'place of birth (P19)', 'Pisa (Q13373)']]},
]


def test_kgqagen_maps_to_the_schema(tmp_path):
    p = tmp_path / 'data.jsonl'; p.write_text(''.join(json.dumps(o) + '\n' for o in KGQAGEN) + '\n')  # a blank last line is fine
    df = read_kgqagen(p)
    assert df.id.tolist() == [1, 14, 21]
    assert df.seed_entities[0] == ['The Adventures of Captain Hatteras (Q319149)', 'Voyages Extraordinaires (Q3048935)']  # the query's constants
    assert df.seed[0] == 'A Journey to the Center of the Earth (Q219457)'  # the published seed, kept aside
    assert (df.answer_node[0], df.all_answers_wikidata[0]) == ('A Journey to the Center of the Earth (Q219457)', ['Q219457'])
    assert len(df.answer_subgraph[1]) == 1 and len(df.proof[1]) == 2 and df.proof[1][1][2] == 'sh85020382'
    assert df.sparql_query[1].startswith('SELECT ?itemLabel') and df.answer_labels[2] == ['Galileo Galilei', 'Somebody Else']
    assert df.all_answers_wikidata[2] is None or pd.isna(df.all_answers_wikidata[2])  # one answer has no QID in the proof
    assert df.answer_node[2] == 'Galileo Galilei (Q307)'
    (tmp_path / 'kgqagen').mkdir(); (tmp_path / 'kgqagen' / 'data.jsonl').write_text(p.read_text())
    assert len(load_kgqagen(root=tmp_path, allow_download=False)) == 3


def test_kgqagen_refuses_a_torn_last_line(tmp_path):
    "core.read_jsonl drops a torn last line (a log still being written); a published file with one is damaged."
    p = tmp_path / 'data.jsonl'; text = ''.join(json.dumps(o) + '\n' for o in KGQAGEN)
    p.write_text(text[:-40])
    with pytest.raises(MalformedFileError, match='data.jsonl:3: not a JSON object'): read_kgqagen(p)
    p.write_text('')
    with pytest.raises(MalformedFileError, match='no records in the file'): read_kgqagen(p)


@pytest.mark.parametrize('change, match', [
    (dict(seed='Voyages'), "seed must be a QID"), (dict(answer='A Journey'), 'answer must be a non-empty list of labels'),
    (dict(id='1'), 'id must be an integer'), (dict(sparql=''), 'sparql must be a query'),
    (dict(proof=[['a', 'b']]), r'proof must be a list of \[head, relation, tail\] texts'),
])
def test_kgqagen_bad_field_is_named(tmp_path, change, match):
    p = tmp_path / 'data.jsonl'; p.write_text(json.dumps(KGQAGEN[1]) + '\n' + json.dumps({**KGQAGEN[0], **change}) + '\n')
    with pytest.raises(MalformedFileError, match=rf"data.jsonl:2: record {change.get('id', 1)!r}: {match}"): read_kgqagen(p)
