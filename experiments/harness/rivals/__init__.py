"""The rivals' agents: one module per job queue people would pick instead of ours, each run as
`python -m experiments.harness.rivals.<name>` from the rivals' own virtualenv (`.venv-rivals`).

Each speaks `experiments.harness.protocol` as `experiments.harness.agent` does, through the
rival's public API only; what the five share (the lab's ops, the job bookkeeping) is `common`.
They import the standard library, `experiments.harness.protocol`, `common` and their own
queue, never `durability`.
"""
