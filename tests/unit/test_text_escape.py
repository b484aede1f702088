"""Text output shows the control characters of names from a dump; it never obeys them."""

import re

import pytest

from postmortem.report.render import template_environment
from postmortem.report.textsafe import escape_controls

NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0)]


@pytest.mark.parametrize("code", CONTROLS, ids=lambda code: f"U+{code:04X}")
def test_every_control_character_is_shown_as_a_python_escape(code):
    expected = NAMED.get(code, f"\\x{code:02x}")
    assert escape_controls(f"a{chr(code)}b") == f"a{expected}b"


@pytest.mark.parametrize("code", CONTROLS, ids=lambda code: f"U+{code:04X}")
def test_the_escape_is_what_python_repr_writes(code):
    assert escape_controls(chr(code)) == repr(chr(code))[1:-1]


def test_no_control_character_is_left_in_any_output():
    everything = "".join(chr(code) for code in range(0x100))
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", escape_controls(everything))


def test_terminal_escape_sequences_are_shown_not_sent():
    assert escape_controls("k\x1b[2J") == "k\\x1b[2J"
    assert escape_controls("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07"
    assert escape_controls("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert escape_controls("\x9b2J") == "\\x9b2J"  # the one-byte C1 CSI


def test_a_lone_carriage_return_cannot_hide_what_came_before_it():
    assert escape_controls("real name\rfake") == "real name\\rfake"


def test_a_newline_cannot_forge_a_line():
    shown = escape_controls("kernel\nerror: forged")
    assert shown == "kernel\\nerror: forged"
    assert "\n" not in shown


def test_a_backslash_is_doubled_so_an_escape_cannot_be_faked():
    assert escape_controls("a\\b") == "a\\\\b"
    # the four characters `\x1b` in a name read differently from the control itself
    assert escape_controls("\\x1b") == "\\\\x1b"
    assert escape_controls("\\x1b") != escape_controls("\x1b")
    assert escape_controls("\\\n") == "\\\\\\n"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "void ns::gemm<float, 4>(float*, int)",
        "café_kernel",
        "中文内核",
        "kernel_🔥_🚀",
        "\u00a0\u00ff\u0100",  # just past the C1 range
        "a <b> & 'c' \"d\" | `e`",
    ],
)
def test_ordinary_text_and_unicode_pass_through_unchanged(text):
    assert escape_controls(text) == text


def test_the_text_environment_escapes_every_value_and_keeps_the_layout():
    # GIVEN a text template over values holding a newline and terminal escapes
    template = template_environment(text=True).from_string(
        "{{ path }}: {{ kernel }}\n{% for name in names %}  - {{ name | upper }}\n{% endfor %}"
    )
    # WHEN it is rendered
    text = template.render(
        path="x.nvcudmp", kernel="k\nerror: forged\x1b[2J", names=["a\rb", "\x1b]0;t\x07"]
    )
    # THEN every value is escaped and the template's own newlines stay
    assert text == "x.nvcudmp: k\\nerror: forged\\x1b[2J\n  - A\\rB\n  - \\x1b]0;T\\x07\n"


def test_markdown_and_html_environments_leave_values_to_their_own_escaping():
    template = template_environment().from_string("{{ kernel }}")
    assert template.render(kernel="k\\n") == "k\\n"


BIDI_AND_SEPARATORS = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
BIDI_AND_SEPARATORS += [0x2028, 0x2029]


@pytest.mark.parametrize("code", BIDI_AND_SEPARATORS, ids=lambda code: f"U+{code:04X}")
def test_bidi_controls_and_separators_are_shown_as_python_escapes(code):
    shown = escape_controls(f"a{chr(code)}b")
    assert shown == f"a\\u{code:04x}b" == f"a{repr(chr(code))[1:-1]}b"


def test_a_right_to_left_override_cannot_reverse_what_follows_it():
    # "kernel_\u202eexe.cu" shows as "kernel_uc.exe" on a terminal that obeys it
    shown = escape_controls("kernel_\u202eexe.cu")
    assert shown == "kernel_\\u202eexe.cu"
    assert not any(0x2000 <= ord(c) <= 0x206F for c in shown)


def test_next_line_and_the_unicode_separators_cannot_forge_a_line():
    for separator in ("\x85", "\u2028", "\u2029"):
        shown = escape_controls(f"kernel{separator}error: forged")
        assert shown.isprintable() and len(shown.splitlines()) == 1


def test_the_text_environment_escapes_bidi_controls_in_every_value():
    template = template_environment(text=True).from_string("{{ kernel }} | {{ path }}")
    text = template.render(kernel="k\u202egnp.exe", path="\u2066a\u2069\u2028b")
    assert text == "k\\u202egnp.exe | \\u2066a\\u2069\\u2028b"


def test_other_format_characters_pass_through():
    # Joiners shape emoji and scripts: shown as they are, like every printable character
    assert escape_controls("a\u200db\u200cc") == "a\u200db\u200cc"
