"""The command line as a new user meets it (issue 26), each case in a subprocess as `kgqa` runs it: what failed before now
gives the right result or one clean line (`kgqa <command>: message`, exit code 2, no traceback). Small inputs: a toy-world
`kgqa generate` run of 20 questions and a `kgqa kgqagen` run of 5, made once per module."""
import json, os, re, signal, subprocess, sys, textwrap, time
from pathlib import Path

import pytest

from kgqa_nb.core import project_dirs
from kgqa_nb.profiles import LLM_ENV

ROOT = project_dirs.root


def env_for(tmp: Path, **extra) -> dict:
    "The environment of a new user: no LLM credentials, no debug switch, the user cache in `tmp`."
    e = {k: v for k, v in os.environ.items() if k not in LLM_ENV and k not in ('KGQA_DEBUG', 'KGQA_LLM_MODEL')}
    return {**e, 'KGQA_PROGRESS': '0', 'KGQA_CACHE': str(tmp / 'cache'), 'OMP_NUM_THREADS': '1', **extra}


def kgqa(tmp: Path, *args, timeout=600, **extra):
    "Run `kgqa ARGS` as a subprocess from the repository root."
    return subprocess.run([sys.executable, '-m', 'kgqa_nb.cli', *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env=env_for(tmp, **extra), timeout=timeout)


def one_line(res, command: str, *fragments) -> str:
    "Exit code 2, nothing on stdout, one `kgqa COMMAND: ...` line on stderr holding every fragment."
    assert res.returncode == 2, (res.returncode, res.stdout[-1000:], res.stderr[-2000:])
    assert 'Traceback' not in res.stderr and res.stdout == '', (res.stdout[-1000:], res.stderr[-2000:])
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'kgqa {command}: '), res.stderr
    for f in fragments: assert f in lines[0], (f, lines[0])
    return lines[0]


@pytest.fixture(scope='module')
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp('newuser')


@pytest.fixture(scope='module')
def gen_dir(home) -> Path:
    "A user's own `kgqa generate` run folder (20 toy-world questions)."
    res = kgqa(home, 'generate', '--kg', 'toyworld', '--n', 20, '--out', home / 'gen')
    assert res.returncode == 0, res.stderr[-2000:]
    return home / 'gen'


@pytest.fixture(scope='module')
def kgqagen_dir(home) -> Path:
    "A user's own `kgqa kgqagen` run folder (30 toy-world questions of varied shapes: its zero-shot split keeps a train part)."
    res = kgqa(home, 'kgqagen', '--kg', 'toyworld', '--n', 30, '--out', home / 'kq')
    assert res.returncode == 0, res.stderr[-2000:]
    return home / 'kq'


def first_record(folder: Path) -> dict:
    return json.loads((folder / 'records.jsonl').read_text().splitlines()[0])


# --- 1. kgqa ultrag ask, for any question ------------------------------------------------------------------------------

def test_ask_offline_without_a_query_says_what_works(home):
    line = one_line(kgqa(home, 'ultrag', 'ask', 'Who was born in the capital of Queniar?'), 'ultrag', 'offline')
    assert "--query 'Q42 -> P19'" in line and '--dataset DIR --id N' in line and '--backend openai' in line


def test_ask_runs_the_users_query_on_a_new_question(home):
    res = kgqa(home, 'ultrag', 'ask', 'Which countries border Queniar?', '--query', 'Q900000006 -> P47', '--executor', 'symbolic', '--k', 0)
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'writer: given by the user (--query)' in res.stdout and 'query: Q900000006 -> P47' in res.stdout
    assert re.search(r'<- answer', res.stdout)


def test_ask_a_question_of_the_users_generate_folder(home, gen_dir):
    rec = first_record(gen_dir)
    res = kgqa(home, 'ultrag', 'ask', '--dataset', gen_dir, '--id', rec['id'], '--executor', 'symbolic', '--k', 500)
    assert res.returncode == 0, res.stderr[-2000:]
    assert 'writer: oracle' in res.stdout and rec['question'] in res.stdout
    gold = rec['all_answers_wikidata'][0]
    assert re.search(rf'\({gold}\)  <- answer  \(gold, oracle\)', res.stdout), res.stdout


def test_ask_an_unknown_id_and_a_bad_query_are_one_line(home, gen_dir):
    one_line(kgqa(home, 'ultrag', 'ask', '--dataset', gen_dir, '--id', 999), 'ultrag', '--id 999: no question with that ID')
    one_line(kgqa(home, 'ultrag', 'ask', '--query', 'Q900000006 -> P9999', '--executor', 'symbolic'), 'ultrag', 'unknown_relation')


