"""The owner of PlusEP's session-time lines (plus_ep/ortlog.py) and progress's routing into it
(plus_ep/progress.py `routed`), without ONNX Runtime's logger: ortlog's fallback is Python's logging."""
from __future__ import annotations

import io
import logging

from plus_ep import ortlog, progress


class _Options:          # what ortlog reads of onnxruntime.SessionOptions
    def __init__(self, level):
        self.log_severity_level = level


def test_emit_follows_severity_and_once_counts_only_shown(monkeypatch, caplog):
    monkeypatch.setattr(ortlog, "_lib", lambda: None)       # no ORT logger: Python's logging, default severity 2
    monkeypatch.setattr(ortlog, "_shown", set())
    caplog.set_level(logging.DEBUG, logger="plus_ep")
    assert ortlog.severity(_Options(-1)) == ortlog.WARNING
    assert not ortlog.emit(ortlog.WARNING, "PlusEP: hidden", _Options(3), once="k")
    assert not ortlog.emit(ortlog.INFO, "PlusEP: info hidden")
    assert ortlog.emit(ortlog.WARNING, "PlusEP: shown", _Options(-1), once="k")      # the hidden one used nothing up
    assert not ortlog.emit(ortlog.WARNING, "PlusEP: again", _Options(0), once="k")
    assert ortlog.emit(ortlog.INFO, "PlusEP: info shown", _Options(1))
    got = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [(logging.WARNING, "PlusEP: shown"), (logging.INFO, "PlusEP: info shown")], got


def test_progress_routed_off_terminal_and_silenced():
    def steps(stream):
        with progress.bar("compiling kernels", total=2, unit="kernels", stream=stream) as b:
            b.update(note="sm_90a")
            b.update()
        with progress.task("partitioning", stream=stream):
            pass

    class Tty(io.StringIO):
        def isatty(self):
            return True

    plain = io.StringIO()
    steps(plain)                                          # no terminal, no route: nothing, as before
    assert plain.getvalue() == ""
    lines: list[str] = []
    with progress.routed(lines.append):
        steps(io.StringIO())
    assert lines[1].startswith("compiling kernels: 2/2 kernels (sm_90a)"), lines
    assert lines[2:3] == ["partitioning ..."] and lines[3].startswith("partitioning: done in"), lines
    tty = Tty()
    with progress.routed(None):                           # a quiet severity: not even a bar on a terminal
        steps(tty)
    assert tty.getvalue() == ""
