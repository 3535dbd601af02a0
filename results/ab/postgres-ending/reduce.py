"""The per-pass table of a `run.sh` folder: each side's median over its rounds.

    python reduce.py <folder>       (prints the Markdown tables the README quotes)
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def _read(path: Path) -> dict[str, object]:
    text = path.read_text()
    return dict(json.loads(text[text.index("{"):]))


def main(folder: Path) -> None:
    sides: dict[str, list[dict[str, object]]] = {}
    profiled: dict[str, list[dict[str, object]]] = {}
    for path in sorted(folder.glob("*.json")):
        found = re.fullmatch(r"([a-z]+)(\d+)(-profile)?", path.stem)
        if found is None:
            continue
        into = profiled if found.group(3) else sides
        into.setdefault(found.group(1), []).append(_read(path))
    order = [s for s in ("old", "main", "hack", "branch") if s in sides]

    def med(side: str, pick: object) -> float:
        return statistics.median(pick(run) for run in sides[side])  # type: ignore[operator]

    rows = [
        ("worker CPU ms a pass", lambda r: r["worker_cpu_ms_per_pass"]),
        ("server backends' CPU ms a pass", lambda r: r["server_backend_cpu_ms_per_pass"]),
        ("server execution ms a pass (pg_stat_statements)", lambda r: r["exec_ms_per_pass"]),
        ("statements a pass", lambda r: sum(v["calls"] for v in r["statements_per_pass"].values())),
        ("round trips a pass", lambda r: r["round_trips_per_pass"]),
        ("WAL bytes a pass (statements)",
         lambda r: sum(v["wal_bytes"] for v in r["statements_per_pass"].values())),
        ("WAL records a pass (statements)",
         lambda r: sum(v["wal_records"] for v in r["statements_per_pass"].values())),
        ("buffers hit a pass (statements)",
         lambda r: sum(v["shared_blks_hit"] for v in r["statements_per_pass"].values())),
    ]
    print(f"| per pass (median of {min(len(v) for v in sides.values())} runs) | "
          + " | ".join(order) + " |")
    print("|---|" + "---|" * len(order))
    for label, pick in rows:
        print(f"| {label} | " + " | ".join(f"{med(s, pick):.4g}" for s in order) + " |")
    if profiled:
        calls = {s: statistics.median(r["python_calls_per_pass"] for r in profiled[s])  # type: ignore[misc]
                 for s in order if s in profiled}
        print("| Python calls a pass (cProfile) | "
              + " | ".join(f"{calls[s]:.1f}" for s in order) + " |")
    print()
    print("| statement | side | calls a pass | exec ms a pass | rows | buffers hit | WAL records"
          " | WAL bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for side in order:
        names: dict[str, list[dict[str, float]]] = {}
        for run in sides[side]:
            for name, v in run["statements_per_pass"].items():  # type: ignore[attr-defined]
                if v["calls"] > 0.005:
                    names.setdefault(name, []).append(v)
        for name, vs in sorted(names.items()):
            m = {k: statistics.median(v[k] for v in vs) for k in vs[0]}
            print(f"| {name} | {side} | {m['calls']:.4f} | {m['total_exec_time']:.4f} | "
                  f"{m['rows']:.4f} | {m['shared_blks_hit']:.2f} | {m['wal_records']:.2f} | "
                  f"{m['wal_bytes']:.0f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
