"""`postmortem --help` and shell completion load click and the command line only: no numpy,
no reader, no analysis, no jinja2 (those cost most of a command's start-up)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HEAVY = (
    "numpy", "jinja2", "postmortem.analysis", "postmortem.coredump", "postmortem.cubin",
    "postmortem.gdb", "postmortem.scan", "postmortem.report.render",
    "ray.", "distributed.",
)  # fmt: skip

_PROBE = """
import os, sys
{setup}
try:
    {action}
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "jinja2")
               or m.startswith({heavy!r}))
print("HEAVY:" + ",".join(heavy), file=sys.stderr)
"""


def _heavy_modules(action: str, setup: str = "") -> list[str]:
    code = _PROBE.format(setup=setup, action=action, heavy=HEAVY)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    line = next(x for x in result.stderr.splitlines() if x.startswith("HEAVY:"))
    return [m for m in line.removeprefix("HEAVY:").split(",") if m]


def test_importing_the_command_line_loads_nothing_heavy():
    assert _heavy_modules("import postmortem.cli") == []


def test_help_loads_nothing_heavy():
    action = "from postmortem.cli import main; main(['analyze', '--help'], prog_name='postmortem')"
    assert _heavy_modules(action) == []


def test_shell_completion_loads_nothing_heavy():
    setup = (
        "os.environ.update(_POSTMORTEM_COMPLETE='bash_complete', "
        "COMP_WORDS='postmortem an', COMP_CWORD='1')"
    )
    action = "from postmortem.cli import main; main(prog_name='postmortem')"
    assert _heavy_modules(action, setup) == []


def test_import_postmortem_loads_only_errors_and_version():
    assert _heavy_modules("import postmortem") == []


def test_a_command_still_loads_what_it_needs():
    # The probe can see heavy modules: the same run with a real command finds them.
    action = "from postmortem.cli.info import info_text; import postmortem.coredump.survey_bulk"
    assert "numpy" in _heavy_modules(action)


def test_info_on_a_small_plain_dump_loads_no_numpy_templates_decompressors_or_toml(tmp_path):
    # GIVEN a plain (uncompressed) dump, and no settings file anywhere
    dump = Path(__file__).resolve().parents[2] / "fixtures" / "dumps" / "oob_store.nvcudmp"
    code = (
        "import sys\n"
        "from postmortem.cli import main\n"
        f"try:\n    main(['info', {str(dump)!r}], prog_name='postmortem')\n"
        "except SystemExit:\n    pass\n"
        "print('LOADED:' + ','.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    # WHEN `postmortem info` runs on it
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env=env,
    )  # fmt: skip
    line = next(x for x in result.stderr.splitlines() if x.startswith("LOADED:"))
    loaded = set(line.removeprefix("LOADED:").split(","))
    # THEN it answered without numpy (452 sections: read as lists), jinja2, a decompressor,
    # a TOML parser or json
    assert "oob_kernel" in result.stdout
    unwanted = {"numpy", "jinja2", "gzip", "lzma", "bz2", "backports.zstd", "tomllib", "json"}
    assert loaded & unwanted == set()


def _loaded(action: str, prefixes: tuple[str, ...]) -> list[str]:
    code = (
        f"import sys\ntry:\n    {action}\nexcept SystemExit:\n    pass\n"
        f"print('LOADED:' + ','.join(sorted(m for m in sys.modules if m.startswith({prefixes!r}))),"
        " file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    line = next(x for x in result.stderr.splitlines() if x.startswith("LOADED:"))
    return [m for m in line.removeprefix("LOADED:").split(",") if m]


def test_an_analyze_without_cuda_gdb_or_host_logs_loads_neither_reader():
    # cuda-gdb's parsers and the host logs' readers are a fifth of analyze's start-up: loaded
    # only when cuda-gdb runs or a host log is given
    dump = Path(__file__).resolve().parents[2] / "fixtures" / "dumps" / "oob_store.nvcudmp"
    action = (
        "from postmortem.cli import main; "
        f"main(['analyze', {str(dump)!r}, '--no-gdb', '--no-disasm'], prog_name='postmortem')"
    )
    unwanted = ("postmortem.gdb", "postmortem.host.", "postmortem.analysis.host",
                "postmortem.analysis.crosscheck")  # fmt: skip
    # (the redactor hides home folders in every report; it imports nothing of the rest)
    assert [m for m in _loaded(action, unwanted) if m != "postmortem.host.redact"] == []
    with_log = action.replace("'--no-disasm'", f"'--no-disasm', '--host-log', {str(dump)!r}")
    assert "postmortem.analysis.host.join" in _loaded(with_log, unwanted)
