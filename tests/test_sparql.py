"""SPARQL stores: the read-only guard against a hostile corpus (with proof of non-execution), RemoteSparqlStore against
a real local endpoint with fault injection, the record/replay cache, and query deadlines."""
import importlib.util, json, socket, threading, time, urllib.error, urllib.parse, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyoxigraph as ox
import pytest
from hypothesis import given, settings, strategies as st

from kgqa_nb.core import CacheMissError, ReplayCache
from kgqa_nb.kg import KnowledgeGraph, WD, WDT
from kgqa_nb.sparql import (EndpointHTTPError, EndpointQueryError, EndpointTimeout, EndpointUnreachable, MalformedResponse,
                            OxigraphStore, QueryKindError, QueryTimeout, RemoteSparqlStore, ServerStartError, SparqlServer,
                            UnsafeQueryError, check_read_only, serve_sparql, term_id)

CORPUS = json.loads((Path(__file__).parent / 'hostile_queries.json').read_text())
EXPLOSIVE = 'SELECT (COUNT(*) AS ?n) { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l . ?m ?n2 ?o . ?p ?q ?r . ?s ?t ?u }'  # ~16^7 rows


def _tiny():
    return KnowledgeGraph.from_id_triples(
        [('Q1', 'P1', 'Q2'), ('Q1', 'P2', 'Q3'), ('Q2', 'P3', 'Q1'), ('Q1', 'P4', 'Q4'), ('Q2', 'P4', 'Q4'), ('Q4', 'P5', 'Q5')],
        entity_labels={'Q1': 'Ada Lovelace', 'Q2': 'Lord Byron', 'Q3': 'Anne Milbanke', 'Q4': 'London', 'Q5': 'United Kingdom'},
        relation_labels={'P1': 'father', 'P2': 'mother', 'P3': 'child', 'P4': 'place of birth', 'P5': 'country'}, name='tiny')


@pytest.fixture(scope='module')
def kg():
    "toyworld when the colleague's module exists, else a tiny hand-made KG."
    if importlib.util.find_spec('kgqa_nb.toyworld') is not None:
        from kgqa_nb.toyworld import make_toyworld
        return make_toyworld(seed=0, scale=0.2)
    return _tiny()


@pytest.fixture(scope='module')
def store(kg):
    return OxigraphStore.from_kg(kg)


class Trap:
    "A plain HTTP server that records every request (what SERVICE / LOAD would hit)."
    def __init__(self):
        trap = self
        self.paths = []
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def _any(self):
                trap.paths.append(self.path)
                body = b'{"head":{"vars":[]},"results":{"bindings":[]}}'
                self.send_response(200); self.send_header('Content-Type', 'application/sparql-results+json')
                self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
            do_GET = do_POST = _any
        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), H); self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}'
    def close(self): self.httpd.shutdown(); self.httpd.server_close()


@pytest.fixture
def trap():
    t = Trap(); yield t; t.close()


def _dump(store: OxigraphStore):
    return sorted(str(q) for q in store.store)


# ---------------------------------------------------------------- the guard

def test_corpus_sizes():
    assert len(CORPUS['hostile']) >= 30 and len(CORPUS['benign']) >= 10


@pytest.mark.parametrize('item', CORPUS['hostile'], ids=[h['name'] for h in CORPUS['hostile']])
def test_guard_refuses_hostile(item):
    with pytest.raises(UnsafeQueryError):
        check_read_only(item['query'].replace('{TRAP_URL}', 'http://127.0.0.1:1'))


@pytest.mark.parametrize('query', CORPUS['benign'])
def test_guard_accepts_benign_and_engine_runs_it(query, store):
    check_read_only(query)
    form = query.split('{')[0].upper()
    if 'ASK' in form: assert isinstance(store.ask(query), bool)
    elif 'CONSTRUCT' in form or 'DESCRIBE' in form: assert isinstance(store.construct(query), list)
    else: assert isinstance(store.select(query), list)


