"""A scan request is built from typed settings and the tool options every command shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from postmortem.analysis.analyze import AnalyzeOptions
from postmortem.analysis.fault.fault import LocalizeOptions
from postmortem.errors import BadOption, ExitStatus
from postmortem.scan.request import ScanSettings, scan_request

TOOLS = AnalyzeOptions(LocalizeOptions(timeout=120.0), cuda_gdb=True)


def test_cuda_gdb_runs_only_when_there_are_reports(tmp_path):
    bare = scan_request((tmp_path,), ScanSettings(use_cache=False), TOOLS, tty=False)
    assert bare.options.work.analyze.cuda_gdb.run is False
    settings = ScanSettings(reports_dir=tmp_path / "reports", use_cache=False)
    with_reports = scan_request((tmp_path,), settings, TOOLS, tty=False)
    assert with_reports.options.work.analyze.cuda_gdb.run is True
    assert (tmp_path / "reports").is_dir()


def test_no_tool_may_run_longer_than_a_dump_may_take(tmp_path):
    settings = ScanSettings(timeout_s=5.0, use_cache=False)
    request = scan_request((tmp_path,), settings, TOOLS, tty=False)
    assert request.options.work.analyze.localize.timeout == 5.0
    assert request.options.timeout_s == 5.0


def test_a_per_dump_report_takes_the_index_format_unless_told(tmp_path):
    settings = ScanSettings(fmt="md", reports_dir=tmp_path, use_cache=False)
    assert scan_request((tmp_path,), settings, TOOLS, False).options.work.report_format == "md"
    settings = ScanSettings(fmt="md", reports_dir=tmp_path, report_format="json", use_cache=False)
    assert scan_request((tmp_path,), settings, TOOLS, False).options.work.report_format == "json"


def test_the_cache_is_off_only_when_asked(tmp_path):
    cache = tmp_path / "cache.sqlite"
    request = scan_request((tmp_path,), ScanSettings(cache_path=cache), TOOLS, tty=False)
    assert request.options.cache_path == cache
    request = scan_request((tmp_path,), ScanSettings(use_cache=False), TOOLS, tty=False)
    assert request.options.cache_path is None


@pytest.mark.parametrize(
    ("settings", "option"),
    [
        (ScanSettings(since="yesterday-ish"), "--since"),
        (ScanSettings(name_patterns=("core_%q",)), "--name-pattern"),
        (ScanSettings(output=Path("/nonexistent-folder/index.txt")), "-o"),
    ],
)
def test_a_bad_option_is_named_before_the_scan_starts(settings, option, tmp_path):
    with pytest.raises(BadOption) as raised:
        scan_request((tmp_path,), settings, TOOLS, tty=False)
    assert raised.value.option == option
    assert raised.value.exit_status == ExitStatus.BAD_INPUT
