"""Every closed set an option offers is an enum in the code that uses it; the command line
spells the choices out (so that --help imports click only), and must spell them the same."""

from __future__ import annotations

from enum import Enum

import click
import pytest

from postmortem.cli import analyze, scan
from postmortem.cli.common import ColorMode
from postmortem.scan.engines.choose import EngineName
from postmortem.scan.outputs.ci.policy import FailOn
from postmortem.scan.outputs.ci.write import CiMode


@pytest.mark.parametrize(
    ("command", "param", "enum"),
    [
        (scan, "engine", EngineName),
        (scan, "fail_on", FailOn),
        (scan, "ci_mode", CiMode),
        (analyze, "color", ColorMode),
    ],
)
def test_an_option_offers_exactly_its_enum(command: click.Command, param: str, enum: type[Enum]):
    (option,) = [p for p in command.params if p.name == param]
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == tuple(member.value for member in enum)
    assert option.default in option.type.choices
