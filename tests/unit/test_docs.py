"""The README and every page under `docs/` say what is true: each relative link and `#anchor`
resolves, each page is reachable from the README, each path into the repository it names in
code exists, each Python block runs as the complete program it shows, and each shell block is
valid shell whose commands exist and take the options it gives them.

A block that cannot run on its own (a notebook cell that runs the lab for minutes, an exporter
to a collector nobody runs here) says so where a reader sees it, in an HTML comment on the line
before it: `<!-- not run: why -->`. It is still compiled. Keep such blocks rare.

Python blocks run in a process of their own, from a scratch folder. A block that names a Redis
or Postgres URL uses the servers the test suite uses (127.0.0.1:6379, 127.0.0.1:5432 database
`test`) under a namespace or schema of its own; without them it skips, and fails under CI.
Shell blocks are not run: they start servers and take minutes. Each is checked by `bash -n`,
each command it names is asked for `--help` and must know every `--option` the block gives it,
every path into the repository it names must exist, and each `curl` to the example API must
name a method and path the API serves.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import shlex
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Pages whose links are checked too: the notes beside the saved A/B runs the pages cite.
NOTES = sorted((ROOT / "results").rglob("*.md"))
NOT_RUN = re.compile(r"^<!--\s*not run:\s*\S.*-->$")
FENCE = re.compile(r"^\s*(`{3,})\s*([\w+-]*)")  # in a list item too
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
#: Programs a shell block may name without a check beyond `bash -n`: the outside world's.
#: (`pytest --help` loads every plugin, seconds under load: its paths are checked, not its flags.)
UNCHECKED = {"curl", "sleep", "kill", "export", "cd", "pip", "git", "docker", "redis-cli", "psql",
             "pytest"}
#: The repository's top-level folders: a token starting with one is a path that must exist.
TOPS = ("durability/", "integration/", "experiments/", "tests/", "docs/", "notebooks/",
        "results/", "benchmarks/", "examples/")
SERVERS = {"redis://": ("127.0.0.1", 6379), "postgresql://": ("127.0.0.1", 5432)}


@dataclass(frozen=True, slots=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    not_run: bool

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text("utf-8").splitlines()
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        fence, language = opening.groups()
        end = number + 1
        while end < len(lines) and not lines[end].lstrip().startswith(fence):
            end += 1
        before = [line.strip() for line in lines[:number] if line.strip()]
        marked = bool(before) and NOT_RUN.match(before[-1]) is not None
        indent = len(lines[number]) - len(lines[number].lstrip())
        text = "\n".join(line[indent:] for line in lines[number + 1 : end]) + "\n"
        found.append(Block(page, number + 1, language.lower(), text, marked))
        number = end + 1
    return found


def outside(page: Path) -> list[str]:
    """The page's lines outside its code blocks."""
    kept, fenced = [], None
    for line in page.read_text("utf-8").splitlines():
        opening = FENCE.match(line)
        if fenced is None and opening is not None:
            fenced = opening.group(1)
        elif fenced is not None and line.lstrip().startswith(fenced):
            fenced = None
        elif fenced is None:
            kept.append(line)
    return kept


def prose(page: Path) -> str:
    """The page without its code blocks and inline code, where a link is a link."""
    return "\n".join(re.sub(r"`[^`]*`", "", line) for line in outside(page))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    made hyphens, a repeated heading numbered."""
    seen: dict[str, int] = {}
    for line in outside(page):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


ALL = [block for page in PAGES for block in blocks(page)]
PYTHON = [block for block in ALL if block.language in ("python", "py")]
SHELL = [block for block in ALL if block.language in ("sh", "bash", "shell", "console")]


def test_the_pages_hold_blocks_of_both_kinds_and_run_most() -> None:
    assert len(PAGES) >= 8 and len(PYTHON) >= 6 and len(SHELL) >= 6
    marked = [block.name for block in ALL if block.not_run]
    assert len(marked) <= len(ALL) // 3, f"too many blocks marked not run: {marked}"
    kinds = ("python", "py", "sh", "bash", "shell", "console", "text", "")
    unknown = [block.name for block in ALL if block.language not in kinds]
    assert not unknown, f"blocks in a language this test does not check: {unknown}"


@pytest.mark.parametrize("page", PAGES + NOTES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or ROOT not in (where, *where.parents):
            broken.append(f"{target} (no such file)")
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(f"{target} (no heading makes #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_page_under_docs_is_linked_from_the_readme_or_a_page_it_links() -> None:
    reached, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        for target in LINK.findall(prose(page)):
            where = (page.parent / target.partition("#")[0]).resolve()
            if where.suffix == ".md" and where.exists() and where.parent == ROOT / "docs":
                todo.append(where)
    assert not set(PAGES) - reached, f"pages no link reaches: {sorted(set(PAGES) - reached)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_path_into_the_repository_a_page_names_exists(page: Path) -> None:
    named = {path for path in re.findall(r"`([\w./-]+)`", page.read_text("utf-8"))
             if path.startswith(TOPS)}
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"{page.relative_to(ROOT)} names what is not there: {missing}"


def test_a_block_marked_not_run_still_compiles() -> None:
    for block in PYTHON:
        if block.not_run:  # a notebook cell may await at its top level
            compile(block.text, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("block", [b for b in PYTHON if not b.not_run], ids=lambda b: b.name)
def test_a_python_block_runs_as_the_program_it_shows(block: Block, tmp_path: Path) -> None:
    for scheme, (host, port) in SERVERS.items():
        if scheme in block.text and not answers(host, port):
            message = f"{block.name} needs the server at {host}:{port}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
    program = tmp_path / "block.py"
    program.write_text(block.text, "utf-8")
    done = subprocess.run([sys.executable, str(program)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (
        f"{block.name} failed: make it a complete program, or mark it `<!-- not run: why -->`"
        f"\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )


def commands(text: str) -> list[list[str]]:
    """A shell block's commands as words: backslash continuations joined, and an indented
    line taken as the previous command's continuation (a usage synopsis), comments dropped."""
    joined: list[str] = []
    for line in text.replace("\\\n", " ").splitlines():
        if line[:1].isspace() and joined and line.strip():
            joined[-1] += " " + line.strip()
        elif line.strip():
            joined.append(line)
    words = [shlex.split(line, comments=True) for line in joined]
    return [[word for word in line if word != "&"] for line in words if line]


