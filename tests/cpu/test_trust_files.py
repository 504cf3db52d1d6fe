"""The trust manifest on disk (plus_ep/trust.py): entries are written atomically and a failed write
leaves no file (a full disk: a tiny tmpfs when this runs as root, else a failing write injected);
`plus-ep trust` exits 1 when it recorded nothing (a read-only or full trust folder) or the folder
breaks the folder rule; `plus-ep cache clear` removes a failed write's leftover .tmp files and keeps the
entries; an entry that does not name its digest (a `touch`) admits nothing."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time

import onnx
import pytest

from plus_ep import cli, trust
from tests.support.launcher_models import fake_pack, function, fused_node, model, PLAN


def _model():
    nodes = [fused_node(f"fused_add{i}", ["X", "Y"], [f"Z{i}"], "k1", PLAN.replace("fused_add", f"fused_add{i}"),
                        {"sm_90": fake_pack(f"sm_90 {i}")}, vouch=False) for i in range(2)]
    nodes.append(onnx.helper.make_node("Add", ["Z0", "Z1"], ["Z"]))
    return model(nodes, [function("k1", ["A", "B"], "Add")])


@pytest.fixture
def manifest(tmp_path, monkeypatch):
    d = tmp_path / "trusted"
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(d))
    monkeypatch.delenv("PLUS_EP_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("PLUS_EP_TRUST", raising=False)
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    return d, path


@contextlib.contextmanager
def tmpfs(where, size="16k", readonly=False):
    """A tmpfs of `size` at `where` (root only; skips otherwise)."""
    where.mkdir()
    opts = f"size={size},mode=0700" + (",ro" if readonly else "")
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
                                           capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def _files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) if d.exists() else []


def test_a_full_disk_leaves_no_file_and_plus_ep_trust_fails(manifest, tmp_path, monkeypatch, capsys):
    _, path = manifest
    with tmpfs(tmp_path / "fs") as fs:
        filler = fs / "filler"
        with contextlib.suppress(OSError), open(filler, "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(fs / "trusted"))
        with pytest.raises(trust.RecordError, match=r"cannot record trusted kernels in .*No space left on device"):
            trust.record(b"\1" * 32, "test")
        assert _files(fs) == ["filler"]                    # no entry, no .tmp
        assert cli.main(["trust", str(path), "--accept"]) == 1
        err = capsys.readouterr().err
        assert "recorded 0 of 2 fused nodes as trusted; the launcher refuses the others" in err
        assert "No space left on device" in err
        assert _files(fs) == ["filler"]


def test_a_read_only_trust_folder_fails_plus_ep_trust(manifest, tmp_path, monkeypatch, capsys):
    _, path = manifest
    with tmpfs(tmp_path / "ro", readonly=True) as ro:
        monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(ro))
        assert cli.main(["trust", str(path), "--accept"]) == 1
        assert "Read-only file system" in capsys.readouterr().err
        assert cli.main(["trust", str(path), "--status"]) == 1


def test_a_failing_write_leaves_no_file(manifest, monkeypatch, capsys):
    """The same without root: the write into the temporary file fails (ENOSPC injected)."""
    d, path = manifest
    from plus_ep.kernels.compile import files

    real_replace = files.os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files.os, "replace", full)
    assert cli.main(["trust", str(path), "--accept"]) == 1
    assert "recorded 0 of 2" in capsys.readouterr().err
    assert _files(d) == []
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert cli.main(["trust", str(path), "--accept"]) == 0
    assert len(_files(d)) == 2 and all(n.how == "manifest" for n in trust.status(onnx.load(path)))


def test_an_unsafe_trust_folder_is_refused_with_the_fix(manifest, capsys):
    d, path = manifest
    d.mkdir(mode=0o700)
    os.chmod(d, 0o777)
    assert cli.main(["trust", str(path), "--accept"]) == 1
    assert f"trust folder {d} is writable by group or others (mode 0777): chmod go-w {d}" in capsys.readouterr().err
    assert _files(d) == []
    os.chmod(d, 0o700)
    assert cli.main(["trust", str(path), "--accept"]) == 0
    os.chmod(d, 0o770)                          # recorded, then the folder opened: its entries count for nothing
    assert [n.how for n in trust.status(onnx.load(path))] == [None, None]
    assert cli.main(["trust", str(path), "--status"]) == 1
    assert "chmod go-w" in capsys.readouterr().out


def test_an_entry_must_name_its_digest(manifest):
    d, path = manifest
    m = onnx.load(path)
    dig = trust.node_digest(trust.kernel_nodes(m)[0])
    entry = d / dig.hex()[:2] / dig.hex()
    entry.parent.mkdir(parents=True, mode=0o700)
    entry.touch()                                # "a file exists" no longer admits anything
    assert trust.status(m)[0].how is None
    trust.record(dig, "test")                    # the empty entry is replaced by one naming the digest
    assert trust.status(m)[0].how == "manifest" and dig.hex() in entry.read_text()


def test_cache_clear_removes_leftover_tmp_files_and_keeps_entries(manifest, tmp_path, monkeypatch, capsys):
    d, path = manifest
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PLUS_EP_ZOO_DIR", raising=False)        # `cache clear` empties the zoo: never the shared one
    assert cli.main(["trust", str(path), "--accept"]) == 0
    entries = _files(d)
    shard = d / entries[0].split("/")[0]
    old, young = shard / ".deadbeef.123.tmp", shard / ".cafe.456.tmp"
    old.write_bytes(b"")
    young.write_bytes(b"")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    capsys.readouterr()
    assert cli.main(["cache", "clear"]) == 0
    assert f"trusted: removed 1 leftover .tmp files from {d} (its entries stay)" in capsys.readouterr().out
    assert not old.exists() and young.exists()      # a young one may be another process's write
    assert sorted(set(_files(d)) - {str(young.relative_to(d))}) == entries
