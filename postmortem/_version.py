"""The package's version, in a module of its own that imports nothing, so that every layer
can read it (`postmortem.__version__` re-exports it)."""

__version__ = "0.1.0"

DISTRIBUTION = "cuda-postmortem"
"""The name the package is built and installed under (`pip install 'cuda-postmortem[tools]'`
adds an extra to an installed copy). `postmortem` on the package index is an unrelated
project; the import package and the command are `postmortem`."""