@functools.cache
def helped(*program: str) -> str:
    """What `program --help` prints; it must exit 0."""
    done = subprocess.run([*program, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"{' '.join(program)} --help: {done.stderr[-2000:]}"
    return done.stdout


def dev_commands() -> str:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.__doc__)


def checked(words: list[str]) -> tuple[tuple[str, ...], str] | None:
    """The program a command runs, as argv to ask for `--help`, and what that help says; None
    for a program of the outside world."""
    while words and re.match(r"^\w+=", words[0]):
        words = words[1:]  # VARIABLE=value before the command
    head = words[0]
    bin_ = Path(sys.executable).parent
    if head in ("python", "python3") and words[1:2] == ["dev.py"]:
        return None if len(words) < 3 else (("dev.py", words[2]), dev_commands())
    if head in ("python", "python3") and words[1:3] == ["-m", "experiments"]:
        program = (sys.executable, "-m", "experiments", *words[3:4])
        return program, helped(*program)
    if head in ("durability", "durability-api", "durability-worker"):
        sub = words[1:2] if head == "durability" and words[1:2] and words[1][0] != "-" else []
        return (head, *sub), helped(str(bin_ / head), *sub)
    assert head in UNCHECKED, (
        f"a shell block runs {head!r}, which this test neither checks nor lists in UNCHECKED")
    return None


@functools.cache
def routes() -> list[tuple[re.Pattern[str], frozenset[str]]]:
    """The example API's routes, as the service page's `curl` calls must meet them."""
    from durability import MemoryCheckpointer, MemoryScheduler, SplitDurable
    from integration.api import make_app

    app = make_app(SplitDurable(MemoryCheckpointer(), MemoryScheduler()))
    return [(route.path_regex, frozenset(route.methods)) for route in app.routes
            if hasattr(route, "path_regex") and hasattr(route, "methods")]


def answered(words: list[str]) -> str | None:
    """For a `curl` to the example API, what is wrong with the call (None when a route takes
    it): its method and path must be one the API serves."""
    urls = [word for word in words if re.match(r"^'?(http://)?localhost:8000", word)]
    if words[0] != "curl" or not urls:
        return None
    path = re.sub(r"^'?(http://)?localhost:8000", "", urls[0]).split("?")[0].rstrip("'") or "/"
    method = words[words.index("-X") + 1] if "-X" in words else "POST" if "-d" in words else "GET"
    if any(regex.match(path) and method in methods for regex, methods in routes()):
        return None
    return f"the API serves no {method} {path}"


def knows(helptext: str, word: str) -> bool:
    """Whether `helptext` names `word` whole (`--state` is not `--states`)."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", helptext) is not None


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.name)
def test_a_shell_block_is_valid_and_its_commands_take_its_options(block: Block) -> None:
    syntax = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
    assert syntax.returncode == 0, f"{block.name}: {syntax.stderr}"
    said = commands(block.text)
    with ThreadPoolExecutor(4) as pool:  # each `--help` is a process of its own: ask at once
        programs = list(pool.map(checked, said))
    for words, program in zip(said, programs, strict=True):
        if program is not None:
            argv, helptext = program
            if argv[0] == "dev.py":
                assert knows(helptext, f"python3 dev.py {argv[1]}"), f"{block.name}: no {argv}"
            flags = {flag for word in words for flag in re.findall(r"(?<![\w-])--[\w-]+", word)}
            unknown = sorted(flag for flag in flags if not knows(helptext, flag))
            assert not unknown, f"{block.name}: {' '.join(argv)} does not take {unknown}"
        wrong = answered(words)
        assert wrong is None, f"{block.name}: {wrong}"
        for word in words:
            path = word.strip("[]").split("=")[-1].split("::")[0]
            if path.startswith(TOPS) and not any(ch in path for ch in "*<>…"):
                assert (ROOT / path).exists(), f"{block.name}: {path} does not exist"
