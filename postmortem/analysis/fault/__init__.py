"""Where a fault is: each faulting PC in its function, SASS, inline chain, source, call stack."""
