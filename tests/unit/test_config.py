"""Settings from the user's postmortem.toml and a project's pyproject.toml."""

from __future__ import annotations

import os

import pytest

from postmortem.config import MAX_LIST_ITEMS, Settings, load_settings
from postmortem.errors import ConfigError, ExitStatus


@pytest.fixture
def homes(tmp_path, monkeypatch):
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    project = tmp_path / "project"
    (project / "src" / "deep").mkdir(parents=True)
    return config / "postmortem" / "postmortem.toml", project


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_no_file_means_no_settings(homes):
    _, project = homes
    assert load_settings(project) == Settings()
    assert load_settings(project).defaults()["analyze"] == {}


def test_the_project_adds_to_the_user_s_lists_and_wins_on_paths(homes):
    # GIVEN a user file that trusts the project, and the project's [tool.postmortem], read
    # from a folder below it
    user, project = homes
    trust = f'trusted-projects = ["{project}"]\n'
    _write(user, f'source-dirs = ["/src/common"]\nnvdisasm = "/opt/nvdisasm"\n{trust}'
                 'map-paths = ["/build=/home/me"]\n')  # fmt: skip
    table = 'source-dirs = ["src"]\nnvdisasm = "tools/nvdisasm"\nrules = "rules.json"\n'
    _write(project / "pyproject.toml", f'[project]\nname = "x"\n\n[tool.postmortem]\n{table}')
    settings = load_settings(project / "src" / "deep")
    # THEN lists add up, the project's paths win, and relative paths are the file's
    assert settings.source_dirs == ("/src/common", str(project / "src"))
    assert settings.nvdisasm == str(project / "tools" / "nvdisasm")
    assert settings.origin("nvdisasm") == f"project config {project / 'pyproject.toml'}"
    assert settings.map_paths == ("/build=/home/me",)
    assert settings.rules == str(project / "rules.json")
    assert settings.files == (user, project / "pyproject.toml")
    assert settings.warnings == ()
    scan = settings.defaults()["scan"]
    assert scan["source_dirs"] == list(settings.source_dirs) and scan["rules"] == settings.rules


def test_an_untrusted_project_keeps_its_data_settings_but_names_no_program(homes):
    # GIVEN a project that names programs and data, and a user who names an nvdisasm
    user, project = homes
    _write(user, 'nvdisasm = "/opt/nvdisasm"\n')
    table = 'source-dirs = ["src"]\nnvdisasm = "evil.sh"\ncuda-gdb = "gdb.sh"\nrules = "r.json"\n'
    _write(project / "pyproject.toml", f"[tool.postmortem]\n{table}")
    settings = load_settings(project)
    # THEN the data settings are taken, the programs are the user's, and each drop is said
    assert settings.source_dirs == (str(project / "src"),)
    assert settings.rules == str(project / "r.json")
    assert (settings.nvdisasm, settings.cuda_gdb) == ("/opt/nvdisasm", None)
    assert settings.origin("nvdisasm") == f"user config {user}"
    assert [w.split(" = ")[0].rsplit(" ", 1)[1] for w in settings.warnings] == [
        "nvdisasm", "cuda-gdb", "rules",
    ]  # fmt: skip
    # AND the rules are taken, with a warning that they change how crashes group
    assert "change how crashes group" in settings.warnings[-1]


@pytest.mark.parametrize(
    "entry", ["{project}", "{project}/", "{parent}"], ids=["same", "slash", "parent"]
)
def test_trust_covers_the_folder_and_below(homes, entry):
    user, project = homes
    _write(user, f'trusted-projects = ["{entry.format(project=project, parent=project.parent)}"]\n')
    _write(project / "pyproject.toml", '[tool.postmortem]\nnvdisasm = "n"\n')
    assert load_settings(project / "src").nvdisasm == str(project / "n")


def test_trust_of_a_sibling_is_not_trust(homes):
    user, project = homes
    _write(user, f'trusted-projects = ["{project}-other", "{project / "src"}"]\n')
    _write(project / "pyproject.toml", '[tool.postmortem]\nnvdisasm = "n"\n')
    settings = load_settings(project / "src")
    assert settings.nvdisasm is None and len(settings.warnings) == 1


def test_a_pyproject_without_the_table_is_ignored(homes):
    _, project = homes
    _write(project / "pyproject.toml", '[project]\nname = "x"\n')
    assert load_settings(project).files == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("source-dir = []\n", "unknown key 'source-dir'"),
        ('source-dirs = "src"\n', "source-dirs must be a list of strings"),
        ("nvdisasm = 3\n", "nvdisasm must be a string"),
        ('map-paths = ["/build"]\n', "is not OLD=NEW"),
        ("source-dirs = [\n", "not TOML"),
        ("a = " + "[" * 100_000, r": not TOML: nested too deeply$"),
        ("source-dirs = " + "{a = " * 100_000, r": not TOML: nested too deeply$"),
        ("#" * (5 << 20), r": cannot read: larger than 4,194,304 bytes, the most read$"),
    ],
    ids=[
        "unknown-key",
        "not-a-list",
        "not-a-string",
        "not-a-map",
        "not-toml",
        "deep-arrays",
        "deep-tables",
        "too-large",
    ],
)
def test_a_bad_setting_is_one_error_naming_the_file(homes, text, message):
    user, project = homes
    _write(user, text)
    with pytest.raises(ConfigError, match=message) as raised:
        load_settings(project)
    assert str(user) in str(raised.value)
    assert "\n" not in str(raised.value)
    assert raised.value.exit_status == ExitStatus.BAD_INPUT


