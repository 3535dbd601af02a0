"""The experiments, one module each: `NAME`, `TITLE`, `SETTINGS` (what a run may change),
`configurations(backend, quick)` and `measure(lab, backend, params) -> rows`, a function from a
backend and its parameters to tidy rows, run by `experiments/commands/runner.py`; and, for now,
what its rows say read back: `summary(frame)` and its figure, `draw(frame)`.
"""
