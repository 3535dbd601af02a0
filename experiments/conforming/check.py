"""The store contract, run on a backend from a notebook's cell: `check("my-set")` runs
`durability.testing`'s conformance suite (the scheduler's, the durable's with `work`, failures,
status and listing, the checkpointer's and the bounds') on the store a backend's opener opens,
and returns what passed, what failed and what was not run and why, readably.

The suite is pytest's, so it runs in a pytest of its own, in another process: a kernel's event
loop is already running, and pytest-asyncio needs its own. The tests are
`experiments/conforming/suite.py`, over places made as the lab makes them (a file, a Redis
namespace, a Postgres database of the run's own), removed after.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.harness.backends import BACKENDS, Backend
from experiments.refusals import BadInput

__all__ = ["NOT_RUN", "Conformance", "Outcome", "Seen", "check", "count"]

SUITE = Path(__file__).with_name("suite.py")
#: The contracts of `durability.testing.conformance` this never runs, and why.
NOT_RUN: tuple[tuple[str, str], ...] = (
    ("CheckpointerModel, SchedulerModel", "model-based (hypothesis state machines), minutes a "
     "store: a store's own test suite runs them"),
    ("StoreFault", "needs a fault made for real on the store's own terms (a connection "
     "killed, a file locked): a store's own test suite opts in"),
)
#: The environment variable that tells the suite which backend to open, and where.
SETTINGS = "LAB_CONFORMANCE"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One test of the contract: `contract` (Scheduler or Durable), its name, `passed`,
    `failed` or `skipped`, and why, in a line, if it did not pass."""

    contract: str
    test: str
    result: str
    why: str = ""
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Conformance:
    """What the conformance suite said of one backend; true when nothing failed."""

    backend: str
    opener: str
    # left out of the repr (a notebook's plain text of it): every test, and pytest's output,
    # which names the machine's paths; `str()` and the table say what was found
    outcomes: tuple[Outcome, ...] = field(repr=False)
    seconds: float = 0.0
    output: str = field(default="", repr=False)

    def count(self, result: str) -> int:
        return sum(1 for o in self.outcomes if o.result == result)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result == "failed"]

    def __bool__(self) -> bool:
        return bool(self.outcomes) and not self.failures

    def summary(self) -> str:
        """One line: how many of the contract's tests passed, failed and were skipped."""
        if not self.outcomes:
            return (f"{self.backend}: the conformance suite did not run: "
                    f"{self.output.strip().splitlines()[-1] if self.output.strip() else '?'}")
        verdict = "conforms" if self else "does not conform"
        return (f"{self.backend} ({self.opener}) {verdict}: {self.count('passed')} of "
                f"{len(self.outcomes)} tests of the contract passed, {self.count('failed')} "
                f"failed, {self.count('skipped')} skipped, in {self.seconds:.0f} s")

    def frame(self) -> Any:
        """Every test as a row: contract, test, result, why, seconds."""
        import pandas

        return pandas.DataFrame([{"contract": o.contract, "test": o.test, "result": o.result,
                                  "why": o.why, "seconds": round(o.seconds, 3)}
                                 for o in self.outcomes])

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  failed {o.contract}: {o.test}: {o.why}" for o in self.failures]
        lines += [f"  skipped {contract}: {why}" for contract, whys in self.skipped().items()
                  for why in whys]
        lines += [f"  not run {contract}: {why}" for contract, why in NOT_RUN]
        return "\n".join(lines)

    def skipped(self) -> dict[str, list[str]]:
        """Each contract's reasons for the tests it skipped, each reason once."""
        found: dict[str, list[str]] = {}
        for o in self.outcomes:
            if o.result == "skipped" and o.why not in found.setdefault(o.contract, []):
                found[o.contract].append(o.why)
        return {contract: whys for contract, whys in found.items() if whys}

    def _repr_markdown_(self) -> str:
        by = sorted({o.contract for o in self.outcomes})
        skipped = self.skipped()
        lines = [f"**{self.summary()}**", "",
                 "| contract | passed | failed | skipped | not run, or skipped, because |",
                 "|---|---|---|---|---|"]
        for contract in by:
            mine = [o for o in self.outcomes if o.contract == contract]
            counts = [sum(1 for o in mine if o.result == r) for r in ("passed", "failed",
                                                                       "skipped")]
            why = "; ".join(w.removeprefix("Skipped: ") for w in skipped.get(contract, []))
            lines.append(f"| {contract} | " + " | ".join(map(str, counts))
                         + f" | {why.replace('|', '/')} |")
        lines += [f"| {contract} | | | | not run: {why} |" for contract, why in NOT_RUN]
        if self.failures:
            lines += ["", "Failed:", ""]
            lines += [f"- `{o.contract}.{o.test}`: {o.why}" for o in self.failures]
        return "\n".join(lines)