def test_printed_query_has_no_placeholder_ids(home):
    "Placeholder leaves (the writer's Q1, Q2) are printed as their mentions, never as something that looks like a Wikidata ID."
    code = textwrap.dedent('''
        from kgqa_nb.ultrag_eval import display_query
        print(display_query('AND(Q1 -> P86 inv, Q2 -> P155) -> P175', {'Q1': 'Autumn Key', 'Q2': 'Live in Froino'}))''')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env_for(home)).stdout
    assert out.strip() == 'AND([Autumn Key] -> P86 inv, [Live in Froino] -> P155) -> P175' and not re.search(r'\bQ[12]\b', out)


# --- 3. numeric flags, checked before any work ---------------------------------------------------------------------

@pytest.mark.parametrize('argv,fragment', [
    (['ultrag', 'batch', '--n', '-3'], 'argument --n: must be at least 0, got -3'),
    (['ultrag', 'ask', '--query', 'Q1 -> P2', '--k', '-1'], 'argument --k: must be at least 0, got -1'),
    (['ultrag', 'ask', '--query', 'Q1 -> P2', '--top', '-3'], 'argument --top: must be at least 1, got -3'),
    (['kgrag', 'ask', 'who directed [Inception]', '--hops', '0'], 'argument --hops: must be at least 1, got 0'),
    (['kgrag', 'ask', 'who directed [Inception]', '--top-k', '-2'], 'argument --top-k: must be at least 1, got -2'),
    (['kgqagen', '--out', '{tmp}/never', '--n', '-1'], '--n must be an integer >= 1 and at most 1,000,000 (KGQAGen-10k holds 10,787 questions), got -1'),
    (['kgqagen', '--out', '{tmp}/never', '--max-triples', '1'], '--max-triples must be an integer >= 2, got 1'),
    (['rerun', '--max-cost', '-1'], '--max-cost must be >= 0 USD, got -1'),
    (['rerun', '--only'], 'argument --only: expected at least one argument'),  # was read as every artifact
])
def test_an_impossible_number_is_refused_by_its_flag(tmp_path, argv, fragment):
    argv = [a.replace('{tmp}', str(tmp_path)) for a in argv]
    one_line(kgqa(tmp_path, *argv), argv[0], fragment)
    assert not (tmp_path / 'never').exists()


def test_an_empty_seeds_file_is_refused_not_replaced_by_sampled_seeds(tmp_path):
    (tmp_path / 'seeds.txt').write_text('# my seeds\n\n')
    one_line(kgqa(tmp_path, 'kgqagen', '--out', tmp_path / 'run', '--seeds', tmp_path / 'seeds.txt'), 'kgqagen', 'holds no seed ID')
    assert not (tmp_path / 'run' / 'records.jsonl').exists()


# --- 5. ultrag batch checks --out before the run, and writes it atomically ----------------------------------------------

def test_batch_out_is_checked_before_the_run(home, gen_dir, tmp_path):
    (tmp_path / 'a-file').write_text('x')
    one_line(kgqa(home, 'ultrag', 'batch', '--dataset', gen_dir, '--out', tmp_path / 'a-file' / 't.csv'), 'ultrag', 'is a file, not a folder')
    one_line(kgqa(home, 'ultrag', 'batch', '--dataset', gen_dir, '--out', tmp_path), 'ultrag', 'is a folder; give a file name')


@pytest.mark.skipif(os.geteuid() == 0, reason='root writes into read-only folders')
def test_batch_out_in_a_read_only_folder_is_refused_first(home, gen_dir, tmp_path):
    ro = tmp_path / 'ro'; ro.mkdir(); ro.chmod(0o555)
    try: one_line(kgqa(home, 'ultrag', 'batch', '--dataset', gen_dir, '--out', ro / 't.csv'), 'ultrag', 'cannot write in')
    finally: ro.chmod(0o755)


def test_a_table_write_that_fails_leaves_the_old_file(tmp_path):
    "core.write_table writes through a temporary file: a write that fails midway (a full disk) leaves the earlier table."
    code = textwrap.dedent(f'''
        import pandas as pd
        from kgqa_nb.core import write_table
        p = {str(tmp_path / 't.csv')!r}
        write_table(pd.DataFrame(dict(a=[1, 2])), p)
        class Full(pd.DataFrame):
            def to_csv(self, *a, **k): raise OSError(28, 'No space left on device')
        try: write_table(Full(dict(a=[3])), p)
        except OSError: print('refused')''')
    res = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env_for(tmp_path))
    assert res.stdout.strip() == 'refused', res.stderr[-2000:]
    assert (tmp_path / 't.csv').read_text() == 'a\n1\n2\n'
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith('.')) == []  # no temporary file left


