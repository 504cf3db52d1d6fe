"""Atomic file writes for every cache and dump PlusEP keeps (kernel cache, source dumps, PTX builds,
the model cache): a reader sees the old file or the new one, never a torn one."""
from __future__ import annotations

import os
import pathlib
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
