"""Storage options from the command line: JSON values, nested keys, one error for a bad one."""

from __future__ import annotations

import os

import pytest

from postmortem.errors import BadOption
from postmortem.urls import parse_storage_options, use_storage_options


def test_values_that_read_as_json_are_json_and_dotted_keys_nest():
    options = parse_storage_options(["anon=true", "client_kwargs.region_name=eu", "n=3"])
    assert options == {"anon": True, "client_kwargs": {"region_name": "eu"}, "n": 3}


def test_a_value_nested_too_deeply_is_one_error_not_a_recursion_error():
    with pytest.raises(BadOption) as caught:
        parse_storage_options(["key=" + "[" * 100_000])
    assert str(caught.value) == "--storage-option: key: the value is nested too deeply"


def test_an_inherited_setting_nested_too_deeply_is_replaced(monkeypatch):
    monkeypatch.setenv("FSSPEC_PMTEST", "[" * 100_000)
    use_storage_options(["pmtest"], {"anon": True})
    assert os.environ["FSSPEC_PMTEST"] == '{"anon": true}'
