"""The DAG executor and `run_durably` over the memory checkpointer."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from datetime import UTC, datetime, timedelta

import pytest

from durability.codec import Unencodable, as_dict
from durability.graph import CompiledGraph, Graph, run_durably
from durability.interfaces import Fenced, Pass, Recorded, claimed
from durability.memory import MemoryCheckpointer

_ids = itertools.count()


def workflow_id() -> str:
    return f"graph-test-{next(_ids)}"


class Clock:
    """A hand-moved clock, so a claim can lapse without waiting for it."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def one_pass(
    graph: CompiledGraph,
    checkpointer: MemoryCheckpointer,
    workflow: str,
    *inputs: object,
    output: str | None = None,
) -> object:
    """Claim, run the graph, and release, as a worker's pass would."""
    holder = await claimed(checkpointer, workflow)
    try:
        return await run_durably(graph, checkpointer, holder, *inputs, output=output)
    finally:
        await checkpointer.release(holder)


async def collect(stream: AsyncIterator[tuple[str, object]]) -> list[tuple[str, object]]:
    return [item async for item in stream]


async def value(result: object) -> object:
    return result


def constant(result: object) -> Callable[[], Awaitable[object]]:
    async def node() -> object:
        return result

    return node


# --- building ---------------------------------------------------------------------------------


def test_a_duplicate_node_key_is_refused() -> None:
    graph = Graph()
    graph.node("a", constant(1))
    with pytest.raises(ValueError, match="duplicate key 'a'"):
        graph.node("a", constant(2))


def test_a_node_named_like_an_input_is_refused() -> None:
    graph = Graph("order")
    with pytest.raises(ValueError, match="duplicate key 'order'"):
        graph.node("order", constant(1))


def test_an_input_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="named twice"):
        Graph("order", "order")


@pytest.mark.parametrize("key", ["", "inbox:00000000000000000001", "inbox:anything"])
def test_an_empty_or_inbox_key_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="node key"):
        Graph().node(key, constant(1))
    with pytest.raises(ValueError, match="graph input"):
        Graph(key)


def test_an_unknown_dependency_is_refused_when_compiled() -> None:
    graph = Graph("order")
    graph.node("charged", value, after=("ordr",))
    with pytest.raises(ValueError, match=r"'charged' depends on unknown key\(s\) \['ordr'\]"):
        graph.compile()


def test_a_cycle_is_refused_and_named() -> None:
    graph = Graph("seed")
    graph.node("start", value, after=("seed",))
    graph.node("a", lambda s, c: value(s), after=("start", "c"))
    graph.node("b", value, after=("a",))
    graph.node("c", value, after=("b",))
    graph.node("end", value, after=("c",))
    with pytest.raises(ValueError, match="cycle") as refused:
        graph.compile()
    # The cycle is named in running order, and nothing outside it is.
    message = str(refused.value)
    assert "cycle: a -> b -> c -> a " in message
    assert "start" not in message and "end" not in message


def test_a_node_depending_on_itself_is_a_cycle() -> None:
    graph = Graph()
    graph.node("a", value, after=("a",))
    with pytest.raises(ValueError, match="cycle: a -> a"):
        graph.compile()


def test_a_dependency_listed_twice_is_refused() -> None:
    graph = Graph("x")
    with pytest.raises(ValueError, match="more than once"):
        graph.node("a", lambda p, q: value(p), after=("x", "x"))


def test_after_as_a_bare_string_is_refused() -> None:
    graph = Graph("order")
    with pytest.raises(TypeError, match="not a str"):
        graph.node("a", value, after="order")


def test_a_function_that_cannot_take_its_dependencies_is_refused() -> None:
    graph = Graph("x", "y")
    with pytest.raises(ValueError, match="2 positional argument"):
        graph.node("a", value, after=("x", "y"))


def test_an_empty_graph_and_a_bad_limit_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        Graph("x").compile()
    graph = Graph()
    graph.node("a", constant(1))
    with pytest.raises(ValueError, match="limit"):
        graph.compile(limit=0)


