"""`kgqa` as a user meets it, in a subprocess: bad input ends with one line on stderr (`kgqa <command>: <message>`) and exit code 2,
never a traceback; profiles with typos are refused before any notebook runs; artifacts whose needs (under the profile's
parameters) are unmet are skipped with the reason; a run prints its progress."""
import os, re, socket, subprocess, sys

import pytest

from kgqa_nb.core import project_dirs
from kgqa_nb.profiles import LLM_ENV, artifact_needs, check_profile, load_manifest


def kgqa(*args, env=None, timeout=300):
    "Run `kgqa ARGS` (as `python -m kgqa_nb.cli`) from the repository root with no LLM credentials in the environment."
    e = {k: v for k, v in os.environ.items() if k not in LLM_ENV and k != 'KGQA_DEBUG'}
    e.update(KGQA_PROGRESS='0', **(env or {}))
    return subprocess.run([sys.executable, '-m', 'kgqa_nb.cli', *map(str, args)], capture_output=True, text=True,
                          cwd=project_dirs.root, env=e, timeout=timeout)


def one_line_error(res, *fragments):
    "Assert exit code 2 and a single `kgqa: ...` (or `kgqa <command>: ...`) line on stderr containing every fragment."
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert 'Traceback' not in res.stderr, res.stderr[-2000:]
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and re.match(r'kgqa( [a-z-]+)?: ', lines[0]), res.stderr
    for f in fragments: assert f in lines[0], (f, lines[0])
    return lines[0]


def test_help_lists_every_command():
    res = kgqa('--help')
    assert res.returncode == 0
    for c in ('rerun', 'generate', 'ultra-eval', 'serve-offline'): assert f'  {c} ' in res.stdout


def test_unknown_command():
    one_line_error(kgqa('no-such-command'), "unknown command 'no-such-command'")


# --- generate: the KG and the output folder -------------------------------------------------------------------------

def test_generate_unknown_kg_name(tmp_path):
    one_line_error(kgqa('generate', '--kg', 'no-such-kg', '--out', tmp_path / 'run', '--n', 2), "no-such-kg")


def test_generate_kg_folder_that_does_not_exist(tmp_path):
    one_line_error(kgqa('generate', '--kg', tmp_path / 'missing', '--out', tmp_path / 'run', '--n', 2), str(tmp_path / 'missing'))


def test_generate_tsv_file_as_kg(tmp_path):
    tsv = tmp_path / 'triples.tsv'; tsv.write_text('Q1\tP1\tQ2\n')
    one_line_error(kgqa('generate', '--kg', tsv, '--out', tmp_path / 'run', '--n', 2), str(tsv))


def test_generate_out_pointing_at_a_file(tmp_path):
    f = tmp_path / 'not-a-folder.txt'; f.write_text('x')
    one_line_error(kgqa('generate', '--kg', 'toyworld', '--out', f, '--n', 2), str(f))
    assert f.read_text() == 'x'


# --- rerun: artifacts and profiles ------------------------------------------------------------------------------------

def test_rerun_unknown_artifact():
    one_line_error(kgqa('rerun', '--only', 'table6_gt_vz'), "unknown artifact 'table6_gt_vz'", "'table6_gt_vs_sp'")


def test_rerun_unknown_profile():
    one_line_error(kgqa('rerun', '--profile', 'no-such-profile'), "no parameter profile 'no-such-profile'", 'smoke')


@pytest.mark.parametrize('text,fragments', [
    ('table6_gt_vz:\n  n_questions: 10\n', ["section 'table6_gt_vz' is not an artifact", "did you mean 'table6_gt_vs_sp'"]),
    ('table6_gt_vs_sp:\n  n_questionz: 10\n', ['table6_gt_vs_sp.n_questionz', "no parameter 'n_questionz'"]),
    ('table6_gt_vs_sp:\n  n_questions: abc\n', ['table6_gt_vs_sp.n_questions', "expected int, got 'abc'"]),
    ('defaults:\n  seed: zero\n', ['defaults.seed', "expected int, got 'zero'"]),
    ('kg_overview:\n  kgs: [toyworld\n', ['not valid YAML']),
], ids=['unknown-section', 'unknown-parameter', 'ill-typed', 'ill-typed-default', 'bad-yaml'])
def test_profile_typos_are_refused_before_anything_runs(tmp_path, text, fragments):
    prof = tmp_path / 'typo.yaml'; prof.write_text(text)
    one_line_error(kgqa('rerun', '--profile', prof), str(prof), *fragments)
    assert not (project_dirs.scratch / 'typo' / 'results' / 'executed').exists()  # nothing ran


def test_list_shows_needs_under_the_profile():
    smoke, paper = kgqa('rerun', '--list', '--profile', 'smoke'), kgqa('rerun', '--list', '--profile', 'paper')
    assert smoke.returncode == paper.returncode == 0
    line = lambda out: next(l for l in out.splitlines() if l.startswith('synthkgqa_dataset:'))
    assert 'llm' not in line(smoke.stdout) and 'llm' in line(paper.stdout)


