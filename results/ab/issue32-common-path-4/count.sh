#!/bin/sh
# The third sitting's count, unchanged (`../issue32-common-path-3/count.sh`), run from this
# directory so it counts this folder's `one_step.py`, itself the third sitting's workload.
# Usage: sh count.sh <label> <tree> <python> [N]   (run from this directory)
exec sh "$(dirname "$0")/../issue32-common-path-3/count.sh" "$@"
