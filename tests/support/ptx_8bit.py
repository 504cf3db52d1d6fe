"""Hand-written PTX around one 8-bit mma.sync (tests/cpu/test_ptx_8bit.py, tests/cpu/test_quant_perfmodel.py)."""
from __future__ import annotations


def mma_text(form: str, acc: str) -> str:
    return f""".version 9.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
.reg .b32 %a<4>; .reg .b32 %b<2>; .reg .{acc} %c<4>; .reg .{acc} %d<4>; .reg .b64 %rd<12>; .reg .b32 %t;
mov.u32 %t, %tid.x;
ld.param.u64 %rd1, [pa]; mul.wide.u32 %rd2, %t, 16; add.s64 %rd3, %rd1, %rd2;
ld.global.v4.b32 {{%a0, %a1, %a2, %a3}}, [%rd3];
ld.param.u64 %rd4, [pb]; mul.wide.u32 %rd5, %t, 8; add.s64 %rd6, %rd4, %rd5;
ld.global.v2.b32 {{%b0, %b1}}, [%rd6];
ld.param.u64 %rd7, [pc]; add.s64 %rd8, %rd7, %rd2;
ld.global.v4.{acc} {{%c0, %c1, %c2, %c3}}, [%rd8];
{form} {{%d0, %d1, %d2, %d3}}, {{%a0, %a1, %a2, %a3}}, {{%b0, %b1}}, {{%c0, %c1, %c2, %c3}};
ld.param.u64 %rd9, [pd]; add.s64 %rd10, %rd9, %rd2;
st.global.v4.{acc} [%rd10], {{%d0, %d1, %d2, %d3}};
ret;
}}
"""
