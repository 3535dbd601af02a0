"""A small DAG of named async nodes (`Graph`, `CompiledGraph`), and `run_durably`, which
checkpoints one as it runs.

A graph knows every key up front, so everything it can get wrong about its shape is refused
before anything runs: that eager check is what it has over a stepwise body. `run_durably`
records every fresh result before anything downstream sees it, so a crash at any point loses at
most the nodes that were still running.

This executor is our own (the design documents build on a package that needs Python 3.14).
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar, overload

from durability.checks import check_key
from durability.faults import patiently
from durability.interfaces import Checkpointer
from durability.values import Pass, Recorded

#: A node: an async function taking its dependencies' results positionally, in `after` order.
NodeFn = Callable[..., Awaitable[object]]
F = TypeVar("F", bound=NodeFn)

#: What `stream` passes each fresh result through before anything downstream sees it; the
#: value it returns is the node's result from then on (for `run_durably`: the recorded winner).
Settle = Callable[[str, object], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Node:
    """One named step of a graph and the keys whose results it is called with, in order."""

    key: str
    fn: NodeFn
    after: tuple[str, ...]


def _check_name(kind: str, key: str) -> str:
    try:
        return check_key(key)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{kind}: {error}") from None


def _check_arity(key: str, fn: NodeFn, count: int) -> None:
    """Refuse a node whose function cannot take one positional argument per dependency."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no introspectable signature (some builtins): the call will say
    try:
        signature.bind(*range(count))
    except TypeError as error:
        raise ValueError(
            f"node {key!r} depends on {count} key(s), so its function is called with {count}"
            f" positional argument(s), which it cannot take: {error}"
        ) from None


class Graph:
    """A builder of named async nodes: named inputs, then nodes, each an async function of the
    results of the nodes (or inputs) it comes `after`.

    A node's function is called with the results of its dependencies as *positional*
    arguments, in the order they are listed in `after` (inputs count as dependencies). Keys
    are therefore free-form step keys, not identifiers: they are also the checkpoint's keys.

        graph = Graph("order")

        @graph.node("charged", after=("order",))
        async def charge(order: dict[str, object]) -> str: ...

    Everything a graph can get wrong about its shape is refused with a `ValueError` before
    anything runs: duplicate, empty and reserved (inbox- or engine-prefixed) keys by `node`;
    unknown dependencies and cycles by `compile`, so nodes may be declared in any order.
    """

    __slots__ = ("_inputs", "_nodes")

    def __init__(self, *inputs: str) -> None:
        names: list[str] = []
        for name in inputs:
            _check_name("graph input", name)
            if name in names:
                raise ValueError(f"graph input {name!r} is named twice")
            names.append(name)
        self._inputs = tuple(names)
        self._nodes: dict[str, Node] = {}

    @property
    def inputs(self) -> tuple[str, ...]:
        return self._inputs

    @overload
    def node(self, key: str, fn: F, *, after: Iterable[str] = ()) -> F: ...

    @overload
    def node(self, key: str, *, after: Iterable[str] = ()) -> Callable[[F], F]: ...

    def node(
        self, key: str, fn: F | None = None, *, after: Iterable[str] = ()
    ) -> F | Callable[[F], F]:
        """Add node `key` running `fn` after `after`; without `fn`, a decorator that does.

        Returns the function unchanged, so a decorated function is still callable directly.
        """
        if isinstance(after, str):
            # A bare string would be taken as a sequence of one-letter keys.
            raise TypeError(f"node {key!r}: after must be a collection of keys, not a str")
        deps = tuple(after)

        def add(function: F) -> F:
            _check_name("node key", key)
            if key in self._nodes or key in self._inputs:
                raise ValueError(f"duplicate key {key!r}: it already names a node or input")
            for dep in deps:
                if not isinstance(dep, str):
                    raise TypeError(f"node {key!r}: dependency {dep!r} is not a str key")
            repeated = sorted({dep for dep in deps if deps.count(dep) > 1})
            if repeated:
                raise ValueError(f"node {key!r} lists {repeated} more than once in after")
            if not callable(function):
                raise TypeError(f"node {key!r}: {function!r} is not callable")
            _check_arity(key, function, len(deps))
            self._nodes[key] = Node(key, function, deps)
            return function

        if fn is None:
            return add
        return add(fn)

    def compile(self, limit: int = 8) -> CompiledGraph:
        """Check the whole shape and freeze it; `limit` bounds how many nodes run at once."""
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit must be an int, not {type(limit).__name__}")
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if not self._nodes:
            raise ValueError("a graph needs at least one node")
        known = set(self._inputs) | set(self._nodes)
        for node in self._nodes.values():
            unknown = [dep for dep in node.after if dep not in known]
            if unknown:
                raise ValueError(f"node {node.key!r} depends on unknown key(s) {unknown}")
        cycle = _find_cycle(self._nodes)
        if cycle:
            raise ValueError(
                f"the graph has a cycle: {' -> '.join(cycle)} (each must run before the next)"
            )
        return CompiledGraph(self._inputs, dict(self._nodes), limit)


