"""The experiments, one module each: `NAME`, `TITLE`, `SETTINGS` (what a run may change),
`configurations(backend, quick)` and `measure(lab, backend, params) -> rows`, a function from a
backend and its parameters to tidy rows, run by `experiments/commands/runner.py`.

A measure stands on the harness alone: it reads nothing back, so its table and its figure are
its summary's (`experiments/readers/summaries/`), and what both name is `catalogue.py`'s.
"""
