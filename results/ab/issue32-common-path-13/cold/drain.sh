#!/usr/bin/env bash
# A cold drain: N one-step workflows loaded into a new database, then PROCS new worker
# processes started together work them off. Prints one line: the rate over the span from the
# first pass start to the last outcome, the span, the first start after START_AT (ms), the
# workers' CPU (ms), the server's (ms, every process of the server, from START_AT to the end)
# and how long before START_AT the last process had its store open (ms; DELAY, 3 s, after the
# load: negative, the opening overlapped the drain).
#
#     drain.sh TREE N PROCS DATADIR URL    (URL: a database of the server at DATADIR, which this
#                                           drops and creates again; TREE has its own .venv)
set -euo pipefail
tree=$1; n=$2; procs=$3; data=$4; url=$5
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
db=${url##*/}; admin=${url%/*}/postgres
psql "$admin" -qAt -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
server_cpu() {  # ms of CPU of the postmaster, its reaped children and its live ones
  python3 - "$data/postmaster.pid" <<'PY'
import os, sys
pm = int(open(sys.argv[1]).readline())
def fields(pid): return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
ticks = sum(int(x) for x in fields(pm)[11:15])
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        f = fields(pid)
    except OSError:
        continue
    if int(f[1]) == pm:
        ticks += int(f[11]) + int(f[12])
print(ticks * 1000 // os.sysconf("SC_CLK_TCK"))
PY
}
q=q$RANDOM
(cd "$tree" && .venv/bin/python "$here/drain.py" load "$url" "$q" "$n")
start=$(python3 -c "import time; print(time.time() + ${DELAY:-3})")  # every store open by then
(python3 -c "import time; time.sleep(max(0, $start - time.time()))"; server_cpu > "$scratch/s0") &
for ((i = 0; i < procs; i++)); do
  (cd "$tree" && .venv/bin/python "$here/drain.py" work "$url" "$q" "$start" "$n" "$scratch" \
      > "$scratch/out.$i" 2>/dev/null) &
done
wait
s1=$(server_cpu)
python3 - "$scratch" "$procs" "$((s1 - $(cat "$scratch/s0")))" <<'PY'
import json, sys
scratch, procs, server = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(open(f"{scratch}/out.{i}").read()) for i in range(procs)]
passes = sum(r["passes"] for r in rows)
first, last = min(r["first"] for r in rows), max(r["last"] for r in rows)
print(f"passes={passes} rate={passes / (last - first):.0f} span={(last - first) * 1e3:.1f}"
      f" first={(first - rows[0]['start_at']) * 1e3:.1f}"
      f" cpu={sum(r['cpu'] for r in rows) * 1e3:.1f} server={server}"
      f" ahead={min(r['ahead'] for r in rows) * 1e3:.0f}")
PY
rm -rf "$scratch"