# --- 6. progress while KG-RAG embeds ------------------------------------------------------------------------------

def test_kgrag_retriever_shows_progress_while_it_embeds(tmp_path):
    "The command's retriever shows a bar on stderr while triples not yet in the store are embedded (a first N=3 run: minutes)."
    code = textwrap.dedent(f'''
        import numpy as np
        from kgqa_nb.kg import KnowledgeGraph
        from kgqa_nb.kgrag import TripleRetriever
        from kgqa_nb.text import HashingEncoder
        rng = np.random.default_rng(0); n, e = 500, 3000
        kg = KnowledgeGraph(rng.integers(0, n, e), rng.integers(0, 4, e), rng.integers(0, n, e), [f'e{{i}}' for i in range(n)],
                            [f'r{{i}}' for i in range(4)], [f'Entity_{{i}}' for i in range(n)], [f'rel_{{i}}' for i in range(4)], name='r')
        TripleRetriever(kg, HashingEncoder(), store_root={str(tmp_path)!r}, progress_bar=True).triple_vectors(np.arange(e))''')
    env = {k: v for k, v in env_for(tmp_path).items() if k != 'KGQA_PROGRESS'}
    res = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    import inspect, math
    from kgqa_nb.text import EmbeddingStore
    steps = math.ceil(3000 / inspect.signature(EmbeddingStore.__init__).parameters['chunk'].default)  # the bar moves once per appended chunk
    assert steps > 1 and 'embedding (' in res.stderr and f'{steps}/{steps}' in res.stderr, res.stderr[-1000:]


# --- 8. kgqa rerun: the notebook's own error, and a committed executed notebook never overwritten ---------------------

RUN = ('import signal, sys; from pathlib import Path; import kgqa_nb.rerun as rr; signal.signal(signal.SIGINT, signal.default_int_handler); '
       'rr.execute_artifact(rr.Artifact("demo", Path(sys.argv[1])), Path(sys.argv[2]), dict(out_dir=sys.argv[3]), "smoke")')


def demo_notebook(tmp: Path, *cells: str) -> Path:
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell('out_dir: str = ""  # output folder', metadata={'tags': ['parameters']})]
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, tmp / 'demo.ipynb')
    return tmp / 'demo.ipynb'


def test_a_failing_notebook_reports_its_own_error_and_keeps_the_committed_one(tmp_path):
    nb = demo_notebook(tmp_path, 'x = 1', "raise FileNotFoundError('no KG folder at /data/codex')")
    done = tmp_path / 'executed' / 'demo.ipynb'; done.parent.mkdir(); done.write_text('committed')
    res = subprocess.run([sys.executable, '-c', RUN, nb, done, tmp_path], capture_output=True, text=True, env=env_for(tmp_path))
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert 'FileNotFoundError: no KG folder at /data/codex (cell [' in last and 'PapermillExecutionError' not in last, last
    assert done.read_text() == 'committed' and sorted(p.name for p in done.parent.iterdir()) == ['demo.ipynb']


def test_an_interrupted_run_never_overwrites_the_committed_notebook(tmp_path):
    started = tmp_path / 'started'
    nb = demo_notebook(tmp_path, f'open({str(started)!r}, "w").close()', 'import time; time.sleep(120)')
    done = tmp_path / 'executed' / 'demo.ipynb'; done.parent.mkdir(); done.write_text('committed')
    p = subprocess.Popen([sys.executable, '-c', RUN, nb, done, tmp_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for(tmp_path))
    try:
        for _ in range(1200):  # wait for the event (the notebook's second cell ran), not for a time
            if started.exists() or p.poll() is not None: break
            time.sleep(0.1)
        assert started.exists(), p.communicate(timeout=60)[1][-2000:]
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=120)
    finally:
        if p.poll() is None: p.kill()
    assert p.returncode != 0
    assert done.read_text() == 'committed' and sorted(x.name for x in done.parent.iterdir()) == ['demo.ipynb']


# --- 9. --dataset DIR: the same opener for every folder a user may have; nothing written into the repository -------------

