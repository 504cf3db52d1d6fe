"""PlusEP's messages while ONNX Runtime creates a session, one owner: ONNX Runtime's logger, at its severity.

    from plus_ep import ortlog
    ortlog.emit(ortlog.WARNING, "PlusEP: no usable NVIDIA GPU (...)", sess_options=so, once="no-device")
    # shown when so.log_severity_level (else ORT's default severity) is 2 or less; once per process

ORT's levels: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal. A line shows when its level is at least the
effective severity: inside the plugin EP's planner (`planner_scope`) the session's logger decides
(`SessionOptions.log_severity_level`, else ORT's default); elsewhere the `sess_options` given, when set
(>= 0), else ORT's default logger (`onnxruntime.set_default_logger_severity`, 2 unless changed). The line
goes through the session's logger in the planner (plus_ep/native/ep.c PlusEP_PlanLog), else through ORT's
default logger (plus_ep/native/ep_base.c PlusEP_Log), or Python's `logging` ("plus_ep") where the
library is not registered. The C side's lines (plus_ep_log, plus_ep_log_once) follow the same rules.
`once`: at most one line per key and process, counted only when the line shows, so a quiet session does
not use up the line a later one should get. In the planner's thread, the records of the `plus_ep*` Python
loggers go the same way (`planner_scope`).
"""
from __future__ import annotations

import contextvars
import ctypes
import logging
import sys
import threading
from contextlib import contextmanager

__all__ = ["VERBOSE", "INFO", "WARNING", "ERROR", "FATAL", "severity", "shows", "emit", "planner_scope", "later"]

VERBOSE, INFO, WARNING, ERROR, FATAL = 0, 1, 2, 3, 4
_PY = {VERBOSE: logging.DEBUG, INFO: logging.INFO, WARNING: logging.WARNING, ERROR: logging.ERROR,
       FATAL: logging.CRITICAL}
log = logging.getLogger("plus_ep")

_scope: contextvars.ContextVar = contextvars.ContextVar("plus_ep_ortlog_scope", default=None)
_shown: set = set()
_lock = threading.Lock()


def level_of(levelno: int) -> int:
    """ORT's level of a Python logging level (DEBUG -> 0 verbose ... CRITICAL -> 4 fatal)."""
    return 0 if levelno < logging.INFO else 1 if levelno < logging.WARNING else 2 if levelno < logging.ERROR \
        else 3 if levelno < logging.CRITICAL else 4


def _lib():
    """The launcher library ORT loaded (plus_ep/ep.py registers it), or None."""
    ep = sys.modules.get("plus_ep.ep")
    return _typed(getattr(ep, "_state", {}).get("lib") if ep else None)


def _typed(lib):
    """`lib` with the logging hooks' argument types declared (None without them)."""
    if lib is None or not hasattr(lib, "PlusEP_Log"):
        return None
    if not getattr(lib, "_plus_ortlog", False):
        lib.PlusEP_Log.argtypes, lib.PlusEP_Log.restype = [ctypes.c_int, ctypes.c_char_p], None
        lib.PlusEP_LogSeverity.argtypes, lib.PlusEP_LogSeverity.restype = [], ctypes.c_int
        lib.PlusEP_PlanLog.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]
        lib.PlusEP_PlanLog.restype = None
        lib.PlusEP_PlanLogSeverity.argtypes, lib.PlusEP_PlanLogSeverity.restype = [ctypes.c_void_p], ctypes.c_int
        lib._plus_ortlog = True
    return lib


def _default_severity(lib) -> int:
    got = lib.PlusEP_LogSeverity() if lib is not None else -1
    return got if got >= 0 else WARNING


def severity(sess_options=None) -> int:
    """The effective severity (see the module's docstring): lines below it are not shown."""
    scope = _scope.get()
    if scope is not None:
        return scope[0].PlusEP_PlanLogSeverity(scope[1])
    own = getattr(sess_options, "log_severity_level", -1) if sess_options is not None else -1
    return own if own >= 0 else _default_severity(_lib())


def shows(level: int, sess_options=None) -> bool:
    return level >= severity(sess_options)


def _send(level: int, msg: str, scope, lib) -> None:
    if scope is not None:
        scope[0].PlusEP_PlanLog(scope[1], level, msg.encode(errors="replace"))
    elif lib is not None and level >= _default_severity(lib):
        lib.PlusEP_Log(level, msg.encode(errors="replace"))
    else:       # no ORT logger, or a session more verbose than ORT's default logger
        log.log(_PY[level], "%s", msg, extra={"plus_ep_ortlog": True})


def emit(level: int, msg: str, sess_options=None, once: str | None = None) -> bool:
    """Show `msg` at ORT level `level` when the effective severity allows it; True when it showed."""
    if not shows(level, sess_options):
        return False
    if once is not None:
        with _lock:
            if once in _shown:
                return False
            _shown.add(once)
    _send(level, msg, _scope.get(), _lib())
    return True


class _Route(logging.Filter):
    """On the plus_ep* loggers: in a planner's context, a record goes to the session's logger instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        scope = _scope.get()
        if scope is None or getattr(record, "plus_ep_ortlog", False):
            return True
        _send(level_of(record.levelno), record.getMessage(), scope, None)
        return False


_ROUTE = _Route()


@contextmanager
def planner_scope(lib, request):
    """Inside (this thread): emit() and the plus_ep* loggers' records go through the session logger of the
    planner's `request` (plus_ep/ep.py's planner callback)."""
    for name in ["plus_ep", *[n for n in list(logging.root.manager.loggerDict) if n.startswith("plus_ep.")]]:
        lg = logging.getLogger(name)
        if _ROUTE not in lg.filters:
            lg.addFilter(_ROUTE)
    lib = _typed(lib)
    if lib is None:     # an older library without the hooks: Python's logging, as before
        yield
        return
    token = _scope.set((lib, request))
    try:
        yield
    finally:
        _scope.reset(token)


def later(seconds: float, level: int, msg: str):
    """A Timer (started, daemon) that emits `msg` after `seconds` through this context's logger unless
    cancelled first (`.cancel()`): the one line a long step gives at the default severity."""
    ctx = contextvars.copy_context()
    t = threading.Timer(seconds, lambda: ctx.run(emit, level, msg))
    t.daemon = True
    t.start()
    return t
