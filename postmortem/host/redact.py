"""Secrets and home folders out of what the host logs say, before any of it is reported.

A host log is a job's whole output: launch commands with tokens in them, URLs with a user and
a password, environment dumps, `Authorization: Bearer …` headers, paths under the user's home
folder. A report goes to a ticket, and a Sentry event to a shared project, so every string
the host evidence carries passes through `redact` unless the user asks for the raw text
(`analyze --no-redact`), and so does every string of a Sentry event
(`postmortem.scan.events.sentry`):

- a value after a key that names a secret (``password``, ``passwd``, ``secret``, ``token``,
  ``api_key``, ``access_key``, ``account_key``, ``credential``, ``private_key``; ``=`` or
  ``:``) becomes ``[redacted]``, the key kept; so does the value after a flag that names one,
  written with a space (``--api-key VALUE``, ``--hf-token VALUE``, ``'--password', 'VALUE'``
  in a printed argv). ``tokens`` and ``tokenizer`` are counts and paths, not secrets;
- ``Bearer …`` and ``Basic …`` credentials, the password of ``scheme://user:pass@host``;
- a PEM private key block, whole (``-----BEGIN … PRIVATE KEY-----`` to its ``END`` line);
- the tokens whose shape says what they are: AWS access key ids, GitHub, GitLab
  (``glpat-``), Hugging Face, OpenAI-style ``sk-`` keys, Slack tokens and webhook URLs,
  Google API keys (``AIza``), JSON web tokens;
- an AWS secret access key (40 characters of base64) after a name that says so, even with
  only a space between; alone, only where its shape cannot be anything else: upper and lower
  case, a digit and a ``/`` or ``+``, not a path, nothing around it that a name, a number or
  a digest would continue with. Hex digests, CUDA addresses and kernel names never are;
- ``/home/NAME``, ``/Users/NAME`` and ``/root`` become ``~``.

Every pattern starts at a literal or one character class, its repetitions are bounded, and
none gives back a long run to retry it, so the work is linear in the length of the text,
whatever it holds: a crafted 1 MiB line takes a few tenths of a second
(tests/unit/test_redact.py times one per pattern).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

REDACTED = "[redacted]"

# `tokens` (a count) and `tokenizer` (a model's path) are not secrets; kernel API logs are
# full of `num_tokens=` and `max_tokens:`.
_KEY_WORDS = (
    r"password|passwd|secret|token(?!s|iz)|api[_-]?key|access[_-]?key|account[_-]?key"
    r"|credential|private[_-]?key"
)
# The key's word, up to 32 more name characters, then = or : and the value (quoted or not).
# The name is taken whole, at once (a lookahead's match is never retried): a key's word
# with no = after it costs one pass over its name, not one per character given back. The
# first lookahead (the first letters of `_KEY_WORDS`) skips every other character fast.
# A `::` is C++ scope (`token_pool::alloc` in a kernel's name), not a key and its value.
_KEY_VALUE = re.compile(
    rf"(?i)(?=[pstac])((?:{_KEY_WORDS})(?=([\w.-]{{0,32}}))\2"
    r"[\"']?\s{0,4}(?:=|:(?!:))\s{0,4})"
    r"(\"[^\"\n]{0,512}\"|'[^'\n]{0,512}'|[^\s,;&\"'}\]]{1,512})"
)
# A flag that names a secret (up to four words around the key's word, each ended by - or _),
# then a space, or the `', '` between two words of a printed argv, then a value that is not
# the next flag.
_FLAG_VALUE = re.compile(
    rf"(?i)(?=-)((?<![\w-])-{{1,2}}(?=[a-z0-9])(?:[a-z0-9]{{1,32}}[_-]){{0,4}}(?:{_KEY_WORDS})"
    r"(?:[_-][a-z0-9]{1,32}){0,4}(?:\s{1,4}|[\"'],\s{0,4}))"
    r"(\"[^\"\n]{0,512}\"|'[^'\n]{0,512}'|[^\s\"'-][^\s\"']{0,511})"
)
# An AWS secret access key after its name with only blanks between (`aws configure set
# aws_secret_access_key KEY`); the `=` and `:` forms are `_KEY_VALUE`'s.
_AWS_SECRET_NAMED = re.compile(
    r"(?i)(secret[_-]?(?:access[_-]?)?key[\"']?\s{1,8})([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)
# Alone: 40 characters with nothing around them that a word, a path, a number or base64
# would go on with; `_aws_secret_hidden` decides on the shape.
_AWS_SECRET_ALONE = re.compile(r"(?<![\w/+=.:\\-])[A-Za-z0-9/+]{40}(?![\w/+=.:\\-])")
_SCHEME_CREDENTIAL = re.compile(r"(?i)(?=b)\b(bearer|basic)\s{1,4}([A-Za-z0-9._~+/=-]{8,4096})")
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]{0,16}://[^\s/:@]{1,256}):[^\s/@]{1,256}@")
# The body runs to the END line (or, cut short, to the first character no PEM holds); `\\`
# and `n` keep a JSON-escaped key whole.
_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]{0,64}PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[A-Za-z0-9+/=\s\\:,.]|-(?!----END ))"
    r"{0,1048576}(?:-----END [A-Z0-9 ]{0,64}PRIVATE KEY(?: BLOCK)?-----)?"
)
_SLACK_WEBHOOK = re.compile(
    r"(?i)(?=h)(\bhooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]{8,512}"
)
_SHAPED = re.compile(
    r"\b(?:"
    r"(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{30,255}"  # GitHub
    r"|github_pat_[A-Za-z0-9_]{30,255}"
    r"|glpat-[A-Za-z0-9_-]{20,255}"  # GitLab personal access tokens
    r"|hf_[A-Za-z0-9]{30,255}"  # Hugging Face
    r"|sk-[A-Za-z0-9_-]{20,255}"  # OpenAI-style keys
    r"|xox[abprs]-[A-Za-z0-9-]{10,255}"  # Slack
    r"|AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"  # Google API keys
    r"|eyJ[A-Za-z0-9_-]{10,4096}\.[A-Za-z0-9_-]{10,4096}\.[A-Za-z0-9_-]{10,4096}"  # JWT
    r")"
)
_HOME = re.compile(
    r"(?<![\w.-])(?:/home/[\w.@+$-]{1,64}|/Users/[\w.@+$-]{1,64}|/root)(?![\w.@+$-])"
)


def redact(text: str) -> str:
    """`text` with the secrets and home folders described in the module docstring hidden."""
    if not text:
        return text
    text = _PEM.sub(REDACTED, text)
    text = _KEY_VALUE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _FLAG_VALUE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _AWS_SECRET_NAMED.sub(lambda m: m.group(1) + REDACTED, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
    text = _SLACK_WEBHOOK.sub(lambda m: m.group(1) + REDACTED, text)
    text = _SHAPED.sub(REDACTED, text)
    text = _AWS_SECRET_ALONE.sub(_aws_secret_hidden, text)
    return _HOME.sub("~", text)


def hide_home_folders(value: T) -> T:
    """`value` with only the home folders of every string it holds written ``~`` (as
    `redact_strings` walks it): for what our own report says (a dump's path, a log's, a
    source file's), where nothing else is a secret."""
    return _mapped(value, _hide_home)  # type: ignore[no-any-return]


def _hide_home(text: str) -> str:
    # Every home folder starts with a slash; most strings of a report (addresses, names)
    # hold none, and a grid-wide fault's report holds hundreds of thousands of them.
    return _HOME.sub("~", text) if "/" in text else text


def _aws_secret_hidden(match: re.Match[str]) -> str:
    word = match.group(0)
    # A secret key is random base64: all three kinds of character and a / or + somewhere
    # (7 keys in 10 have one; the others are caught by their name only). A path starts with
    # its /, or has a lowercase word between two (`gemm/kernel/Sm90Gemm…`); a key's /s
    # seldom cut out one.
    shaped = (
        any(c.isupper() for c in word)
        and any(c.islower() for c in word)
        and any(c.isdigit() for c in word)
        and ("+" in word or "/" in word)
        and not word.startswith("/")
        and not any(
            len(part) >= 3 and part.isalpha() and part.islower() for part in word.split("/")
        )
    )
    return REDACTED if shaped else word


def redact_strings(value: T) -> T:
    """`value` with `redact` applied to every string it holds: in frozen dataclasses, tuples,
    lists and dicts, at any depth. Other values (numbers, paths, enums) are kept."""
    return _mapped(value, redact)  # type: ignore[no-any-return]


_KEPT = (int, float, bool, type(None))
"""Values kept as they are, looked at first: most of what a report holds is numbers."""


def _mapped(value: Any, text: Callable[[str], str]) -> Any:
    # Containers before dataclasses: asking whether a value is a dataclass costs more, and
    # a report holds far more dicts and lists than dataclasses.
    if type(value) in _KEPT:
        return value
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {key: _mapped(item, text) for key, item in value.items()}
    if isinstance(value, list):
        return [_mapped(item, text) for item in value]
    if isinstance(value, tuple):
        return tuple(_mapped(item, text) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: _mapped(getattr(value, f.name), text)
            for f in dataclasses.fields(value)
            if f.init
        }
        return dataclasses.replace(value, **changes)
    return value
