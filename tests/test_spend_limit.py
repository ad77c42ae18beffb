"""A spend guard that cannot be blind (issue 41, item 4; issue 42, item 2), against the local stand-in server, which counts
what it billed: every API call is held at its worst case before it is sent and counted once it is priced, by the model
asked for and the answering model's price where that name has one; the run stops within one call of its limit whatever
name the server answers with; an unknown price refuses the first call; batches are priced when submitted, cancelled
when the run stops, and counted once."""
import threading

import pytest

from kgqa_nb.llm import LLMClient, LLMError, triples_lookup_messages
from kgqa_nb.llm_spend import BATCH_DISCOUNT, SpendBudget, SpendLimitError, api_cost, higher_price, model_price, read_ledger
from kgqa_nb.llm_server import OfflineChatServer
import kgqa_nb.llm_batch  # LLMClient.chat_batch

WORLD = [(f'City{i}', 'country', f'Country{i % 7}') for i in range(40)]


def q(i, tag=''): return triples_lookup_messages(WORLD, (f'City{i}{tag}', 'country', '?'))


def billed_usd(srv, model='gpt-4o-mini', price=None):
    "What the server billed, at `price`, else the list price of the model that was asked for."
    price = price or model_price(model)
    return sum(api_cost(b['prompt_tokens'], b['completion_tokens'], price) * (BATCH_DISCOUNT if b['batch'] else 1) for b in srv.billed)


def client(srv, tmp_path, budget, model='gpt-4o-mini', **kw):
    return LLMClient('openai', model=model, base_url=srv.url, cache_dir=tmp_path / 'llm', ledger=tmp_path / 'calls.jsonl',
                     max_tokens=50, budget=budget, say=[].append, **kw)


@pytest.mark.parametrize('reply_model', [None, 'openai/gpt-4o-mini', 'gpt-4o-mini-2024-07-18', 'some-router-alias', 'gpt-4o'])
def test_the_run_stops_within_one_call_of_the_limit_whatever_model_answers(tmp_path, reply_model):
    "'gpt-4o' answers for 'gpt-4o-mini' at 17 times its price: 8 first calls in flight would pass the limit 3 times over."
    limit = 0.002
    price = higher_price(model_price('gpt-4o-mini'), model_price(reply_model or 'gpt-4o-mini'))   # the dearer name's price
    budget = SpendBudget.create(tmp_path / 'spend.json', limit)
    with OfflineChatServer(reply_model=reply_model) as srv:
        c = client(srv, tmp_path, budget, concurrency=8)
        worst = c.worst_cost(c.build_request(q(0)), price)
        with pytest.raises(SpendLimitError, match=r'--max-cost 0.002 is reached'):
            c.chat_many([q(i) for i in range(200)], return_exceptions=True)  # the limit is not an error a role may swallow
        late = len(srv.billed)
        with pytest.raises(SpendLimitError): c.chat(q(199, 'x'))             # stopped stays stopped
    billed, st = billed_usd(srv, price=price), budget.state()
    assert limit - worst <= billed <= limit                                  # within one call of the limit, never past it
    assert st['spent'] == pytest.approx(billed, rel=1e-9) and st['calls'] == late == len(srv.billed) and st['held'] == {}
    assert read_ledger(tmp_path / 'calls.jsonl')['cost_usd'] == pytest.approx(billed, abs=1e-5)  # the ledger priced every call


def test_a_reply_naming_a_cheaper_model_counts_at_the_price_asked_for_and_a_given_price_wins(tmp_path):
    """Asked for gpt-4o, answered as gpt-4o-mini: counted at gpt-4o's price. A run's own price for the model asked for (a
    local server) is the user's word, whatever list-priced name the server answers with."""
    budget = SpendBudget.create(tmp_path / 'spend.json', 1.0)
    with OfflineChatServer(reply_model='gpt-4o-mini') as srv:
        client(srv, tmp_path, budget, model='gpt-4o').chat_many([q(i) for i in range(10)])
    assert budget.state()['spent'] == pytest.approx(billed_usd(srv, 'gpt-4o'), rel=1e-9)
    assert billed_usd(srv, 'gpt-4o') > 10 * billed_usd(srv, 'gpt-4o-mini')
    assert read_ledger(tmp_path / 'calls.jsonl')['cost_usd'] == pytest.approx(billed_usd(srv, 'gpt-4o'), abs=1e-5)
    local = SpendBudget.create(tmp_path / 'local.json', 1.0, prices={'my-llama': [0, 0]})
    with OfflineChatServer(reply_model='gpt-4o') as srv:
        client(srv, tmp_path / 'local', local, model='my-llama').chat_many([q(i) for i in range(10)])
    assert local.state()['spent'] == 0 and local.state()['calls'] == len(srv.billed) == 10


