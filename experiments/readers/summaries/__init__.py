"""One module per experiment (and the soak), its rows read back: `summary(frame)`, a table per
configuration with each statistic's interval beside it, and `draw(frame)`, its figure. Found by
name (`figures.draw`, `tables.views`, `reading.table`), as the runner finds its measure.
"""
