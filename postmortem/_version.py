"""The package's version, in a module of its own that imports nothing, so that every layer
can read it (`postmortem.__version__` re-exports it)."""

__version__ = "0.1.0"