def _find_cycle(nodes: Mapping[str, Node]) -> list[str] | None:
    """A cycle as a closed path of keys (`[a, b, a]`), or `None`. Depth-first, iterative, so a
    long chain cannot hit the recursion limit."""
    done: set[str] = set()
    for root in nodes:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        edges = [iter(nodes[root].after)]
        while edges:
            dep = next(edges[-1], None)
            if dep is None:
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                edges.pop()
                continue
            if dep not in nodes or dep in done:
                continue  # an input, or a node already known to lead to no cycle
            if dep in on_path:
                # `path` runs from dependents to dependencies; report it in running order.
                loop = [*path[path.index(dep) :], dep]
                return loop[::-1]
            path.append(dep)
            on_path.add(dep)
            edges.append(iter(nodes[dep].after))
    return None


def _topological(nodes: Mapping[str, Node]) -> tuple[str, ...]:
    """Every key after its dependencies; ties keep declaration order (so runs are repeatable)."""
    position = {key: index for index, key in enumerate(nodes)}
    unmet = {key: sum(dep in nodes for dep in node.after) for key, node in nodes.items()}
    dependents: dict[str, list[str]] = {key: [] for key in nodes}
    for node in nodes.values():
        for dep in node.after:
            if dep in nodes:
                dependents[dep].append(node.key)
    ready = [(position[key], key) for key, count in unmet.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, key = heapq.heappop(ready)
        order.append(key)
        for child in dependents[key]:
            unmet[child] -= 1
            if unmet[child] == 0:
                heapq.heappush(ready, (position[child], child))
    return tuple(order)


async def _call(fn: NodeFn, args: tuple[object, ...]) -> object:
    return await fn(*args)


async def _stop(tasks: Iterable[asyncio.Task[object]]) -> None:
    """Cancel and wait for `tasks`, retrieving every outcome so none is logged as lost."""
    pending = list(tasks)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    for task in pending:
        if not task.cancelled():
            task.exception()


class CompiledGraph:
    """A checked, frozen graph that can be streamed any number of times: `stream` runs its
    nodes concurrently, at most `limit` at once, and yields each result as it settles."""

    __slots__ = ("_dependents", "_position", "inputs", "keys", "limit", "nodes", "order", "sinks")

    def __init__(self, inputs: tuple[str, ...], nodes: dict[str, Node], limit: int) -> None:
        self.inputs = inputs
        #: Node keys in declaration order (inputs are not nodes).
        self.keys = tuple(nodes)
        #: Node keys, each after everything it depends on.
        self.order = _topological(nodes)
        #: Nodes nothing depends on, in declaration order.
        self.sinks = tuple(
            key for key in nodes if not any(key in node.after for node in nodes.values())
        )
        self.limit = limit
        #: Every node by key, read-only.
        self.nodes: Mapping[str, Node] = MappingProxyType(nodes)
        self._position = {key: index for index, key in enumerate(self.order)}
        self._dependents: dict[str, tuple[str, ...]] = {
            key: tuple(other.key for other in nodes.values() if key in other.after)
            for key in nodes
        }

    async def stream(
        self,
        inputs: Mapping[str, object],
        known: Mapping[str, object],
        *,
        settle: Settle | None = None,
    ) -> AsyncGenerator[tuple[str, object], None]:
        """Run every node whose key is not in `known` and yield `(key, result)` as each settles.

        What a caller may rely on:

        - A node starts as soon as all its dependencies have a value (from `inputs`, `known`,
          or a settled node) and fewer than `limit` nodes are running; ready nodes start in
          topological order. Nodes in `known` never run and are not yielded; keys of `known`
          that are not nodes are ignored.
        - A finished result goes through `settle` (if given), one result at a time in the
          order nodes finish; what `settle` returns is the node's result from then on. No
          dependent starts before its dependencies have settled.
        - The dependents a result unblocks are started before it is yielded. While the
          consumer then holds that yield, running nodes keep running, but nothing else
          settles and nothing else starts until it asks for the next.
        - If a node or `settle` raises, every running node is cancelled and the exception
          propagates as it was raised (a `BaseException` such as `Fenced` included, never
          wrapped in a group). The same cancellation happens when the stream is closed early;
          close it deterministically with `contextlib.aclosing`.
        """
        missing = [name for name in self.inputs if name not in inputs]
        if missing:
            raise ValueError(f"missing graph input(s) {missing}")
        extra = sorted(set(inputs) - set(self.inputs))
        if extra:
            raise ValueError(f"unknown graph input(s) {extra}; the graph takes {self.inputs}")

        values: dict[str, object] = {name: inputs[name] for name in self.inputs}
        values.update((key, known[key]) for key in self.keys if key in known)
        unmet = {
            key: sum(dep not in values for dep in self.nodes[key].after)
            for key in self.order
            if key not in values
        }
        ready = [(self._position[key], key) for key, count in unmet.items() if count == 0]
        heapq.heapify(ready)
        running: dict[asyncio.Task[object], str] = {}

        def launch() -> None:
            while ready and len(running) < self.limit:
                _, key = heapq.heappop(ready)
                node = self.nodes[key]
                args = tuple(values[dep] for dep in node.after)
                task = asyncio.create_task(_call(node.fn, args), name=f"graph node {key}")
                running[task] = key

        try:
            launch()
            while running:
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                # Several may finish together; settle them in a repeatable order.
                for task in sorted(finished, key=lambda done: self._position[running[done]]):
                    key = running.pop(task)
                    result = task.result()  # re-raises the node's own exception, unchanged
                    if settle is not None:
                        result = await settle(key, result)
                    values[key] = result
                    for child in self._dependents[key]:
                        if child in unmet:
                            unmet[child] -= 1
                            if unmet[child] == 0:
                                heapq.heappush(ready, (self._position[child], child))
                    # Start what this result unblocked before handing it out, so dependents
                    # run while the consumer deals with it.
                    launch()
                    yield key, result
        finally:
            await _stop(running)


async def run_durably(
    graph: CompiledGraph,
    checkpointer: Checkpointer,
    holder: Pass,
    *inputs: object,
    output: str | None = None,
) -> object:
    """Run `graph` as one pass of `holder.workflow`, checkpointing each node's result.

    Inputs bind positionally to the graph's input names and are not recorded (they are the
    caller's). Nodes already recorded are not run; their recorded values feed their dependents.
    Each fresh result is recorded under its key before anything downstream sees it, and what a
    node's dependents (and the return value) get is the recorded winner, which is another
    pass's value if a racing pass recorded that key first. So a crash loses at most the nodes
    that were still running, and re-running a finished workflow performs no effect.

    A result the store's codec cannot bring back unchanged (a tuple through JSON) raises the
    codec's `Unencodable` on the first pass, from `record`. A pass whose claim is superseded or
    lapsed raises `Fenced` at its next record and records nothing more. A store that fails a
    write transiently is tried again, and past that raises `StoreDown`.

    Returns the result of `output`, by default of the graph's only sink, or, when the graph has
    several sinks, a dict of every sink's result.
    """
    if len(inputs) != len(graph.inputs):
        raise TypeError(
            f"the graph takes {len(graph.inputs)} input(s) {graph.inputs}, got {len(inputs)}"
        )
    if output is not None and output not in graph.keys:
        raise ValueError(f"output {output!r} is not a node of the graph ({graph.keys})")

    workflow = holder.workflow
    recorded = await patiently(checkpointer, workflow, lambda: checkpointer.load(workflow))
    results = {key: recorded[key] for key in graph.keys if key in recorded}

    async def settle(key: str, result: object) -> object:
        # A store that fails the write is tried again, then `StoreDown` (an
        # interruption): never a node failing, which would send a saga into its rollback.
        def write() -> Awaitable[Recorded]:
            return checkpointer.record(holder, key, result)

        return (await patiently(checkpointer, workflow, write)).value

    bound = dict(zip(graph.inputs, inputs, strict=True))
    async with aclosing(graph.stream(bound, results, settle=settle)) as stream:
        async for key, result in stream:
            results[key] = result

    if output is not None:
        return results[output]
    if len(graph.sinks) == 1:
        return results[graph.sinks[0]]
    return {key: results[key] for key in graph.sinks}
