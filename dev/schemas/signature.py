"""`postmortem.signature/1`: each line `postmortem signature --json` prints."""

from __future__ import annotations

from dev.schemas import shared
from dev.schemas.shared import Schema


def schema() -> Schema:
    properties = {
        "path": {"type": "string", "description": "The dump as given on the command line."},
        **shared.signature_properties(shared.FRAME),
    }
    return {
        "$schema": shared.DRAFT,
        "$id": "postmortem.signature/1",
        "title": "postmortem signature --json",
        "description": (
            "Each line `postmortem signature --json` prints: one dump's crash signature, with "
            "the components it was made of (the same object as a scan's JSON lines carry under "
            "`signature`, plus the dump's `path`). Keys are sorted. Fields are only added within "
            "a major version of this schema's id; `version` is the signature algorithm's, which "
            "changes the keys, not the fields."
        ),
        "type": "object",
        "additionalProperties": False,
        "required": sorted(properties),
        "properties": properties,
    }
