"""Attention: softmax(Q·Kᵀ·scale + mask)·V with the surrounding transposes/reshapes.

The mask (key padding [B,1,1,T], causal [1,1,S,T], combined [B,1,S,T], a position bias, IsNaN/Where
guards) only adds element-wise work to the score loop: one +Graph for every variant. GQA's shared
K/V heads arrive through Expand/Reshape prologues, which fold into the loads.
"""
from ..registry import pattern
from ..roles import attention_roles


def _attention(b, mask_dims):
    q = b.input("q", ["B", "H", "S", "D"])
    k = b.input("k", ["B", "H", "T", "D"])
    v = b.input("v", ["B", "H", "T", "D"])
    s = b.Mul(b.MatMul(q, b.Transpose(k, perm=[0, 1, 3, 2])), b.const(0.125, 1))
    if mask_dims:
        s = b.Add(s, b.input("mask", mask_dims))
    o = b.MatMul(b.Softmax(s, axis=-1), v)
    return b.Transpose(o, perm=[0, 2, 1, 3])


def head_dim_known(g):
    """Templates are specialised per head dimension: it must be a compile-time integer."""
    dot = next(loop for _, loop in g.walk() if "dot" in loop.key_ops)
    return None if isinstance(dot.size, int) else f"head dim {dot.size} is not a compile-time integer"


@pattern("attention", allow_prologue=True, template="flash_attention", check=head_dim_known,
         roles=attention_roles)
def attention(b):
    """QKᵀ, scale, mask, softmax, ·V, output transpose."""
    return _attention(b, ["B", 1, 1, "T"])