def test_an_attempt_that_timed_out_counts_at_its_worst_case(tmp_path):
    "The stand-in answers (and bills) a hung request after the client gave up on it; the guard counts it, at its worst case."
    budget = SpendBudget.create(tmp_path / 'spend.json', 1.0)
    with OfflineChatServer(faults=['ok', 'timeout', 'timeout'], hang_s=1.0) as srv:
        c = client(srv, tmp_path, budget, timeout=0.3, max_retries=3, backoff_base=0.01)
        c.chat(q(1)); c.chat(q(2))                                           # warm, then two hung attempts and an answer
        for _ in range(600):                                                 # the hung requests finish on the server
            if len(srv.billed) == 4 and srv.inflight == 0: break
            threading.Event().wait(0.05)
    st, worst = budget.state(), c.worst_cost(c.build_request(q(2)), model_price('gpt-4o-mini'))
    assert len(srv.billed) == 4 and st['calls'] == 4 and st['held'] == {}    # every billed request counted
    one = [api_cost(b['prompt_tokens'], b['completion_tokens'], model_price('gpt-4o-mini')) for b in srv.billed]  # q(1), then three of q(2)
    assert st['spent'] == pytest.approx(one[0] + one[1] + 2 * worst, rel=1e-9) and st['spent'] >= billed_usd(srv)


def test_an_unknown_price_refuses_the_first_call_unless_a_price_is_given(tmp_path):
    budget = SpendBudget.create(tmp_path / 'spend.json', 5.0)
    with OfflineChatServer() as srv:
        with pytest.raises(SpendLimitError, match=r"price of model 'mystery-model' is unknown: set plan.prices.mystery-model"):
            client(srv, tmp_path, budget, model='mystery-model').chat(q(1))
        assert srv.requests == []                                             # nothing was sent
        client(srv, tmp_path / 'given', budget, model='mystery-model', price_per_mtok=(1.0, 2.0)).chat(q(1))
        priced = SpendBudget.create(tmp_path / 'priced.json', 5.0, prices={'mystery-model': [1.0, 2.0]})
        client(srv, tmp_path / 'run', priced, model='mystery-model').chat(q(2))
    assert len(srv.billed) == 2 and budget.state()['calls'] == priced.state()['calls'] == 1


def test_the_run_budget_is_found_through_the_environment(tmp_path, monkeypatch):
    "A notebook's client has no budget argument: `kgqa rerun --max-cost` names the run's file in $KGQA_SPEND_FILE."
    budget = SpendBudget.create(tmp_path / 'spend.json', 1.0)
    with OfflineChatServer() as srv:
        c = client(srv, tmp_path, None)
        c.chat(q(1)); assert budget.state()['calls'] == 0
        monkeypatch.setenv('KGQA_SPEND_FILE', str(budget.path))
        c.chat(q(2))
    assert budget.state()['calls'] == 1 and budget.state()['spent'] == pytest.approx(billed_usd(srv) / 2, rel=0.2)


def test_a_batch_that_could_pass_the_limit_is_not_submitted(tmp_path):
    budget = SpendBudget.create(tmp_path / "spend.json", 0.0003)
    with OfflineChatServer() as srv:
        c = client(srv, tmp_path, budget, batch_size=10)
        with pytest.raises(SpendLimitError, match='a batch of 10 requests could cost'):
            c.chat_batch([q(i) for i in range(30)], poll_s=0.01)
    assert srv.batch_creations == 0 and srv.billed == [] and budget.state()['held'] == {}


def test_batches_are_priced_at_submission_and_counted_once(tmp_path):
    budget = SpendBudget.create(tmp_path / 'spend.json', 1.0)
    with OfflineChatServer() as srv:
        c = client(srv, tmp_path, budget, batch_size=10)
        c.chat_batch([q(i) for i in range(25)], poll_s=0.01)
        c.chat_batch([q(i) for i in range(25)], poll_s=0.01)                  # all cached: nothing held, nothing counted
    st = budget.state()
    assert st['calls'] == len(srv.billed) == 25 and st['spent'] == pytest.approx(billed_usd(srv), rel=1e-9) and st['held'] == {}


def test_a_running_batch_is_cancelled_when_the_run_stops(tmp_path):
    "The batch holds its worst case; interactive calls then reach the limit; the stop cancels the batch, which billed nothing."
    budget = SpendBudget.create(tmp_path / 'spend.json', 0.0012, wait_s=0.2)
    out = {}
    with OfflineChatServer(hold_batches=True) as srv:
        def batch():
            try: out['batch'] = client(srv, tmp_path / 'b', budget).chat_batch([q(i, 'b') for i in range(10)], poll_s=0.02)
            except SpendLimitError as e: out['batch'] = e
        t = threading.Thread(target=batch); t.start()
        assert srv.batch_created.wait(60)
        c = client(srv, tmp_path / 'i', budget)
        with pytest.raises(SpendLimitError):
            for i in range(100): c.chat(q(i, 'i'))
        t.join(60)
    assert isinstance(out['batch'], SpendLimitError)
    assert srv.batches['batch_000001']['status'] == 'cancelled' and not [b for b in srv.billed if b['batch']]
    st = budget.state()
    assert st['spent'] == pytest.approx(billed_usd(srv), rel=1e-9) and st['spent'] <= 0.0012 and st['held'] == {}
    assert list((tmp_path / 'b' / 'llm' / 'batches').iterdir()) == []        # the cancelled job is closed: a rerun submits afresh
