"""The repository's known crashes: the file, its edits, and the marks it gives a scan."""
