"""Atomic file writes for every cache and dump PlusEP keeps (kernel cache, source dumps, PTX builds,
the model cache): a reader sees the old file or the new one, never a torn one. And the folder rule
(`safe_path`) of the folders whose contents decide what code runs: the trust manifest and keys file
(plus_ep/trust.py, the same rule as plus_ep/native/trust.c) and the render store."""
from __future__ import annotations

import os
import pathlib
import stat
import uuid


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to a temporary name beside `path`, then os.replace it into place; on any failure
    the temporary file is removed and `path` is untouched."""
    path = pathlib.Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def safe_path(what: str, path: str | os.PathLike) -> str | None:
    """Why `path` (a trust dir, keys file or render store) could be changed by another user, else None
    (also when it does not exist): it and every
    folder above it must be owned by this user or root and not writable by group or others (a folder
    above it may be, with the sticky bit: /tmp). The same rule and words as plus_trust_safe_path."""
    try:
        real = os.path.realpath(path, strict=True)
    except OSError:
        return None
    me = os.geteuid()
    at = real
    while True:
        try:
            st = os.stat(at)
        except OSError:
            st = None
        if st is not None:
            self = at == real
            lead = f"{what} {real}" + ("" if self else f": the folder {at} above it")
            if st.st_uid not in (me, 0):
                return (f"{lead} is owned by uid {st.st_uid}, not by you (uid {me}) or root: chown {me} {at}")
            if st.st_mode & 0o022 and (self or not stat.S_ISDIR(st.st_mode) or not st.st_mode & stat.S_ISVTX):
                return f"{lead} is writable by group or others (mode {st.st_mode & 0o7777:04o}): chmod go-w {at}"
        parent = os.path.dirname(at)
        if parent == at:
            return None
        at = parent
