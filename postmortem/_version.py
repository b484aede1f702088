"""The package's version, in a module of its own that imports nothing, so that every layer
can read it (`postmortem.__version__` re-exports it)."""

__version__ = "0.1.0"

DISTRIBUTION = "cuda-postmortem"
"""The name the package is built and installed under. It is not on the package index
(`postmortem` there is an unrelated project), so a hint never says `pip install
'cuda-postmortem[…]'`: it names the extra's own packages (`EXTRA_PACKAGES`), which are."""

EXTRA_PACKAGES = {
    "tools": "nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump",
    "remote": "fsspec",
    "dask": "'dask[distributed]'",
    "ray": "ray",
    "sentry": "sentry-sdk",
}
"""What each extra of pyproject.toml installs, as `pip install` takes it (a test keeps the two
alike)."""


def install_extra(extra: str) -> str:
    """The command that brings an extra's packages: ``pip install fsspec``."""
    return f"pip install {EXTRA_PACKAGES.get(extra, extra)}"
