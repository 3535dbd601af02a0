"""The store contract run on one backend, ours or one registered (`lab.conformance(name)`):
`check.py` runs it in a pytest of its own and reads the report back, `suite.py` is the pytest
file (`durability.testing`'s contracts over the backend's opener), `kits.py` what two of those
contracts need beyond a store (an effect the store performs, the store with nothing behind it).
"""
