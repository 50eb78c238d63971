"""Findings: what a check of the source found, as data (subject, value, verdict, problem, fix).

Checks return findings instead of prose, so a caller picks what it needs without parsing text: the hook's
validation raises on the wrong ones, its connection Test prints every one as a line. Imports only the
standard library.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.Enum):
    """The verdict of a :class:`Finding`."""

    OK = "ok"
    NOTE = "note"
    NOT_CHECKED = "not checked"
    WRONG = "wrong"


@dataclass(frozen=True)
class Finding:
    """One checked thing about the source and its verdict, as data.

    :param subject: what was checked: a server variable, ``binlog retention``, ``server_id``,
        ``privilege``, ``grant``, ``role`` or ``settings``.
    :param value: its value as read (``?`` when unknown).
    :param verdict: ok, note, not checked or wrong (the source cannot be used until it is fixed).
    :param problem: why it is wrong, what the note is about, or why it was not checked; for ok an optional
        detail.
    :param fix: what to do about it ("" when nothing).
    """

    subject: str
    value: str
    verdict: Outcome
    problem: str = ""
    fix: str = ""

    @property
    def wrong(self) -> bool:
        """Return True when the finding keeps the source from being used."""
        return self.verdict is Outcome.WRONG

    def explain(self) -> str:
        """Return the problem and its fix as one sentence (no verdict, no subject)."""
        return "; ".join(part for part in (self.problem, self.fix) if part)

    def __str__(self) -> str:
        """Return ``subject=value: verdict[: problem][; fix]`` (the connection Test's line)."""
        text = self.explain()
        if self.verdict is Outcome.WRONG:
            head = "WRONG: "
        elif self.verdict is Outcome.OK:
            head = "ok" + (" " if text.startswith("(") else ", " if text else "")
        else:
            head = f"{self.verdict.value}: "
        return f"{self.subject}={self.value}: {head}{text}".rstrip(".")