def test_control_unguarded_service_does_reach_the_trap(store, trap):
    "The trap is real: pyoxigraph itself, without the guard, sends the SERVICE request."
    try: list(store.store.query(f'SELECT * WHERE {{ SERVICE <{trap.url}/sparql> {{ ?s ?p ?o }} }}'))
    except Exception: pass
    assert len(trap.paths) >= 1


def test_hostile_never_executes_on_oxigraph(trap, kg):
    store = OxigraphStore.from_kg(kg)
    before = _dump(store)
    for item in CORPUS['hostile']:
        q = item['query'].replace('{TRAP_URL}', trap.url)
        for method in (store.select, store.ask, store.construct):
            with pytest.raises(UnsafeQueryError): method(q)
            with pytest.raises(UnsafeQueryError): method(q, timeout=5)
    assert trap.paths == []
    assert _dump(store) == before


def test_hostile_never_leaves_the_machine_via_remote(store, trap, tmp_path):
    with serve_sparql(store) as srv:
        remote = RemoteSparqlStore(srv.url, timeout=5, cache=tmp_path / 'c.jsonl')
        for item in CORPUS['hostile']:
            with pytest.raises(UnsafeQueryError): remote.select(item['query'].replace('{TRAP_URL}', trap.url))
        assert srv.requests == 0 and remote.requests_sent == 0
    assert trap.paths == []
    assert not (tmp_path / 'c.jsonl').exists()


def test_server_refuses_updates_and_unsafe_queries(store, trap):
    before = _dump(store)
    with serve_sparql(store) as srv:
        data = urllib.parse.urlencode({'update': 'DROP ALL'}).encode()
        with pytest.raises(urllib.error.HTTPError) as e: urllib.request.urlopen(srv.url, data=data, timeout=5)
        assert e.value.code == 403
        q = urllib.parse.quote(f'SELECT * {{ SERVICE <{trap.url}/sparql> {{ ?s ?p ?o }} }}')
        with pytest.raises(urllib.error.HTTPError) as e: urllib.request.urlopen(f'{srv.url}?query={q}', timeout=5)
        assert e.value.code == 400
    assert trap.paths == [] and _dump(store) == before


_lit = st.text(alphabet=st.characters(blacklist_categories=('Cs',)), max_size=40)

@settings(max_examples=150, deadline=None)
@given(_lit)
def test_any_string_literal_is_accepted(s):
    "Whatever text a literal holds (update keywords, quotes, braces, SERVICE), a properly escaped literal is harmless."
    esc = s.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n').replace('\r', '\\r')
    check_read_only(f'SELECT ?x WHERE {{ ?x rdfs:label "{esc}"@en }}')


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(['INSERT DATA { <a:b> <a:c> <a:d> }', 'DROP ALL', 'CLEAR DEFAULT', 'LOAD <http://x/>',
                        'SELECT * { SERVICE <http://x/> { ?s ?p ?o } }']),
       st.lists(st.sampled_from([' ', '\t', '\n', '\r\n', '# c\n', '#\n']), max_size=4), st.booleans())
def test_case_and_layout_do_not_matter(q, pad, lower):
    with pytest.raises(UnsafeQueryError): check_read_only(''.join(pad) + (q.lower() if lower else q))


# ---------------------------------------------------------------- Oxigraph store

def test_from_kg_matches_the_kg(kg, store):
    assert len(store) >= kg.num_triples
    n = store.select('SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o FILTER(STRSTARTS(STR(?p), STR(wdt:))) }')[0]['n']
    assert term_id(n) == len(set(map(tuple, kg.triples.tolist())))
    r = int(kg.rel[0]); h = int(kg.head[0])
    got = {x['t'] for x in store.select_ids(f'SELECT ?t WHERE {{ wd:{kg.entity_ids[h]} wdt:{kg.relation_ids[r]} ?t }}')}
    want = {kg.entity_ids[t] for t in kg.tail[(kg.head == h) & (kg.rel == r)]}
    assert got == want
    lab = store.select_ids(f'SELECT ?l WHERE {{ wd:{kg.entity_ids[h]} rdfs:label ?l }}')
    assert lab == [{'l': kg.entity_labels[h]}]


