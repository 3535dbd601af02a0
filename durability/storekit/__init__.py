"""What a store is built from but no caller of a store needs: batching a turn's calls
(`coalescing`), counting what was sent (`traffic`), ids kept in order (`sorted_ids`), and
what a store raises when it is not there to answer (`outage`). The stores import it; it
imports nothing of the library.

`durability.Traffic`, `Sent` and `Counted` are the public face of `traffic`.
"""
