"""Progress of PlusEP's long steps, one owner: the bar library, when a bar shows, and what `-v` prints.

    from plus_ep import progress
    with progress.bar("compiling kernels", total=len(jobs), unit="kernel") as b:
        for job in jobs:
            ...
            b.update(note="sm_90")               # one step done; `note` shows beside the count
    with progress.task("exporting bert (torchscript)"):
        slow_call()                              # one long call: elapsed time, refreshed every second

Modes (`set_mode`, from the CLI's flags): "auto" (default) shows a tqdm bar on stderr when stderr is
a terminal and nothing otherwise (logs, CI, pipes stay clean); "quiet" (`-q`) never shows one;
"lines" (`-v`) prints a plain line to stderr as the work goes (at most one every LINE_SECONDS per bar,
plus its last step), never a bar, so it reads well in logs. A caller's explicit `enabled=True/False`
wins over the mode where it says so (`plus_ep.rewrite(..., progress=False)`).

Inside `routed(write_line)` (the plugin EP's planner: ONNX Runtime's logger, plus_ep/ortlog.py), a step that
would show nothing ("auto" mode, stderr no terminal, no explicit `enabled`) reports in "lines" form through
`write_line(text)` instead; `routed(None)` shows nothing at all, bars included (a quiet log severity).

Why tqdm: it is the ecosystem's usual progress library (Hugging Face transformers and huggingface_hub,
PyTorch's hub, pip's own vendored progress are of that kind), pure Python with no dependencies of its
own, thread-safe (`update` from compile threads), and it already turns itself off where stderr is no
terminal (`disable=None`). rich renders more but pulls markup, pygments and its console into every
import for a single line.

A leaf like plus_ep/config.py: the standard library and tqdm only, nothing of plus_ep, so the compiler
core (kernels/compile/jobs.py) may import it.
"""
from __future__ import annotations

import contextvars
import sys
import threading
import time
from contextlib import contextmanager

__all__ = ["MODES", "set_mode", "mode", "bar", "task", "resolve", "routed"]

MODES = ("auto", "quiet", "lines")
LINE_SECONDS = 2.0                 # "lines" mode: at most one line per bar this often (and its last step)
_state = {"mode": "auto"}
_route: contextvars.ContextVar = contextvars.ContextVar("plus_ep_progress_route", default=None)


def set_mode(value: str) -> None:
    if value not in MODES:
        raise ValueError(f"progress mode {value!r}: use one of {', '.join(MODES)}")
    _state["mode"] = value


def mode() -> str:
    return _state["mode"]


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def resolve(enabled: bool | str | None = None, stream=None) -> str:
    """What a step shows: "bar", "lines" or "off". `enabled`: None follows the mode; False is off;
    True a bar (lines in "lines" mode) even off a terminal; "lines"/"bar"/"off" as given."""
    if isinstance(enabled, str):
        if enabled not in ("bar", "lines", "off"):
            raise ValueError(f"progress {enabled!r}: use 'bar', 'lines' or 'off'")
        return enabled
    m = _state["mode"]
    if enabled is False or (enabled is None and m == "quiet"):
        return "off"
    if m == "lines":
        return "lines"
    if enabled or _isatty(stream or sys.stderr):
        return "bar"
    return "off"


class _LineSink:
    """A stream for _Lines that hands each finished line to a callable."""

    def __init__(self, write_line):
        self.write_line, self.buf = write_line, ""

    def write(self, text: str) -> None:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            if line:
                self.write_line(line)

    def flush(self) -> None:
        pass


@contextmanager
def routed(write_line):
    """Inside (this thread and what it calls): steps that would show nothing report through
    `write_line(text)` as "lines"; None: no step shows anything (see the module's docstring)."""
    token = _route.set(("off",) if write_line is None else ("lines", _LineSink(write_line)))
    try:
        yield
    finally:
        _route.reset(token)


def _pick(enabled, stream) -> tuple[str, object]:
    """(how, stream) of a step: resolve(), then a routed() context's say where the caller left it open."""
    stream = stream or sys.stderr
    how = resolve(enabled, stream)
    route = _route.get()
    if route is not None and enabled is None:
        if route[0] == "off":
            return "off", stream
        if how == "off" and _state["mode"] == "auto":
            return "lines", route[1]
    return how, stream


