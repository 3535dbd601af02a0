"""The fault runs, each a command of its own rather than an experiment: `chaos.py` (kill
workers, cut connections, restart servers under load, then audit every workflow) and `soak.py`
(one worker per store for an hour, a fault a minute: does anything grow that should not?).
They stand on the harness and write their rows as experiments do; `readers/` reads them.
"""
