"""The console's last guard: every line a zuke command writes passes :func:`console_line`.

:func:`zuke.cli.main` wraps its stdout and stderr in an :class:`InertStream`, so whatever a
command prints — a sweep's lines, ``runs show``, a ``zuke:`` error, a live progress line —
cannot start a GitHub Actions workflow command, whichever code path wrote it (the rules:
:mod:`zuke._inert`). The bodies of targets print to the process's own streams, not through
here: their output is the build author's.

A line is written as soon as it is complete. Of an unfinished line, what is decided is
written on :meth:`InertStream.flush`; what is not yet (a line that is blank or ``:`` so far,
a trailing ``#`` a later ``[`` could make ``##[``) waits for the rest of its line, or for
:meth:`InertStream.finish`. On a terminal (no runner reads one) a CR is left alone: a live
display draws with it.
"""

from __future__ import annotations

from typing import Any, TextIO, cast

from zuke._inert import command_may_start, console_line, trailing_hashes


class InertStream:
    """A text stream over ``raw`` whose lines are made inert on the way through."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw
        self._breaks = not bool(getattr(raw, "isatty", lambda: False)())
        self._held = ""  # the current line's text not written yet
        self._open = False  # some of the current line is written: its start was checked

    @classmethod
    def wrap(cls, stream: TextIO) -> TextIO:
        """``stream`` guarded (once: a stream already guarded is returned as it is)."""
        if isinstance(stream, InertStream):
            return cast(TextIO, stream)
        return cast(TextIO, cls(stream))

    def _line(self, text: str) -> str:
        return console_line(text, breaks=self._breaks, continues=self._open)

    def write(self, text: str) -> int:
        if text and not self._held and text.find("\n") == len(text) - 1:  # one line: the usual
            self.raw.write(self._line(text[:-1]) + "\n")
            self._open = False
            return len(text)
        *lines, self._held = (self._held + text).split("\n")
        if lines:
            done = []
            for line in lines:
                done.append(self._line(line) + "\n")
                self._open = False
            self.raw.write("".join(done))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Write what is decided of an unfinished line, then flush ``raw``."""
        held = self._held
        if held and not (not self._open and command_may_start(held)):
            cut = trailing_hashes(held)
            if cut:
                self.raw.write(self._line(held[:cut]))
                self._open = True
                self._held = held[cut:]
        self.raw.flush()

    def finish(self) -> None:
        """Write whatever is held (nothing more will follow it) and flush."""
        if self._held:
            self.raw.write(self._line(self._held))
            self._held = ""
            self._open = True
        self.raw.flush()

    def isatty(self) -> bool:
        return bool(getattr(self.raw, "isatty", lambda: False)())

    def __getattr__(self, name: str) -> Any:  # fileno, encoding, …: the raw stream's
        return getattr(self.raw, name)


__all__ = ["InertStream"]