class _Lines:
    """The `-v` form of a bar: `desc: 12/40 kernels (sm_90) 3.1s` lines, throttled."""

    def __init__(self, desc: str, total, unit: str, stream):
        self.desc, self.total, self.unit, self.stream = desc, total, unit, stream
        self.n, self.t0, self.last, self.note = 0, time.perf_counter(), 0.0, ""
        self._lock = threading.Lock()

    def _line(self) -> str:
        count = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        unit = f" {self.unit}" if self.unit else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.desc}: {count}{unit}{note} {time.perf_counter() - self.t0:.1f}s"

    def update(self, n: int = 1, note: str | None = None) -> None:
        with self._lock:
            self.n += n
            if note is not None:
                self.note = note
            now = time.perf_counter()
            if now - self.last >= LINE_SECONDS or (self.total and self.n >= self.total):
                self.last = now
                print(self._line(), file=self.stream, flush=True)

    def refresh(self) -> None:
        with self._lock:
            now = time.perf_counter()
            if now - self.last >= LINE_SECONDS:
                self.last = now
                print(self._line(), file=self.stream, flush=True)

    def write(self, text: str, file=None) -> None:
        print(text, file=file or sys.stdout, flush=True)

    def close(self) -> None:
        pass


class _Bar:
    """tqdm behind the same three calls."""

    def __init__(self, desc: str, total, unit: str, stream):
        from tqdm import tqdm
        self._t = tqdm(total=total, desc=desc, unit=f" {unit}" if unit else "it", file=stream, leave=False,
                       dynamic_ncols=True, mininterval=0.2,
                       bar_format=None if total else "{desc}: {n_fmt}{unit} {elapsed}{postfix}")
        self._lock = threading.Lock()

    def update(self, n: int = 1, note: str | None = None) -> None:
        with self._lock:
            if note is not None:
                self._t.set_postfix_str(note, refresh=False)
            self._t.update(n)

    def refresh(self) -> None:
        with self._lock:
            self._t.refresh()

    def write(self, text: str, file=None) -> None:
        self._t.write(text, file=file or sys.stdout)

    def close(self) -> None:
        self._t.close()


class _Off:
    def __init__(self, stream):
        self.stream = stream

    def update(self, n: int = 1, note: str | None = None) -> None:
        pass

    def refresh(self) -> None:
        pass

    def write(self, text: str, file=None) -> None:
        print(text, file=file or sys.stdout, flush=True)

    def close(self) -> None:
        pass


@contextmanager
def bar(desc: str, total: int | None = None, unit: str = "", enabled: bool | str | None = None, stream=None):
    """A progress bar for `total` steps (None: a counter). Yields an object with `update(n=1, note=None)`,
    `refresh()` and `write(text, file=stdout)` (a line that does not break the bar); all are thread-safe."""
    how, stream = _pick(enabled, stream)
    b = _Bar(desc, total, unit, stream) if how == "bar" else _Lines(desc, total, unit, stream) \
        if how == "lines" else _Off(stream)
    try:
        yield b
    finally:
        b.close()


@contextmanager
def task(desc: str, enabled: bool | str | None = None, stream=None):
    """One long call without steps: its elapsed time, refreshed every second by a helper thread; in
    "lines" mode a line when it starts and one when it ends."""
    how, stream = _pick(enabled, stream)
    if how == "off":
        yield
        return
    t0 = time.perf_counter()
    if how == "lines":
        print(f"{desc} ...", file=stream, flush=True)
        try:
            yield
        finally:
            print(f"{desc}: done in {time.perf_counter() - t0:.1f}s", file=stream, flush=True)
        return
    done = threading.Event()
    with bar(desc, None, "", "bar", stream) as b:
        def tick():
            while not done.wait(1.0):
                b.refresh()
        t = threading.Thread(target=tick, name="plus-ep-progress", daemon=True)
        t.start()
        try:
            yield
        finally:
            done.set()
            t.join()
