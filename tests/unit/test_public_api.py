"""The top-level library API: every name in `postmortem.__all__` is there, `import postmortem`
stays light, and the version has one source."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import postmortem
from postmortem import _version

ROOT = Path(__file__).resolve().parents[2]
INIT = ROOT / "postmortem" / "__init__.py"


def _type_checking_imports() -> dict[str, str]:
    """name: module, for the imports under `if TYPE_CHECKING:` in postmortem/__init__.py."""
    found: dict[str, str] = {}
    for node in ast.parse(INIT.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for child in node.body:
                assert isinstance(child, ast.ImportFrom) and child.module, ast.unparse(child)
                found |= {alias.name: child.module for alias in child.names}
    return found


@pytest.mark.parametrize("name", postmortem.__all__)
def test_every_public_name_resolves(name):
    assert getattr(postmortem, name) is not None
    assert name in dir(postmortem)


def test_lazy_names_are_the_defining_modules_own_and_typed_alike():
    # GIVEN the names imported on first use, and those mypy sees under TYPE_CHECKING
    lazy = postmortem._LAZY
    # THEN both tables agree, and each name is the very object its module defines
    assert _type_checking_imports() == lazy
    for name, module in lazy.items():
        assert getattr(postmortem, name) is getattr(importlib.import_module(module), name)
    assert set(lazy) <= set(postmortem.__all__)


def test_analysis_api_is_exported():
    from postmortem.analysis.analyze import Analysis, AnalyzeOptions, analyze_dump

    assert postmortem.analyze_dump is analyze_dump
    assert postmortem.AnalyzeOptions is AnalyzeOptions
    assert postmortem.Analysis is Analysis


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'analyse_dump'"):
        _ = postmortem.analyse_dump


def test_import_postmortem_loads_neither_numpy_nor_the_reader_nor_the_analysis():
    # GIVEN a fresh interpreter
    code = "import sys, postmortem; print(' '.join(sorted(sys.modules)))"
    # WHEN it imports the package
    loaded = set(subprocess.check_output([sys.executable, "-c", code], text=True).split())
    # THEN only the errors and the version came with it
    assert {m for m in loaded if m.startswith("postmortem")} == {
        "postmortem", "postmortem._version", "postmortem.errors"
    }  # fmt: skip
    assert "numpy" not in loaded


def test_version_has_one_source_and_matches_the_project_metadata():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    declared = re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE)
    assert declared is not None
    assert postmortem.__version__ == _version.__version__ == declared.group(1)
