"""Medians of the per-pass reports in a folder (`<side><round>.json`, perpass.py's), side by
side, and each statement's execution time and buffers.

    python reduce.py perpass
"""

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

runs: dict[str, list[dict]] = defaultdict(list)
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    side = re.match(r"([a-z]+)\d+$", path.stem)
    if side:
        runs[side.group(1)].append(json.loads(path.read_text()))
KEYS = ("worker_cpu_ms_per_pass", "server_backend_cpu_ms_per_pass", "exec_ms_per_pass",
        "wall_ms_per_pass")
print("| per pass (median of runs) | " + " | ".join(runs) + " |")
print("|---|" + "---|" * len(runs))
for key in KEYS:
    cells = [f"{statistics.median(r[key] for r in rows):.4f}" for rows in runs.values()]
    print(f"| {key} | " + " | ".join(cells) + " |")
print()
for side, rows in runs.items():
    names = sorted({n for r in rows for n, v in r["statements_per_pass"].items()
                    if v["calls"] > 0.02})
    for name in names:
        stats = [r["statements_per_pass"].get(name, {}) for r in rows]
        ms = statistics.median(s.get("total_exec_time", 0.0) for s in stats)
        hit = statistics.median(s.get("shared_blks_hit", 0.0) for s in stats)
        print(f"{side:5} {name:34} exec {ms:.4f} ms  buffers hit {hit:.2f}")
