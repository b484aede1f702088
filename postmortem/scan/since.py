"""`--since`: an ISO date or time, or an age such as ``36h`` or ``7d``."""

from __future__ import annotations

import re
from datetime import datetime, timezone

_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float) -> float:
    """Unix seconds for `text`: ``2026-11-20``, ``2026-11-20T08:00+02:00``, ``36h``, ``7d``.

    A date or time without a zone is UTC. Raises ValueError on anything else.
    """
    text = text.strip()
    age = _AGE.fullmatch(text)
    if age:
        return now - float(age.group(1)) * _UNIT_S[age.group(2)]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a date (2026-11-20, 2026-11-20T08:00Z) or an age (36h, 7d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()
