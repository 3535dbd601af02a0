"""What `python -m experiments run` and `lab.run` do, above every other room: `runner.py`
(every configuration of every backend measured, rows written, figures drawn), `progress.py`
(its bars), `overrides.py` (what a run may change of an experiment's parameters).
"""
