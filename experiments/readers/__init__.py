"""What is read back from a run's folder, never running anything: `summaries/` (each
experiment's rows as a table and a figure), `tables.py` (those tables laid out), `figures.py`
(every backend drawn alike), `uncertainty.py` (the intervals), `reading.py` (what a notebook
calls: `lab.table`, `lab.figure`, ...), `report.py` (the tables as text), `findings.py` (the
findings page's paragraphs) and `choosing.py` (the design documents' tables, each cell measured).
"""
