"""What the host printed around a GPU crash, read into typed facts.

A host log is untrusted text of any size: a server's stderr, a kernel log, a
compute-sanitizer report, often several of them interleaved. `reader.py` opens each file
safely and reads a bounded tail of it; one pure parser per kind turns lines into facts
(`sglang.py`, `cudaerror.py`, `driver.py`, `sanitizer.py`), recognizing each kind by its
content, never by the file's name. No parser raises, whatever the bytes. This package knows
nothing of the dump; the join lives in `analysis/host/`, one module per kind.
"""
