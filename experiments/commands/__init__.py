"""What `python -m experiments <command>` and `lab.run` do, above every other room: `runs.py`
(run, chaos and soak from the command line: the folder, the exit status), `machine.py`
(backends, rivals), `runner.py` (every configuration of every backend measured, rows written,
figures drawn), `progress.py` (its bars), `overrides.py` (what a run may change of an
experiment's parameters). The parser itself is `experiments/__main__.py`.
"""