def test_compiling_gives_keys_a_topological_order_and_sinks() -> None:
    graph = Graph("order")

    # Declared out of order on purpose: compile does not need dependencies declared first.
    @graph.node("receipt", after=("shipped", "charged"))
    async def receipt(shipped: object, charged: object) -> object:
        return [shipped, charged]

    @graph.node("shipped", after=("charged", "reserved"))
    async def ship(charged: object, reserved: object) -> object:
        return "shipped"

    graph.node("charged", value, after=("order",))
    graph.node("reserved", value, after=("order",))
    graph.node("audited", value, after=("order",))
    compiled = graph.compile()

    assert compiled.inputs == ("order",)
    assert compiled.keys == ("receipt", "shipped", "charged", "reserved", "audited")
    assert sorted(compiled.order) == sorted(compiled.keys)
    for key in compiled.keys:
        for dep in compiled.nodes[key].after:
            if dep in compiled.keys:
                assert compiled.order.index(dep) < compiled.order.index(key)
    assert compiled.sinks == ("receipt", "audited")


# --- streaming --------------------------------------------------------------------------------


async def test_at_most_limit_nodes_run_at_once() -> None:
    limit, total = 3, 10
    running = peak = 0
    full = asyncio.Event()

    async def node() -> object:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == limit:
            full.set()
        await full.wait()  # hold the first wave until the limit is reached
        for _ in range(5):
            await asyncio.sleep(0)
        running -= 1
        return None

    graph = Graph()
    for index in range(total):
        graph.node(f"n{index}", node)
    async with asyncio.timeout(5):  # a guard against a hang if the limit were never reached
        results = await collect(graph.compile(limit=limit).stream({}, {}))

    assert len(results) == total
    assert peak == limit  # reached, never passed


async def test_a_node_starts_only_after_its_dependencies_and_gets_them_in_after_order() -> None:
    finished: list[str] = []
    seen: dict[str, tuple[object, ...]] = {}

    def node(key: str, wait: int) -> Callable[..., Awaitable[object]]:
        async def run(*args: object) -> object:
            seen[key] = args
            assert all(dep in finished for dep in after[key])
            for _ in range(wait):
                await asyncio.sleep(0)
            finished.append(key)
            return f"{key}<{','.join(map(str, args))}>"

        return run

    after = {"a": (), "b": ("a",), "c": ("a",), "d": ("c", "b")}
    graph = Graph("x")
    graph.node("a", node("a", 3), after=("x",))
    graph.node("b", node("b", 1), after=after["b"])
    graph.node("c", node("c", 5), after=after["c"])
    graph.node("d", node("d", 0), after=after["d"])
    results = dict(await collect(graph.compile().stream({"x": 1}, {})))

    assert seen["d"] == ("c<a<1>>", "b<a<1>>")  # positional, in `after` order, not finish order
    assert results["d"] == "d<c<a<1>>,b<a<1>>>"
    assert finished.index("d") == 3


async def test_a_fast_node_is_yielded_before_a_slow_independent_one_finishes() -> None:
    release = asyncio.Event()

    async def slow() -> object:
        await release.wait()
        return "slow"

    graph = Graph()
    graph.node("slow", slow)  # declared first, so it also starts first
    graph.node("fast", constant("fast"))
    order: list[str] = []
    # The guard turns a stream that waited for every node before yielding into a failure, not
    # a hang: the slow node finishes only because the fast result was already handed out.
    async with asyncio.timeout(5), aclosing(graph.compile().stream({}, {})) as stream:
        async for key, _ in stream:
            order.append(key)
            release.set()

    assert order == ["fast", "slow"]


async def test_dependents_of_a_result_start_before_it_is_handed_out() -> None:
    started = asyncio.Event()

    async def dependent(a: object) -> object:
        started.set()
        return None

    graph = Graph()
    graph.node("a", constant(1))
    graph.node("b", dependent, after=("a",))
    async with asyncio.timeout(5), aclosing(graph.compile().stream({}, {})) as stream:
        async for key, _ in stream:
            if key == "a":
                # The consumer holds "a"; its dependent is already running meanwhile.
                await started.wait()