#: Told how far a run is: (tests done, tests in all), once they are counted and as each ends.
Seen = Callable[[int, int], None]
#: A line pytest -v ends a test with, and the line saying how many it collected.
_ENDED = re.compile(r" (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_COLLECTED = re.compile(r"collected (\d+) items?(?: / \d+ deselected / (\d+) selected)?")


def check(backend: str | Backend, *, select: str | None = None, timeout: float = 900,
          progress: Seen | None = None) -> Conformance:
    """Run the conformance suite on `backend` (a name, registered or ours, or a `Backend`)
    and return what it found. `select` is a pytest `-k` expression to run some of it
    (`"Scheduler"`, `"not lease"`); `timeout` bounds the whole run in seconds; `progress` is
    told (done, in all) as each test ends.

    It needs what the suite needs: pytest, pytest-asyncio and hypothesis (the `dev` extra);
    a server backend needs its server, found where the lab finds one (`REDIS_URL`,
    `POSTGRES_URL`, or the default local port)."""
    chosen = _chosen(backend)
    tag = f"c{uuid.uuid4().hex[:6]}"
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lab-conformance-") as folder, \
            _base(chosen, tag) as base:
        scratch = Path(folder)
        report = scratch / "report.xml"
        command, env = _pytest(chosen, scratch, base, tag, select)
        command += ["-v", f"--junitxml={report}", "-o", "junit_family=xunit1"]
        said = _follow(command, env, scratch, timeout, progress)
        outcomes = tuple(_outcomes(report)) if report.exists() else ()
    return Conformance(chosen.name, chosen.opener, outcomes,
                       round(time.perf_counter() - began, 1), said)


def count(backend: str | Backend, select: str | None = None) -> int:
    """How many tests `check` would run on `backend` (collected, not run)."""
    chosen = _chosen(backend)
    with tempfile.TemporaryDirectory(prefix="lab-conformance-") as folder:
        command, env = _pytest(chosen, Path(folder), "", "c0", select)
        done = subprocess.run([*command, "--collect-only", "-q"], env=env, capture_output=True,
                              text=True, cwd=folder, timeout=300)
    found = re.search(r"(\d+) tests? collected", done.stdout)
    if found is None:
        raise RuntimeError(f"the suite collected nothing: {done.stdout[-500:]}")
    return int(found.group(1))


def _chosen(backend: str | Backend) -> Backend:
    chosen = BACKENDS[backend] if isinstance(backend, str) and backend in BACKENDS else backend
    if not isinstance(chosen, Backend):
        raise BadInput(f"no backend {backend!r}; register it first, or choose from "
                       f"{', '.join(BACKENDS)}")
    if chosen.rival is not None:
        raise BadInput(f"{chosen.name} is a rival job queue: the contract is a durable "
                       "store's (a checkpoint and a scheduler), which it is not")
    missing = [m for m in ("pytest", "pytest_asyncio", "hypothesis")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(f"the conformance suite needs {', '.join(missing)}: install the "
                           "project's dev extra (pip install -e '.[dev]')")
    return chosen


def _pytest(chosen: Backend, scratch: Path, base: str, tag: str, select: str | None
            ) -> tuple[list[str], dict[str, str]]:
    """The pytest command running the suite on `chosen` in `scratch`, and its environment."""
    (scratch / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    settings = {"name": chosen.name, "opener": chosen.opener, "path": chosen.path,
                "store": chosen.store, "server": chosen.server, "options": chosen.options,
                "base": base, "tag": tag, "directory": str(scratch)}
    command = [sys.executable, "-m", "pytest", str(SUITE), "-c", str(scratch / "pytest.ini"),
               "--rootdir", str(scratch), "-p", "no:cacheprovider", "-rN", "--color=no",
               "--import-mode=importlib"]
    if select:
        command += ["-k", select]
    env = {**os.environ, SETTINGS: json.dumps(settings), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(
               p for p in (str(SUITE.parents[2]), chosen.path, os.environ.get("PYTHONPATH"))
               if p)}
    return command, env


def _follow(command: list[str], env: dict[str, str], scratch: Path, timeout: float,
            progress: Seen | None) -> str:
    """Run `command`, telling `progress` as each test ends; what it printed. Past `timeout`
    seconds it is killed (and the tests not run are missing from the report)."""
    running = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=str(scratch))
    stop = threading.Timer(timeout, running.kill)
    stop.start()
    lines, done, total = [], 0, 0
    try:
        assert running.stdout is not None
        for line in running.stdout:
            lines.append(line)
            collected = _COLLECTED.search(line)
            if collected and not total:
                total = int(collected.group(2) or collected.group(1))
                if progress is not None:
                    progress(0, total)
            elif _ENDED.search(line):
                done += 1
                if progress is not None:
                    progress(done, max(total, done))
        running.wait()
    finally:
        stop.cancel()
    return "".join(lines)


def _outcomes(report: Path) -> Iterator[Outcome]:
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        contract = case.get("classname", "").rpartition(".")[2].removeprefix("Test")
        result, why = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                result = "skipped" if kind == "skipped" else "failed"
                why = " ".join((found.get("message") or found.text or "").split())[:300]
                break
        yield Outcome(contract, case.get("name", "?"), result, why,
                      float(case.get("time") or 0))


@contextlib.contextmanager
def _base(backend: Backend, tag: str) -> Iterator[str]:
    """The base URL the suite's places go under: none for memory and SQLite; a Redis found as
    the lab finds one (its namespaces `lab-<tag>...` removed after); a Postgres database of
    this run's own, dropped after."""
    if backend.server is None:
        yield ""
        return
    from experiments.harness.servers import Servers

    with Servers(("url", "port")) as servers:
        server = servers.get(backend.server)
        if server is None:
            reasons = "; ".join(servers.reasons.get(backend.server, []))
            raise RuntimeError(f"{backend.name} needs a {backend.server} server: {reasons}")
        if server.kind == "postgres":
            import psycopg

            database = f"lab_{tag}"
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
            try:
                yield f"{server.url.rsplit('/', 1)[0]}/{database}"
            finally:
                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            return
        try:
            yield server.url
        finally:
            _forget_redis(server.url, tag, cluster=server.kind == "cluster")


def _forget_redis(url: str, tag: str, *, cluster: bool) -> None:
    """Delete the keys of the namespaces `lab-<tag>...` the suite wrote, and nothing else."""
    import redis
    import redis.cluster

    client: Any = (redis.cluster.RedisCluster.from_url(url) if cluster
                   else redis.Redis.from_url(url))
    try:
        for key in client.scan_iter(match=f"*lab-{tag}*", count=1000):
            client.unlink(key)
    finally:
        client.close()
