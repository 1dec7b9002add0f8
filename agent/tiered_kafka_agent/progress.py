"""A progress bar for the agent's bulk commands (``rebuild-registry``, ``migrate-registry``), on stderr.

On a terminal it redraws one line (``\\r``) at most ten times a second; otherwise (a log file, a
pipe) it prints a line every ``every_s`` seconds and at the end, so a long run shows it is alive
without flooding. The line: ``what [#####.....] done/total (pct) rate/s``; with no total known
yet, no bar.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, what: str, total: int | None = None, *, out: TextIO | None = None, every_s: float = 5.0, unit: str = "") -> None:
        self.what = what
        self.total = total
        self.out = out if out is not None else sys.stderr
        self.unit = unit
        self.done = 0
        self._tty = bool(getattr(self.out, "isatty", lambda: False)())
        self._every = 0.1 if self._tty else every_s
        self._start = time.monotonic()
        self._shown = 0.0

    def update(self, done: int, total: int | None = None) -> None:
        """Set the count done (and the total, when it becomes known); redraw when due."""
        self.done = done
        if total is not None:
            self.total = total
        now = time.monotonic()
        if now - self._shown >= self._every:
            self._shown = now
            self._show(now, final=False)

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def close(self) -> None:
        self._show(time.monotonic(), final=True)

    def line(self, now: float | None = None) -> str:
        elapsed = max((time.monotonic() if now is None else now) - self._start, 1e-9)
        rate = f"{self.done / elapsed:,.0f}{' ' + self.unit if self.unit else ''}/s"
        if self.total:
            filled = min(int(30 * self.done / self.total), 30)
            return f"{self.what} [{'#' * filled}{'.' * (30 - filled)}] {self.done:,}/{self.total:,} ({self.done / self.total:.0%}) {rate}"
        return f"{self.what} {self.done:,} {rate}"

    def _show(self, now: float, *, final: bool) -> None:
        text = self.line(now)
        if self._tty:
            self.out.write("\r" + text + ("\n" if final else ""))
        else:
            self.out.write(text + "\n")
        self.out.flush()