def test_query_kind_checked(store):
    with pytest.raises(QueryKindError): store.select('ASK { ?s ?p ?o }')
    with pytest.raises(QueryKindError): store.ask('SELECT * { ?s ?p ?o }')
    with pytest.raises(QueryKindError): store.construct('SELECT * { ?s ?p ?o }')


STREAMING = 'SELECT * { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l . ?m ?n2 ?o . ?p ?q ?r . ?s ?t ?u }'

@pytest.mark.parametrize('isolation,query', [('fork', EXPLOSIVE), ('fork', STREAMING), ('thread', STREAMING)])
def test_explosive_query_times_out(isolation, query):
    "fork kills any query; thread mode stops streaming ones (a blocking COUNT would run on in the background)."
    store = OxigraphStore.from_kg(_tiny(), isolation=isolation)
    t0 = time.monotonic()
    with pytest.raises(QueryTimeout): store.select(query, timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert store.ask('ASK { wd:Q4 wdt:P5 wd:Q5 }', timeout=10) is True


def test_timeout_on_read_only_disk_store(tmp_path):
    OxigraphStore.from_kg(_tiny(), tmp_path / 's')
    ro = OxigraphStore.open(tmp_path / 's')
    with pytest.raises(QueryTimeout): ro.select(EXPLOSIVE, timeout=0.5)
    assert ro.select_ids('SELECT ?c WHERE { wd:Q4 wdt:P5 ?c }', timeout=10) == [{'c': 'Q5'}]
    with pytest.raises(RuntimeError): ro.store.update('CLEAR ALL')  # the underlying store is read-only too


def test_same_results_with_and_without_deadline(store, kg):
    q = f'SELECT ?x ?y WHERE {{ ?x wdt:{kg.relation_ids[0]} ?y }} ORDER BY ?x ?y LIMIT 50'
    assert store.select(q) == store.select(q, timeout=30)
    c = f'CONSTRUCT WHERE {{ ?x wdt:{kg.relation_ids[0]} ?y }}'
    assert set(store.construct(c)) == set(store.construct(c, timeout=30))


# ---------------------------------------------------------------- remote endpoint

WORKLOAD = ['SELECT ?s ?o WHERE {{ ?s wdt:{r} ?o }} ORDER BY ?s ?o LIMIT 100',
            'SELECT ?o ?l WHERE {{ wd:{e} ?p ?o . OPTIONAL {{ ?o rdfs:label ?l }} }} ORDER BY ?o ?l',
            'SELECT (COUNT(*) AS ?n) WHERE {{ ?s wdt:{r} ?o }}',
            'SELECT ?l WHERE {{ wd:{e} rdfs:label ?l }}']


def test_remote_equals_local(store, kg, tmp_path):
    e, r = kg.entity_ids[int(kg.head[0])], kg.relation_ids[0]
    with serve_sparql(store) as srv:
        remote = RemoteSparqlStore(srv.url, timeout=10, cache=None)
        for tpl in WORKLOAD:
            q = tpl.format(e=e, r=r)
            assert remote.select(q) == store.select(q)
        assert remote.ask(f'ASK {{ wd:{e} ?p ?o }}') is True
        c = f'CONSTRUCT WHERE {{ wd:{e} ?p ?o }}'
        assert set(remote.construct(c)) == set(store.construct(c))
        long_q = 'SELECT ?l WHERE { wd:%s rdfs:label ?l } ' % e + '#' * 3000  # POST path
        assert remote.select(long_q) == store.select(long_q)


def test_retries_bounded_and_errors_clear(store):
    with serve_sparql(store, hang_s=5) as srv:
        remote = RemoteSparqlStore(srv.url, timeout=5, max_retries=2, backoff=0.01)
        srv.fault = '500'
        with pytest.raises(EndpointHTTPError) as e: remote.select('SELECT * { ?s ?p ?o } LIMIT 1')
        assert e.value.status == 500 and srv.requests == 3 and 'after 3 attempts' in str(e.value)
        srv.fault, srv.requests = '429', 0
        with pytest.raises(EndpointHTTPError) as e: remote.select('SELECT * { ?s ?p ?o } LIMIT 2')
        assert e.value.status == 429 and srv.requests == 3
        srv.fault, srv.requests, srv.faults = None, 0, ['429', '429']
        assert len(remote.select('SELECT * { ?s ?p ?o } LIMIT 3')) == 3 and srv.requests == 3
        srv.requests = 0
        with pytest.raises(EndpointQueryError) as e: remote.select('SELECT ?x WHERE { ?x wdt:P1 }')  # 400: not retried
        assert e.value.status == 400 and srv.requests == 1
        srv.fault, srv.requests = 'malformed', 0
        with pytest.raises(MalformedResponse): remote.select('SELECT * { ?s ?p ?o } LIMIT 4')
        assert srv.requests == 1  # a bad body is not retried
        srv.fault, srv.requests = 'hang', 0
        hung = RemoteSparqlStore(srv.url, timeout=0.3, max_retries=1, backoff=0.01)
        t0 = time.monotonic()
        with pytest.raises(EndpointTimeout): hung.select('SELECT * { ?s ?p ?o } LIMIT 5')
        assert time.monotonic() - t0 < 4 and srv.requests == 2
        with pytest.raises(QueryTimeout): hung.ask('ASK { ?s ?p ?o }', timeout=0.2)  # EndpointTimeout is a QueryTimeout
    with pytest.raises(EndpointUnreachable): RemoteSparqlStore(srv.url, timeout=2, max_retries=0).select('SELECT * { ?s ?p ?o }')


def test_cache_record_replay(store, kg, tmp_path):
    e, r = kg.entity_ids[int(kg.head[0])], kg.relation_ids[0]
    qs = [tpl.format(e=e, r=r) for tpl in WORKLOAD]
    path = tmp_path / 'cache.jsonl'
    with serve_sparql(store) as srv:
        url = srv.url.replace('http://', 'http://alice:s3cret-pw@') + '?api_key=TOPSECRET&x=1'
        rec = RemoteSparqlStore(url, timeout=10, cache=path)
        first = [rec.select(q) for q in qs] + [rec.ask(f'ASK {{ wd:{e} ?p ?o }}')]
        assert srv.requests == len(qs) + 1
        again = [rec.select(q + '  # same query, other layout\n') for q in qs]
        assert srv.requests == len(qs) + 1 and again == first[:-1]  # served from the cache
    text = path.read_text()
    assert 's3cret-pw' not in text and 'TOPSECRET' not in text and 'alice' not in text
    assert len(text.splitlines()) == len(qs) + 1
    replay = RemoteSparqlStore(url, cache=ReplayCache(path, 'replay'))  # server is gone
    assert [replay.select(q) for q in qs] + [replay.ask(f'ASK {{ wd:{e} ?p ?o }}')] == first
    assert replay.requests_sent == 0
    with pytest.raises(CacheMissError, match="cache mode 'replay' never calls"): replay.select('SELECT * { ?s ?p ?o } LIMIT 7')
    with pytest.raises(EndpointUnreachable): RemoteSparqlStore(url, timeout=2, max_retries=0, cache=ReplayCache(path, 'off')).select(qs[0])


def test_bad_arguments():
    with pytest.raises(ValueError): RemoteSparqlStore('ftp://x/sparql')
    with pytest.raises(ValueError): RemoteSparqlStore('http://127.0.0.1:1/sparql', cache='/tmp/x.jsonl', cache_mode='sometimes')
    with pytest.raises(ValueError): OxigraphStore(ox.Store(), isolation='magic')
    with pytest.raises(ValueError): OxigraphStore(ox.Store()).select('SELECT * {}', timeout=-1)
    with pytest.raises(FileNotFoundError): OxigraphStore.open('/nonexistent/store')


# --- transient or not (issue 10, item 7) -------------------------------------------------------------------------------

@pytest.mark.parametrize('fault', ['400', '401', '403', '404', '501'])
def test_endpoint_not_transient_statuses_take_one_request(store, fault):
    with serve_sparql(store) as srv:
        srv.fault = fault
        remote = RemoteSparqlStore(srv.url, timeout=5, max_retries=3, backoff=0.01)
        with pytest.raises(EndpointHTTPError) as e: remote.select('SELECT * { ?s ?p ?o } LIMIT 1')
        assert e.value.status == int(fault) and srv.requests == 1 and 'not retried' in str(e.value) and srv.url in str(e.value)


@pytest.mark.parametrize('fault', ['408', '429', '500', '502', '503', 'hang'])
def test_endpoint_transient_failures_take_max_retries_plus_one(store, fault):
    with serve_sparql(store, hang_s=2) as srv:
        srv.fault = fault
        remote = RemoteSparqlStore(srv.url, timeout=0.3, max_retries=3, backoff=0.01)
        with pytest.raises(EndpointTimeout if fault == 'hang' else EndpointHTTPError): remote.select('SELECT * { ?s ?p ?o } LIMIT 1')
        assert srv.requests == 4 and remote.requests_sent == 4


def test_endpoint_refused_connection_fails_at_once():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
    url = f'http://127.0.0.1:{port}/sparql'
    remote = RemoteSparqlStore(url, timeout=5, max_retries=5, backoff=0.01)
    with pytest.raises(EndpointUnreachable, match=f'connection refused.*not retried.*endpoint {url}'):
        remote.select('SELECT * { ?s ?p ?o }')
    assert remote.requests_sent == 1


def test_sparql_server_port_errors(store):
    with serve_sparql(store) as srv:
        port = int(srv.url.rsplit(':', 1)[1].split('/')[0])
        with pytest.raises(ServerStartError, match=f'^port {port} on 127.0.0.1 is already in use'): SparqlServer(store, port=port)
    with pytest.raises(ServerStartError, match='^port 99999 is out of range 0-65535$'): SparqlServer(store, port=99999)


# --- the local server as a SPARQL 1.1 protocol endpoint (issue 15 item 5) ---------------------------------------------
# pyoxigraph ships no server binary (`oxigraph serve` is a separate Rust program), so the remote store is tested end to
# end against kgqa_nb's own protocol server over the same embedded store.

def _http(url, data=None, headers=None):
    "(status, content type, body) of one request."
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r: return r.status, r.headers['Content-Type'], r.read()
    except urllib.error.HTTPError as e: return e.code, e.headers['Content-Type'], e.read()


def test_server_speaks_the_protocol(store):
    q = 'SELECT ?s ?o WHERE { ?s ?p ?o } ORDER BY ?s ?o LIMIT 7'
    c = 'CONSTRUCT WHERE { ?s ?p ?o } LIMIT 7'
    want = store.select(q)
    with serve_sparql(store) as srv:
        get = _http(f'{srv.url}?query={urllib.parse.quote(q)}')
        form = _http(srv.url, urllib.parse.urlencode({'query': q}).encode(), {'Content-Type': 'application/x-www-form-urlencoded'})
        direct = _http(srv.url, q.encode(), {'Content-Type': 'application/sparql-query; charset=utf-8'})
        assert get == form == direct and get[:2] == (200, 'application/sparql-results+json')
        rows = lambda body, fmt: [{v.value: t for v, t in zip(r.variables, s) if t is not None} for r in [ox.parse_query_results(body, fmt)] for s in r]
        assert rows(get[2], ox.QueryResultsFormat.JSON) == want
        for accept, fmt in (('application/sparql-results+xml', ox.QueryResultsFormat.XML), ('text/tab-separated-values', ox.QueryResultsFormat.TSV)):
            status, ctype, body = _http(f'{srv.url}?query={urllib.parse.quote(q)}', headers={'Accept': f'text/html;q=0.9, {accept}'})
            assert (status, ctype) == (200, accept) and rows(body, fmt) == want
        triples = lambda body, fmt: {(t.subject, t.predicate, t.object) for t in ox.parse(body, fmt)}
        status, ctype, body = _http(f'{srv.url}?query={urllib.parse.quote(c)}')
        assert (status, ctype) == (200, 'application/n-triples') and triples(body, ox.RdfFormat.N_TRIPLES) == set(store.construct(c))
        status, ctype, body = _http(f'{srv.url}?query={urllib.parse.quote(c)}', headers={'Accept': 'text/turtle'})
        assert (status, ctype) == (200, 'text/turtle') and triples(body, ox.RdfFormat.TURTLE) == set(store.construct(c))
        n = srv.requests
        assert _http(f'{srv.url}?query={urllib.parse.quote(q)}', headers={'Accept': 'image/png'})[0] == 406
        assert _http(srv.url, q.encode(), {'Content-Type': 'text/plain'})[0] == 415
        assert _http(f'{srv.url}?query={urllib.parse.quote(q)}&query={urllib.parse.quote(q)}')[0] == 400
        assert _http(srv.url, b'DROP ALL', {'Content-Type': 'application/sparql-update'})[0] == 403
        assert srv.requests == n + 4


def test_server_deadline_stops_a_runaway_query(store):
    small = 'SELECT ?s WHERE { ?s ?p ?o } ORDER BY ?s LIMIT 3'
    with serve_sparql(store, query_timeout=0.5) as srv:
        patient = RemoteSparqlStore(srv.url, timeout=30, max_retries=1, backoff=0.01)
        with pytest.raises(EndpointHTTPError) as e: patient.select(EXPLOSIVE)
        assert e.value.status == 503 and srv.requests == 2  # 503 is transient for the client: one retry, killed again
        impatient = RemoteSparqlStore(srv.url, timeout=0.2, max_retries=0)
        with pytest.raises(EndpointTimeout): impatient.select(EXPLOSIVE)
        assert patient.select(small) == store.select(small)  # the killed workers left the server free
    with pytest.raises(ValueError, match='query_timeout must be positive'): SparqlServer(store, query_timeout=0)


def test_remote_store_end_to_end_on_one_kg(store, kg, tmp_path):
    "Same answers as the embedded store, the guard before any request, then replay with the server stopped."
    e = kg.entity_ids[int(kg.head[0])]
    qs = [tpl.format(e=e, r=r) for tpl in WORKLOAD for r in kg.relation_ids[:2]]
    with serve_sparql(store, query_timeout=30) as srv:
        remote = RemoteSparqlStore(srv.url, timeout=30, cache=tmp_path / 'c.jsonl')
        assert [remote.select(q) for q in qs] == [store.select(q) for q in qs]
        n = srv.requests
        for bad in ('INSERT DATA { <x:a> <x:b> <x:c> }', 'LOAD <http://127.0.0.1:1/x.nt>', 'SELECT * { SERVICE <http://127.0.0.1:1/s> { ?s ?p ?o } }'):
            with pytest.raises(UnsafeQueryError): remote.select(bad)
        assert srv.requests == n
    replay = RemoteSparqlStore(srv.url, cache=ReplayCache(tmp_path / 'c.jsonl', 'replay'))
    assert [replay.select(q) for q in qs] == [store.select(q) for q in qs] and replay.requests_sent == 0
