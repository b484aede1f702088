"""One dump's work inside a scan worker: fingerprint, the lean analysis, the instruction at
the PC, the signature and the row."""
