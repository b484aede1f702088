"""The JSON report follows its published schema, for every fixture dump."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from postmortem.analysis.analyze import AnalyzeOptions, analyze_dump
from postmortem.analysis.fault import LocalizeOptions
from postmortem.report.context import SCHEMA, build_report
from postmortem.report.render import render
from tests.conftest import dump_paths
from tests.golden import GOLDEN

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "postmortem" / "report" / "report.schema.json"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schema_names_the_version_reports_carry(validator):
    assert validator.schema["$id"] == SCHEMA


@pytest.mark.parametrize("path", dump_paths(), ids=lambda p: p.name)
def test_every_dump_report_validates(path, validator):
    options = AnalyzeOptions(LocalizeOptions(disassemble=False), cuda_gdb=False)
    report = json.loads(render("analyze", build_report(analyze_dump(path, options)), "json"))
    validator.validate(report)


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.name)
def test_golden_reports_validate(golden, validator):
    validator.validate(json.loads(golden.read_text()))


def test_a_report_missing_a_field_is_rejected(validator):
    report = json.loads(sorted(GOLDEN.glob("*.json"))[0].read_text())
    del report["sites"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(report)
