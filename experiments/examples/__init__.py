"""Schedulers of someone's own, for the lab to run beside ours: `steady_sqlite`, the one
`notebooks/your-own-scheduler.ipynb` writes, checks and measures."""
