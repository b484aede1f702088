"""The host logs joined to the dump, one module per log kind."""
