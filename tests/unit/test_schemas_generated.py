"""The shipped JSON Schemas are what dev/schemas generates, and the checks that every JSON
output of the suite is validated by (tests/schemacheck.py) catch a document that breaks one."""

from __future__ import annotations

import json

import jsonschema
import pytest

from dev.schemas import ROOT, SCHEMAS, generate, shared
from postmortem.findings import FindingCode
from tests import schemacheck


@pytest.mark.parametrize("path", sorted(SCHEMAS))
def test_the_shipped_schema_is_what_the_generator_writes(path):
    # A difference means the file was edited by hand, or the source changed without
    # `make schemas` (python -m dev.schemas) being run.
    expected = generate()[ROOT / path]
    assert (ROOT / path).read_text(encoding="utf-8") == expected, (
        f"{path} is out of date: run `make schemas` and review the diff"
    )


@pytest.mark.parametrize("path", sorted(SCHEMAS))
def test_every_generated_schema_is_a_valid_2020_12_schema(path):
    schema = json.loads(generate()[ROOT / path])
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == shared.DRAFT


def test_the_generator_is_deterministic():
    assert generate() == generate()


def test_the_ids_stay_where_users_find_them():
    ids = {path: json.loads(text)["$id"] for path, text in generate().items()}
    assert {path.relative_to(ROOT).as_posix(): i for path, i in ids.items()} == {
        "postmortem/report/report.schema.json": "postmortem.report/1",
        "postmortem/report/incident.schema.json": "postmortem.incident/1",
        "postmortem/report/info.schema.json": "postmortem.info/1",
        "postmortem/scan/signature.schema.json": "postmortem.signature/1",
        "postmortem/scan/scan-line.schema.json": "postmortem.scan-line/1",
    }


def _enums_named(node, name, found):
    if isinstance(node, dict):
        for key, value in (node.get("properties") or {}).items():
            if key == name and isinstance(value, dict) and "enum" in value:
                found.append(value["enum"])
        for value in node.values():
            _enums_named(value, name, found)
    elif isinstance(node, list):
        for value in node:
            _enums_named(value, name, found)
    return found


def test_a_closed_set_is_the_same_in_every_schema_that_lists_it():
    # The incident schema once lacked the report's `barrier: "mbarrier"`.
    documents = [json.loads(text) for text in generate().values()]
    for name in ("barrier", "problem_class", "severity", "codec"):
        found = [enum for document in documents for enum in _enums_named(document, name, [])]
        assert len(found) >= 2, name
        assert all(enum == found[0] for enum in found), name
    barriers = _enums_named(documents[0], "barrier", [])
    assert "mbarrier" in barriers[0]


def test_the_hang_finding_codes_are_finding_codes():
    report = json.loads(generate()[ROOT / "postmortem/report/report.schema.json"])
    hang = report["properties"]["hang"]["properties"]["findings"]["items"]
    assert set(hang["properties"]["code"]["enum"]) <= {code.value for code in FindingCode}


def test_a_json_output_that_breaks_its_schema_is_reported_with_its_path():
    # GIVEN a signature line whose offset_hex is not hex
    line = json.loads(json.dumps({"path": "a.nvcudmp", "offset_hex": "12"}))
    # WHEN it is checked as the suite checks every output
    schemacheck.check("signature", json.dumps(line) + "\n")
    found = list(schemacheck._violations)
    schemacheck._violations.clear()
    # THEN one violation names the schema file, its id and where the value is
    assert len(found) == 1
    assert "postmortem/scan/signature.schema.json (postmortem.signature/1)" in found[0]
    assert " at $" in found[0]