async def test_known_nodes_are_neither_run_nor_yielded_but_feed_their_dependents() -> None:
    calls: list[str] = []

    async def a() -> object:
        calls.append("a")
        return 1

    async def b(a_result: object) -> object:
        calls.append("b")
        return [a_result, 2]

    graph = Graph()
    graph.node("a", a)
    graph.node("b", b, after=("a",))
    results = await collect(graph.compile().stream({}, {"a": 41, "unrelated": 0}))

    assert calls == ["b"]
    assert results == [("b", [41, 2])]


async def test_missing_or_unknown_inputs_are_refused() -> None:
    graph = Graph("x")
    graph.node("a", value, after=("x",))
    compiled = graph.compile()
    with pytest.raises(ValueError, match="missing"):
        await collect(compiled.stream({}, {}))
    with pytest.raises(ValueError, match="unknown graph input"):
        await collect(compiled.stream({"x": 1, "y": 2}, {}))


async def test_a_failing_node_cancels_the_others_and_its_error_propagates_unchanged() -> None:
    cancelled = asyncio.Event()
    started = asyncio.Event()

    async def hangs() -> object:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return None

    async def fails() -> object:
        await started.wait()
        raise KeyError("boom")

    graph = Graph()
    graph.node("hangs", hangs)
    graph.node("fails", fails)
    graph.node("after", value, after=("fails",))
    with pytest.raises(KeyError, match="boom"):
        await collect(graph.compile().stream({}, {}))
    assert cancelled.is_set()


async def test_a_base_exception_from_a_node_is_not_wrapped() -> None:
    async def fenced() -> object:
        raise Fenced("wf", 7)

    graph = Graph()
    graph.node("a", fenced)
    with pytest.raises(Fenced) as raised:
        await collect(graph.compile().stream({}, {}))
    assert raised.value.token == 7


async def test_closing_the_stream_early_cancels_running_nodes() -> None:
    cancelled = asyncio.Event()

    async def hangs() -> object:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return None

    graph = Graph()
    graph.node("hangs", hangs)
    graph.node("quick", constant(1))
    async with aclosing(graph.compile().stream({}, {})) as stream:
        async for key, _ in stream:
            assert key == "quick"
            break
    assert cancelled.is_set()


async def test_settle_replaces_the_result_downstream() -> None:
    graph = Graph()
    graph.node("a", constant(1))
    graph.node("b", lambda a: value(a), after=("a",))

    async def settle(key: str, result: object) -> object:
        return f"settled {key}" if key == "a" else result

    results = await collect(graph.compile().stream({}, {}, settle=settle))
    assert results == [("a", "settled a"), ("b", "settled a")]


# --- run_durably ------------------------------------------------------------------------------


