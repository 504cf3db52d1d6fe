"""verify's default shapes (plus_ep/verification/shapes.py): every tiled extent spans its tile with a ragged
remainder, and every grid dimension that depends on the shapes is larger than 1 at least once, so a launch
that swaps or drops a grid dimension (y <-> z) cannot pass on shapes where both are 1."""
from __future__ import annotations

from plus_ep.verification import shapes as vs

PLAN = """plusplan 1
node attn
sym 0 batch
sym 1 seq
in 0 1 4 s0 4 s1 64
route 0 1
kernel 0 0 plus_attention s1,64,cdiv 4 s0 128 1 1 20480
kernel 0 0 plus_row s0,s1,*,65535,min 1 1 256 1 1 0
end
"""


def _tiles(batch, seq):
    return {what: (tile, extent) for what, tile, extent in vs.tiles_of(PLAN, "sm_80", [(batch, 4, seq, 64)])}


def test_grid_dimensions_that_depend_on_the_shapes_must_exceed_one():
    t = _tiles(1, 8)
    assert t["plus_attention grid.x"] == (64, 8) and t["plus_attention grid.z > 1"] == (1, 1)
    assert t["plus_attention grid.x > 1"] == (1, 1) and t["plus_row grid.x > 1"] == (1, 8)
    assert "plus_attention grid.y > 1" not in t           # 4 heads: fixed by the model, always > 1
    assert not vs.spans(list((w, a, b) for w, (a, b) in t.items()))
    t = _tiles(2, 67)
    assert t["plus_attention grid.z > 1"] == (1, 2) and t["plus_attention grid.x > 1"] == (1, 2)
    assert vs.spans([(w, a, b) for w, (a, b) in t.items()])


def test_spanned():
    assert vs.spanned(64, 67) and not vs.spanned(64, 128) and not vs.spanned(64, 63)
    assert vs.spanned(1, 2) and not vs.spanned(1, 1)