def test_paper_profile_without_a_key_skips_every_llm_artifact_at_once():
    "`make figures` on a machine with no API key: artifacts that need an LLM under the paper parameters are skipped, none hangs."
    man, params = load_manifest(), check_profile('paper')
    llm = [n for n in man if 'llm' in artifact_needs(man[n], params[n])]
    assert {'synthkgqa_dataset', 'fig4_sp_reader'} <= set(llm)
    res = kgqa('rerun', '--profile', 'paper', '--only', *llm, timeout=120)
    assert res.returncode == 0, res.stderr
    for i, n in enumerate(llm, 1):
        assert f'[{i}/{len(llm)}] {n}: skipped, ' in res.stderr
        assert 'needs an LLM API key (KGQA_LLM_API_KEY/OPENAI_API_KEY or KGQA_LLM_BASE_URL)' in next(
            l for l in res.stdout.splitlines() if l.split()[1:2] == [n])
    assert 'running' not in res.stderr


def test_a_run_prints_its_progress(tmp_path):
    prof = project_dirs.scratch / 'profile-tests' / 'cli-progress.yaml'
    prof.parent.mkdir(parents=True, exist_ok=True)
    prof.write_text('kg_overview:\n  kgs: [toyworld]\n  toyworld_scale: 0.2\n')
    res = kgqa('rerun', '--profile', prof, '--only', 'kg_overview')
    assert res.returncode == 0, res.stderr[-3000:]
    assert '[1/1] kg_overview: running' in res.stderr and '[1/1] kg_overview: ok in ' in res.stderr
    assert (project_dirs.scratch / 'cli-progress' / 'results' / 'kg_overview.csv').exists()


def test_debug_switch_keeps_the_traceback():
    res = kgqa('rerun', '--profile', 'no-such-profile', env=dict(KGQA_DEBUG='1'))
    assert res.returncode == 1 and 'Traceback' in res.stderr and 'FileNotFoundError' in res.stderr


# --- serve-offline: ports ---------------------------------------------------------------------------------------------

def test_serve_offline_port_out_of_range():
    one_line_error(kgqa('serve-offline', '--port', 99999), '--port', '99999')


def test_serve_offline_port_not_a_number():
    one_line_error(kgqa('serve-offline', '--port', 'http'), '--port', "'http'")


def test_serve_offline_port_in_use():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); s.listen(1)
        port = s.getsockname()[1]
        one_line_error(kgqa('serve-offline', '--port', port, timeout=120), f'port {port} on 127.0.0.1 is already in use')


# --- every command: one error path ------------------------------------------------------------------------------------

EVERY_COMMAND = r'''
import contextlib, io, json, sys
from kgqa_nb.cli import COMMANDS, main
out = {}
for cmd in COMMANDS:
    for flag in ('--no-such-flag', '--help'):
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            try: rc = main([cmd, flag])  # what `kgqa CMD FLAG` runs; the console script exits with its value
            except SystemExit as x: rc = x.code if isinstance(x.code, int) else (0 if x.code is None else 1)
            except BaseException as x: rc = f'raised {type(x).__name__}: {x}'
        out[f'{cmd} {flag}'] = dict(rc=rc, stdout=o.getvalue(), stderr=e.getvalue())
sys.__stdout__.write(json.dumps(out))
'''


@pytest.fixture(scope='module')
def every_command():
    "Each command of COMMANDS run with an unknown flag and with --help, in one subprocess (imports are the slow part)."
    from kgqa_nb.cli import COMMANDS
    e = {k: v for k, v in os.environ.items() if k not in LLM_ENV and k != 'KGQA_DEBUG'}
    res = subprocess.run([sys.executable, '-c', EVERY_COMMAND], capture_output=True, text=True, cwd=project_dirs.root,
                         env={**e, 'KGQA_PROGRESS': '0'}, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = __import__('json').loads(res.stdout)
    assert sorted({k.split()[0] for k in out}) == sorted(COMMANDS)
    return out


def _command_names():
    from kgqa_nb.cli import COMMANDS
    return list(COMMANDS)


@pytest.mark.parametrize('cmd', _command_names())
def test_every_command_reports_a_bad_flag_in_one_line(every_command, cmd):
    "A flag the command does not know: exit code 2, nothing on stdout, exactly one `kgqa CMD: ` line on stderr."
    r = every_command[f'{cmd} --no-such-flag']
    assert (r['rc'], r['stdout']) == (2, ''), r
    assert len(r['stderr'].splitlines()) == 1 and r['stderr'].startswith(f'kgqa {cmd}: '), r  # argparse may name a missing required flag first


@pytest.mark.parametrize('cmd', _command_names())
def test_every_command_prints_its_usage_on_help(every_command, cmd):
    "`kgqa CMD --help`: the command's usage on stdout, nothing on stderr, exit code 0 (asking for help is not an error)."
    r = every_command[f'{cmd} --help']
    assert (r['rc'], r['stderr']) == (0, ''), r
    assert r['stdout'].startswith(f'usage: kgqa {cmd}'), r['stdout'][:300]