class Order:
    """A small order-fulfilment graph whose nodes count their own calls."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.fail_shipping = False
        graph = Graph("order")
        charge = self.counted("charged", lambda o: f"charge {as_dict(o)['id']}")
        graph.node("charged", charge, after=("order",))
        reserve = self.counted("reserved", lambda o: as_dict(o)["items"])
        graph.node("reserved", reserve, after=("order",))
        graph.node("shipped", self.ship, after=("charged", "reserved"))
        graph.node("receipt", self.counted("receipt", lambda s: {"shipped": s}), after=("shipped",))
        self.graph: CompiledGraph = graph.compile()

    def counted(
        self, key: str, make: Callable[[object], object]
    ) -> Callable[[object], Awaitable[object]]:
        async def node(arg: object) -> object:
            self.calls[key] = self.calls.get(key, 0) + 1
            return make(arg)

        return node

    async def ship(self, charged: object, reserved: object) -> object:
        self.calls["shipped"] = self.calls.get("shipped", 0) + 1
        if self.fail_shipping:
            raise RuntimeError("carrier down")
        return f"{charged} / {reserved}"


ORDER = {"id": "o-1", "items": ["sku-1", "sku-2"]}


async def test_run_durably_records_every_node_and_returns_the_sink() -> None:
    checkpointer = MemoryCheckpointer()
    workflow = workflow_id()
    flow = Order()
    holder = await claimed(checkpointer, workflow)

    result = await run_durably(flow.graph, checkpointer, holder, ORDER)

    assert result == {"shipped": "charge o-1 / ['sku-1', 'sku-2']"}
    recorded = await checkpointer.load(workflow)
    assert set(recorded) == {"charged", "reserved", "shipped", "receipt"}  # inputs not recorded
    assert recorded["receipt"] == result


async def test_a_finished_graph_rerun_performs_no_effect() -> None:
    checkpointer = MemoryCheckpointer()
    workflow = workflow_id()
    flow = Order()
    first = await one_pass(flow.graph, checkpointer, workflow, ORDER)
    calls = dict(flow.calls)

    again = await one_pass(flow.graph, checkpointer, workflow, ORDER)

    assert again == first
    assert flow.calls == calls == {"charged": 1, "reserved": 1, "shipped": 1, "receipt": 1}


async def test_results_recorded_before_a_failure_survive_and_only_the_rest_rerun() -> None:
    checkpointer = MemoryCheckpointer()
    workflow = workflow_id()
    flow = Order()
    flow.fail_shipping = True

    with pytest.raises(RuntimeError, match="carrier down"):
        await one_pass(flow.graph, checkpointer, workflow, ORDER)
    assert set(await checkpointer.load(workflow)) == {"charged", "reserved"}

    flow.fail_shipping = False
    await one_pass(flow.graph, checkpointer, workflow, ORDER)

    assert flow.calls == {"charged": 1, "reserved": 1, "shipped": 2, "receipt": 1}
    assert set(await checkpointer.load(workflow)) == {"charged", "reserved", "shipped", "receipt"}


async def test_a_node_that_fails_after_another_finished_leaves_the_finished_one_recorded() -> (
    None
):
    checkpointer = MemoryCheckpointer()
    workflow = workflow_id()
    calls = {"ok": 0, "flaky": 0}
    broken = True
    ok_done = asyncio.Event()

    async def ok() -> object:
        calls["ok"] += 1
        ok_done.set()
        return "ok"

    async def flaky() -> object:
        calls["flaky"] += 1
        await ok_done.wait()
        for _ in range(5):
            await asyncio.sleep(0)  # let the ok result settle first
        if broken:
            raise RuntimeError("flaky")
        return "fine"

    graph = Graph()
    graph.node("flaky", flaky)
    graph.node("ok", ok)
    compiled = graph.compile()

    with pytest.raises(RuntimeError, match="flaky"):
        await one_pass(compiled, checkpointer, workflow)
    assert await checkpointer.load(workflow) == {"ok": "ok"}

    broken = False
    result = await one_pass(compiled, checkpointer, workflow)
    assert result == {"flaky": "fine", "ok": "ok"}
    assert calls == {"ok": 1, "flaky": 2}


async def test_a_node_starts_only_once_its_dependency_is_recorded() -> None:
    checkpointer = MemoryCheckpointer()
    workflow = workflow_id()
    seen_at_start: dict[str, object] = {}

    async def later(a: object) -> object:
        seen_at_start.update(await checkpointer.load(workflow))
        return "later"

    graph = Graph()
    graph.node("a", constant("a"))
    graph.node("later", later, after=("a",))
    await one_pass(graph.compile(), checkpointer, workflow)

    assert seen_at_start == {"a": "a"}


async def test_dependents_get_the_recorded_winner_not_their_own_result() -> None:
    checkpointer = MemoryCheckpointer()
    workflow = workflow_id()

    async def a() -> object:
        # Somebody else records "a" first while this node is still computing its own.
        await checkpointer.supply(workflow, "a", "winner")
        return "loser"

    graph = Graph()
    graph.node("a", a)
    graph.node("b", lambda got: value(["b", got]), after=("a",))
    result = await one_pass(graph.compile(), checkpointer, workflow)

    assert result == ["b", "winner"]
    assert await checkpointer.load(workflow) == {"a": "winner", "b": ["b", "winner"]}


async def test_a_tuple_result_is_refused_on_the_first_pass() -> None:
    checkpointer = MemoryCheckpointer()
    workflow = workflow_id()
    graph = Graph()
    graph.node("pair", constant((1, 2)))

    with pytest.raises(Unencodable, match="tuple"):
        await one_pass(graph.compile(), checkpointer, workflow)
    assert await checkpointer.load(workflow) == {}


async def test_a_superseded_pass_stops_with_fenced_and_records_nothing_after() -> None:
    clock = Clock()
    checkpointer = MemoryCheckpointer(clock=clock)
    workflow = workflow_id()
    alive = timedelta(seconds=30)
    holder = await claimed(checkpointer, workflow, timedelta(minutes=5), alive)
    taken_over: list[Pass] = []
    downstream = 0
    c_cancelled = asyncio.Event()

    async def b(a: object) -> object:
        # This worker stalls past its lease; another takes the workflow over.
        clock.now += alive + timedelta(seconds=1)
        taken_over.append(await claimed(checkpointer, workflow))
        return "stale"

    async def c() -> object:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            c_cancelled.set()
            raise
        return None

    async def d(b_result: object) -> object:
        nonlocal downstream
        downstream += 1
        return "d"

    graph = Graph()
    graph.node("a", constant("a"))
    graph.node("b", b, after=("a",))
    graph.node("c", c)
    graph.node("d", d, after=("b",))

    # The guard turns a pass that was never fenced (so waits on `c` for ever) into a failure.
    async with asyncio.timeout(5):
        with pytest.raises(Fenced) as fenced:
            await run_durably(graph.compile(), checkpointer, holder)

    assert fenced.value.token == holder.token
    assert taken_over and taken_over[0].token > holder.token
    assert await checkpointer.load(workflow) == {"a": "a"}
    assert downstream == 0
    assert c_cancelled.is_set()


class CutOnce(MemoryCheckpointer):
    """Loses the reply of its first `cuts` records to a cut connection (the write landed)."""

    def __init__(self, cuts: int) -> None:
        super().__init__()
        self.cuts = cuts

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        recorded = await super().record(holder, key, value)
        if self.cuts:
            self.cuts -= 1
            raise ConnectionResetError("the reply was lost")
        return recorded


async def test_a_record_whose_reply_was_lost_is_tried_again_not_rolled_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import durability.faults

    monkeypatch.setattr(durability.faults, "FIRST", timedelta(milliseconds=1))
    checkpointer = CutOnce(cuts=2)
    workflow = workflow_id()
    charged: list[int] = []
    rolled_back: list[str] = []

    async def charge() -> object:
        charged.append(1)
        return "charged"

    graph = Graph()
    graph.node("charged", charge)
    graph.node("shipped", value, after=("charged",))

    try:
        result = await one_pass(graph.compile(), checkpointer, workflow)
    except Exception:  # a saga's net: it must not see the store's fault
        rolled_back.append("refund")
        raise
    assert result == "charged"
    assert charged == [1]
    assert rolled_back == []
    assert await checkpointer.load(workflow) == {"charged": "charged", "shipped": "charged"}


async def test_output_selection_and_input_binding() -> None:
    checkpointer = MemoryCheckpointer()
    graph = Graph("x", "y")
    graph.node("sum", lambda x, y: value(x + y), after=("x", "y"))
    graph.node("product", lambda x, y: value(x * y), after=("x", "y"))
    compiled = graph.compile()

    both = await one_pass(compiled, checkpointer, workflow_id(), 3, 4)
    assert both == {"sum": 7, "product": 12}
    one = await one_pass(compiled, checkpointer, workflow_id(), 3, 4, output="sum")
    assert one == 7

    holder = await claimed(checkpointer, workflow_id())
    with pytest.raises(TypeError, match="2 input"):
        await run_durably(compiled, checkpointer, holder, 3)
    with pytest.raises(ValueError, match="output 'x'"):
        await run_durably(compiled, checkpointer, holder, 3, 4, output="x")
    assert await checkpointer.load(holder.workflow) == {}
