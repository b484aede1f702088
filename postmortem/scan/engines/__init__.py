"""Where a scan's per-dump work runs: worker processes here, or a Dask or Ray cluster."""
