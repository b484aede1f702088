"""Text from a dump made safe for a terminal: control characters shown, never obeyed.

Kernel, device and file names in a dump are bytes anyone could have written. Printed raw,
an ESC starts a terminal escape (clear the screen, set the window title), a carriage
return or backspace hides what came before it, and a newline forges a line of our own
output (``error: …``). The bidirectional controls reorder what a terminal shows after them
(U+202E makes ``kernel_evil.cu`` read backwards), and the line and paragraph separators
(U+2028, U+2029) and NEL (U+0085) end a line in some terminals and editors. `escape_controls`
writes every such character the way Python's `repr` does, so a value is always one line of
visible text, in the order it is stored.
"""

from __future__ import annotations

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}

# Unicode category Cc: C0 (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F, NEL among
# them). The backslash is doubled so that `\x1b` in the output always means the control,
# never the four characters a name might hold.
_TABLE = {
    code: _NAMED.get(chr(code), f"\\x{code:02x}")
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), ord("\\"))
}
BIDI_AND_SEPARATORS = (
    0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029,
)  # fmt: skip
"""Unicode's Bidi_Control characters (the marks, embeddings, overrides and isolates), and the
line and paragraph separators: written as ``\\uNNNN``, as `repr` writes them."""
_TABLE.update({code: f"\\u{code:04x}" for code in BIDI_AND_SEPARATORS})


def escape_controls(text: str) -> str:
    r"""`text` with every control character and backslash escaped as in Python's `repr`.

    ``\t``, ``\n``, ``\r`` and ``\\`` by name, the other C0 controls, DEL and the C1
    controls as ``\xNN``, the bidirectional controls and the line and paragraph separators
    as ``\uNNNN``. Everything else, ``é``, ``中`` or an emoji, is left as it is.

    >>> escape_controls("k\x1b[2J\nerror: x")
    'k\\x1b[2J\\nerror: x'
    """
    return text.translate(_TABLE)
