"""What a scan keeps between runs: the cache of rows and each signature's history."""