def test_batch_reads_a_generate_folder_and_a_kgqagen_folder(home, gen_dir, kgqagen_dir, tmp_path):
    smoke_before = sorted(p.name for p in (project_dirs.scratch / 'results' / 'datasets').glob('*')) if (project_dirs.scratch / 'results' / 'datasets').exists() else []
    res = kgqa(home, 'ultrag', 'batch', '--dataset', gen_dir, '--executor', 'symbolic', '--k', 500, '--out', tmp_path / 'g.csv')
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / 'g.csv').exists() and 'hits' in res.stdout
    res = kgqa(home, 'ultrag', 'batch', '--dataset', kgqagen_dir, '--split', 'train', '--executor', 'symbolic', '--k', 500)
    assert res.returncode == 0, res.stderr[-2000:]
    after = sorted(p.name for p in (project_dirs.scratch / 'results' / 'datasets').glob('*')) if (project_dirs.scratch / 'results' / 'datasets').exists() else []
    assert after == smoke_before  # nothing new in the repository's _smoke/


def test_batch_default_dataset_goes_to_the_user_cache(tmp_path):
    res = kgqa(tmp_path, 'ultrag', 'batch', '--n', 2, '--executor', 'symbolic', '--k', 500)
    assert res.returncode == 0, res.stderr[-2000:]
    assert any((tmp_path / 'cache' / 'datasets').glob('toyworld*')), list((tmp_path / 'cache').rglob('*'))[:10]


def test_the_opener_reads_the_published_gtsqa_layout(tmp_path, gen_dir):
    code = textwrap.dedent(f'''
        from pathlib import Path
        from kgqa_nb.dataset import read_records, write_parquet
        from kgqa_nb.datasources import open_dataset_dir
        d = Path({str(tmp_path)!r}) / 'gtsqa' / 'gtsqa'; d.mkdir(parents=True)
        r = read_records({str(gen_dir / 'records.jsonl')!r})
        r['test_type'] = [['training']] * 12 + [['in_distribution']] * (len(r) - 12)
        write_parquet(r.iloc[:12], d / 'train.parquet'); write_parquet(r.iloc[12:], d / 'test.parquet')
        s = open_dataset_dir(Path({str(tmp_path)!r}) / 'gtsqa')
        print(s.name, len(s.train), len(s.test))''')
    res = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env_for(tmp_path))
    assert res.stdout.split() == ['gtsqa', '12', '8'], res.stderr[-2000:]


def test_a_folder_that_is_no_dataset_is_one_line(home, tmp_path):
    one_line(kgqa(home, 'ultrag', 'batch', '--dataset', tmp_path), 'ultrag', 'not a dataset folder')
    one_line(kgqa(home, 'ultrag', 'batch', '--dataset', tmp_path / 'missing'), 'ultrag', 'no such folder')


# --- 10. two runs on one folder ------------------------------------------------------------------------------------

@pytest.mark.parametrize('command', ['kgqagen', 'generate'])
def test_a_second_run_on_a_locked_folder_says_who_holds_it(tmp_path, command):
    from kgqa_nb.core import folder_lock
    out = tmp_path / 'run'
    with folder_lock(out, name='.run.lock'):  # what a first run holds while it works
        line = one_line(kgqa(tmp_path, command, '--kg', 'toyworld', '--n', 3, '--out', out), command, 'is in use by another run')
    assert f'pid {os.getpid()}' in line and 'use another --out' in line
    assert not (out / 'records.jsonl').exists()


# --- 11. one voice; --help without the heavy imports --------------------------------------------------------------------

@pytest.mark.parametrize('command', ['ultrag', 'kgrag', 'rerun', 'kgqagen', 'generate', 'serve-offline'])
def test_help_parses_before_torch_is_imported(tmp_path, command):
    code = textwrap.dedent(f'''
        import contextlib, io, sys
        from kgqa_nb.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try: main([{command!r}, '--help'])
            except SystemExit as e: assert e.code in (0, None)
        print(out.getvalue().startswith('usage: kgqa {command}'), 'torch' in sys.modules)''')
    res = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env_for(tmp_path))
    assert res.stdout.split() == ['True', 'False'], (res.stdout, res.stderr[-2000:])


def test_backend_openai_without_a_model_names_the_flag(home):
    one_line(kgqa(home, 'ultrag', 'ask', '--query', 'Q900000006 -> P47', '--backend', 'openai'), 'ultrag', '--backend openai needs --model NAME')
    one_line(kgqa(home, 'kgrag', 'ask', 'who directed [Inception]', '--backend', 'openai'), 'kgrag', '--backend openai needs --model NAME')
