"""One side of the A/B in README.md: arrivals a second, then passes a second, on the store a URL
names, from the tree this runs in (`PYTHONPATH`); the workload is `../redis-replicas/ab.py`'s.

    python one.py 'redis://127.0.0.1:PORT/0?cluster=on&shards=3&replicas=1&scheduler=stream' 2000
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "replicas_ab", Path(__file__).resolve().parent.parent / "redis-replicas" / "ab.py")
assert _spec is not None and _spec.loader is not None
_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ab)

if __name__ == "__main__":
    arrivals, passes = asyncio.run(_ab.one(sys.argv[1], int(sys.argv[2])))
    print(f"{arrivals:.0f},{passes:.0f}")
