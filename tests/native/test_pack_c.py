"""pack.c on format-2 image packs (PTX beside each cubin), under ASan/UBSan: parse, PTX lookup, the
PTX choice for a device newer than every pack (never an sm_XXa PTX), malformed PTX entries. The packs
come from the one writer, plus_ep.kernels.wire.pack."""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from plus_ep.kernels.wire import pack

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "plus_ep" / "native"
GCC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(GCC is None, reason="needs a C compiler")

MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plus_plan.h"
static unsigned char* slurp(const char* p, size_t* n) {
    FILE* f = fopen(p, "rb"); fseek(f, 0, SEEK_END); *n = (size_t)ftell(f); fseek(f, 0, SEEK_SET);
    unsigned char* d = malloc(*n ? *n : 1); if (fread(d, 1, *n, f) != *n) return NULL; fclose(f); return d;
}
int main(int argc, char** argv) {   /* packtest MAJOR MINOR ARCH=FILE... */
    plus_pack packs[8]; unsigned char* mem[8]; char err[512]; int n = 0;
    for (int i = 3; i < argc; i++, n++) {
        char* eq = strchr(argv[i], '='); *eq = 0;
        snprintf(packs[n].arch, sizeof packs[n].arch, "%s", argv[i]);
        size_t sz; mem[n] = slurp(eq + 1, &sz);
        if (plus_pack_parse(mem[n], sz, &packs[n], err, sizeof err)) {
            printf("error: %s\n", err);
            for (int k = 0; k <= n; k++) free(mem[k]);
            return 1;
        }
        for (unsigned j = 0; j < packs[n].count; j++) {
            const char* t; size_t ts; const unsigned char* c; size_t cs;
            plus_pack_image(&packs[n], j, &c, &cs);
            int has = !plus_pack_ptx(&packs[n], j, &t, &ts);
            printf("%s v%d image %u cubin %zu ptx %s\n", packs[n].arch, packs[n].version, j, cs,
                   has ? (t[ts - 1] == 0 ? t : "unterminated") : "-");
        }
    }
    int major = atoi(argv[1]), minor = atoi(argv[2]);
    int c = plus_pack_select(packs, n, major, minor, err, sizeof err);
    int p = c < 0 ? plus_pack_select_ptx(packs, n, major, minor) : -1;
    printf("cubin %s ptx %s\n", c < 0 ? "-" : packs[c].arch, p < 0 ? "-" : packs[p].arch);
    for (int i = 0; i < n; i++) free(mem[i]);
    return 0;
}
"""


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    d = tmp_path_factory.mktemp("packtest")
    (d / "main.c").write_text(MAIN)
    out = d / "packtest"
    subprocess.run([GCC, "-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=undefined", f"-I{NATIVE}", str(d / "main.c"), str(NATIVE / "pack.c"),
                    "-o", str(out)], check=True)
    return out


def run(exe, tmp_path, major, minor, **packs) -> str:
    args = []
    for arch, blob in packs.items():
        p = tmp_path / f"{arch}.bin"
        p.write_bytes(blob)
        args.append(f"{arch}={p}")
    r = subprocess.run([str(exe), str(major), str(minor), *args], capture_output=True, text=True, timeout=60, check=False)
    assert "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, r.stderr
    return r.stdout


def test_v2_pack_parse_and_ptx(exe, tmp_path):
    blob = pack.write([pack.Image(b"\x7fELFcubin0", "PTX zero"), b"cubin-one"])
    out = run(exe, tmp_path, 8, 0, sm_80=blob)
    assert "sm_80 v2 image 0 cubin 10 ptx PTX zero\n" in out
    assert "sm_80 v2 image 1 cubin 9 ptx -\n" in out and "cubin sm_80 ptx -" in out


def test_newer_device_takes_the_highest_plain_ptx(exe, tmp_path):
    p80 = pack.write([pack.Image(b"c80", ".target sm_80")])
    p90 = pack.write([pack.Image(b"c90", ".target sm_90")])
    p90a = pack.write([pack.Image(b"c90a", ".target sm_90a")])
    assert "cubin - ptx sm_90\n" in run(exe, tmp_path, 12, 0, sm_80=p80, sm_90=p90, sm_90a=p90a)
    assert "cubin - ptx sm_80\n" in run(exe, tmp_path, 10, 0, sm_80=p80, sm_90a=p90a)    # never sm_90a PTX
    assert "cubin - ptx -\n" in run(exe, tmp_path, 10, 0, sm_90a=p90a)
    assert "cubin sm_90a ptx -\n" in run(exe, tmp_path, 9, 0, sm_80=p80, sm_90a=p90a)   # exact cubin first
    assert "cubin - ptx -\n" in run(exe, tmp_path, 7, 5, sm_80=p80)                       # older device: nothing
    half = pack.write([pack.Image(b"c80", ".target sm_80"), b"no-ptx"])                  # PTX must cover every image
    assert "cubin - ptx -\n" in run(exe, tmp_path, 10, 0, sm_80=half)


def test_malformed_ptx_entries_are_errors(exe, tmp_path):
    blob = bytearray(pack.write([pack.Image(b"cubin", "text")]))
    _, _, po, ps = struct.unpack_from("<QQQQ", blob, 12)
    bad = bytearray(blob)
    bad[po + ps - 1] = ord("x")                                       # the NUL overwritten
    assert "not NUL-terminated" in run(exe, tmp_path, 8, 0, sm_80=bytes(bad))
    bad = bytearray(blob)
    struct.pack_into("<Q", bad, 12 + 24, len(blob))                  # PTX size past the end
    assert "lies outside" in run(exe, tmp_path, 8, 0, sm_80=bytes(bad))
    v1 = b"PLUSIMG1" + struct.pack("<IQQ", 1, 28, 3) + b"abc"
    assert "sm_80 v1 image 0 cubin 3 ptx -" in run(exe, tmp_path, 8, 0, sm_80=v1)
