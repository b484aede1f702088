"""A structure-aware fuzz campaign of the coredump reader, the analysis and the reports.

`python -m tests.fuzz.campaign -n N` mutates the fixture dumps (`mutators.py`, `content.py`,
`compressed.py`), runs the pipeline of `pipeline.py` on every mutant in worker processes
with a time and a memory limit (`pool.py`, `worker.py`), and counts the outcomes.
"""
