"""Secrets and home folders out of what the host logs say, before any of it is reported.

A host log is a job's whole output: launch commands with tokens in them, URLs with a user and
a password, environment dumps, `Authorization: Bearer …` headers, paths under the user's home
folder. A report goes to a ticket, and a Sentry event to a shared project, so every string
the host evidence carries passes through `redact` unless the user asks for the raw text
(`analyze --no-redact`):

- a value after a key that names a secret (``password``, ``passwd``, ``secret``, ``token``,
  ``api_key``, ``access_key``, ``credential``, ``private_key``; ``=`` or ``:``) becomes
  ``[redacted]``, the key kept;
- ``Bearer …`` and ``Basic …`` credentials, the password of ``scheme://user:pass@host``;
- the tokens whose shape says what they are: AWS access key ids, GitHub, Hugging Face,
  OpenAI-style ``sk-`` keys, Slack tokens, JSON web tokens;
- ``/home/NAME``, ``/Users/NAME`` and ``/root`` become ``~``.

Every pattern starts at a literal and its repetitions are bounded, so the work is linear in
the length of the text, whatever it holds (tests/unit/test_redact.py times crafted lines).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

T = TypeVar("T")

REDACTED = "[redacted]"

_KEY_WORDS = r"password|passwd|secret|token|api[_-]?key|access[_-]?key|credential|private[_-]?key"
# The key's word, up to 32 more name characters, then = or : and the value (quoted or not).
_KEY_VALUE = re.compile(
    rf"(?i)((?:{_KEY_WORDS})[\w.-]{{0,32}}[\"']?\s{{0,4}}[=:]\s{{0,4}})"
    r"(\"[^\"\n]{0,512}\"|'[^'\n]{0,512}'|[^\s,;&\"'}\]]{1,512})"
)
_SCHEME_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)\s{1,4}([A-Za-z0-9._~+/=-]{8,4096})")
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]{0,16}://[^\s/:@]{1,256}):[^\s/@]{1,256}@")
_SHAPED = re.compile(
    r"\b(?:"
    r"(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|gh[pousr]_[A-Za-z0-9]{30,255}"  # GitHub
    r"|github_pat_[A-Za-z0-9_]{30,255}"
    r"|hf_[A-Za-z0-9]{30,255}"  # Hugging Face
    r"|sk-[A-Za-z0-9_-]{20,255}"  # OpenAI-style keys
    r"|xox[abprs]-[A-Za-z0-9-]{10,255}"  # Slack
    r"|eyJ[A-Za-z0-9_-]{10,4096}\.[A-Za-z0-9_-]{10,4096}\.[A-Za-z0-9_-]{10,4096}"  # JWT
    r")"
)
_HOME = re.compile(r"(?<![\w.-])(?:/home/[^/\s]{1,64}|/Users/[^/\s]{1,64}|/root)(?=/|\s|$)")


def redact(text: str) -> str:
    """`text` with the secrets and home folders described in the module docstring hidden."""
    if not text:
        return text
    text = _KEY_VALUE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
    text = _SHAPED.sub(REDACTED, text)
    return _HOME.sub("~", text)


def redact_strings(value: T) -> T:
    """`value` with `redact` applied to every string it holds: in frozen dataclasses, tuples,
    lists and dicts, at any depth. Other values (numbers, paths, enums) are kept."""
    return _redacted(value)  # type: ignore[no-any-return]


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: _redacted(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init
        }
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_redacted(item) for item in value)
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    return value
