"""Golden rendered sources without torch: the cases of tests/support/golden.py rendered from the small BERT
export's graph kept in tests/golden/ (weights zeroed: the codegen reads shapes, not values) must equal the
golden files byte for byte. tests/zoo/test_kernels_codegen.py checks that the export still has that graph."""
from tests.support import golden


def test_golden_sources():
    bad = golden.differing(golden.render_cases(golden.structure_model()))
    assert not bad, f"{bad} changed; if intended: python -m tests.support.golden --update"


def test_tma_golden_sources():
    """The TMA GEMM's golden cases (fp16 demo BERT, sm_90a, the TMA tiles forced: tests/support/golden.py)."""
    rendered = golden.render_tma_cases()
    assert all("gemm_sm90a_ws.cuh" in t for n, t in rendered.items() if n.endswith(".cu"))
    assert all("\ntmap " in t for n, t in rendered.items() if n.endswith(".plan"))
    bad = golden.differing(rendered)
    assert not bad, f"{bad} changed; if intended: python -m tests.support.golden --update"


def test_golden_check_is_not_vacuous():
    """A one-character change of a rendered source is reported."""
    rendered = golden.render_cases(golden.structure_model())
    name = "attention.cu"
    rendered[name] = rendered[name].replace("PLUS_HEAD_DIM", "PLUS_HEAD_DIMM", 1)
    assert golden.differing(rendered) == [name]


def test_wgmma_attention_golden_sources():
    """The sm_90a attention body's golden case (fp16 attention with a key padding mask, sm_90a:
    tests/support/golden.py render_wgmma_cases): attention_sm90a.cuh's defines and its three tmap records."""
    rendered = golden.render_wgmma_cases()
    assert "#define PLUS_ATTN_WGMMA 1" in rendered["wg_attention.cu"]
    assert rendered["wg_attention.plan"].count("\ntmap ") == 3
    bad = golden.differing(rendered)
    assert not bad, f"{bad} changed; if intended: python -m tests.support.golden --update"
