"""The notebooks in `notebooks/`, written from Python and executed so they are committed with
their outputs: `notebooks.py` the reading ones (a question, a figure, a table, an answer from
the numbers), `workbooks.py` the ones that run the lab (your own scheduler, your own run).
"""