@pytest.mark.parametrize(
    "text",
    ['[project\nname = "x"\n', 'tool = "x"\n', "[tool]\npostmortem = 3\n"],
    ids=["not-toml", "tool-not-a-table", "setting-not-a-table"],
)
def test_another_tool_s_broken_pyproject_is_not_ours_to_refuse(homes, text):
    _, project = homes
    _write(project / "pyproject.toml", text)
    if "postmortem" in text:
        with pytest.raises(ConfigError, match="not a table"):
            load_settings(project)
    else:
        assert load_settings(project) == Settings()


def test_a_broken_pyproject_that_names_our_table_is_refused(homes):
    _, project = homes
    _write(project / "pyproject.toml", "[tool.postmortem]\nsource-dirs = [\n")
    with pytest.raises(ConfigError, match="not TOML"):
        load_settings(project)


def test_a_pyproject_that_names_our_table_nested_too_deeply_is_one_error(homes):
    _, project = homes
    _write(project / "pyproject.toml", "[tool.postmortem]\nsource-dirs = " + "[" * 100_000)
    with pytest.raises(ConfigError) as raised:
        load_settings(project)
    assert str(raised.value) == f"{project / 'pyproject.toml'}: not TOML: nested too deeply"


def test_a_pyproject_that_is_not_utf8_is_ignored(homes):
    _, project = homes
    (project / "pyproject.toml").write_bytes(b'[project]\nname = "\xff"\n')
    assert load_settings(project) == Settings()


def test_a_huge_sparse_pyproject_above_is_skipped_unread_with_a_warning(homes):
    # GIVEN a sparse 3 GiB pyproject.toml (no disk used) in a folder above, that names us
    user, project = homes
    _write(user, 'source-dirs = ["/src/mine"]\n')
    huge = project / "pyproject.toml"
    huge.write_text('[tool.postmortem]\nsource-dirs = ["evil"]\n')
    os.truncate(huge, 3 << 30)
    # WHEN the settings are loaded from below it
    settings = load_settings(project / "src" / "deep")
    # THEN it is skipped with one warning naming it, and the user's settings stand
    assert settings.source_dirs == ("/src/mine",)
    assert settings.files == (user,)
    (warning,) = settings.warnings
    assert (
        warning
        == f"{huge}: skipped: larger than 4,194,304 bytes, the most a settings file may hold"
    )


@pytest.mark.parametrize(
    ("key", "entry", "field"),
    [("source-dirs", "src{}", "source_dirs"), ("map-paths", "/b{}=/h{}", "map_paths")],
)
def test_a_project_s_long_list_is_cut_to_the_cap_with_a_warning(homes, key, entry, field):
    # GIVEN a project that sets 100,000 entries of a list
    _, project = homes
    entries = ", ".join(f'"{entry.format(i, i)}"' for i in range(100_000))
    _write(project / "pyproject.toml", f"[tool.postmortem]\n{key} = [{entries}]\n")
    # WHEN its settings are loaded
    settings = load_settings(project)
    # THEN the first MAX_LIST_ITEMS are kept, and one warning names the cap
    kept = getattr(settings, field)
    assert len(kept) == MAX_LIST_ITEMS
    assert kept[-1].endswith(entry.format(MAX_LIST_ITEMS - 1, MAX_LIST_ITEMS - 1))
    (warning,) = settings.warnings
    assert warning == (
        f"{project / 'pyproject.toml'}: {key} has 100,000 entries; only the first "
        f"{MAX_LIST_ITEMS:,} are used (the most a settings file may set)"
    )


def test_the_user_s_long_lists_are_cut_too(homes):
    user, project = homes
    _write(user, "trusted-projects = [" + ", ".join(f'"/p{i}"' for i in range(1000)) + "]\n")
    settings = load_settings(project)
    assert (
        len(settings.warnings) == 1 and "trusted-projects has 1,000 entries" in settings.warnings[0]
    )


def test_a_trusted_project_s_rules_give_no_warning(homes):
    user, project = homes
    _write(user, f'trusted-projects = ["{project}"]\n')
    _write(project / "pyproject.toml", '[tool.postmortem]\nrules = "r.json"\n')
    settings = load_settings(project)
    assert settings.rules == str(project / "r.json") and settings.warnings == ()
