"""One owner of the run options (plus_ep/options.py): the CLI, InferenceSession and the plugin EP's
planner use it, and the plugin EP's C factory (plus_ep/native/ep_factory.c) accepts exactly its names
and values."""
from __future__ import annotations

import re

import pytest

from plus_ep import cli, ep, options, session
from plus_ep.kernels.target import FP32_MATH_DEFAULT, FP32_MATHS, Target
from tests.support.imports import PACKAGE_DIRS

FACTORY = (PACKAGE_DIRS["plus_ep"] / "native" / "ep_factory.c").read_text()


def test_the_c_factory_knows_the_same_names():
    listed = re.search(r'OPTION_NAMES = "([^"]+)"', FACTORY).group(1)
    assert tuple(n.strip() for n in listed.split(",")) == options.NAMES
    handled = set(re.findall(r'\{"(\w+)", o->\w+, sizeof o->\w+\}', FACTORY)) | {"verify"}
    flags = set(re.findall(r'\{"(\w+)", &o->\w+\}', FACTORY))            # the EP's on/off options
    assert flags == set(options.FLAGS) - {"verify"}
    numbers = {n for n in options.NAMES if f'if (!strcmp(name, "{n}")) {{\n        char* end' in FACTORY}
    assert handled | flags | numbers == set(options.NAMES), handled | flags | numbers


def test_the_c_factory_accepts_the_same_values():
    fp32 = re.search(r'!strcmp\(name, "fp32_math"\)((?:\s*&&\s*strcmp\(value, "\w+"\))+)', FACTORY).group(1)
    assert tuple(sorted(re.findall(r'"(\w+)"', fp32))) == tuple(sorted(FP32_MATHS))
    trust = re.search(r'!strcmp\(name, "trust"\)((?:\s*&&\s*strcmp\(value, "\w+"\))+)', FACTORY).group(1)
    assert set(re.findall(r'"(\w+)"', trust)) == set(next(o for o in options.OPTIONS if o.name == "trust").values)
    verify = FACTORY[FACTORY.index('if (!strcmp(name, "verify"))') + len('if (!strcmp(name, "verify"))'):]
    verify = verify[:verify.index("return NULL;")]
    on, off = verify.split("else if", 1)
    assert set(re.findall(r'"(\w+)"', on)) == set(options.VERIFY_ON)
    off = off.split("else return")[0]
    empty = {""} if "!*value" in off else set()                   # an empty value is off too
    assert set(re.findall(r'"(\w+)"', off)) | empty == set(options.VERIFY_OFF)


def test_one_name_and_one_default():
    assert session.NAME == ep.NAME == options.NAME == "PlusEP"
    assert options.fp32_math({}) == options.fp32_math({"fp32_math": ""}) == FP32_MATH_DEFAULT == "tf32"
    assert Target("sm_80").fp32_math == FP32_MATH_DEFAULT
    assert cli.build_parser().parse_args(["rewrite", "m.onnx", "-o", "out.onnx"]).fp32_math == FP32_MATH_DEFAULT


@pytest.mark.parametrize("value, want", [("1", True), ("true", True), ("TRUE", True), (True, True), (1, True),
                                         ("0", False), ("false", False), ("", False), (False, False), (0, False)])
def test_verify_is_read_one_way(value, want):
    assert options.verify({"verify": value}) is want
    assert options.check({"verify": value})["verify"] in ("1", "0", "true", "false", "TRUE", "")


@pytest.mark.parametrize("opts, needle", [({"bogus": "1"}, "unknown PlusEP provider option 'bogus'"),
                                          ({"verify": "yes"}, "verify='yes': use '1' or '0'"),
                                          ({"fp32_math": "fp16"}, "fp32_math='fp16'")])
def test_bad_options_are_named(opts, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        options.check(opts)
    with pytest.raises(ValueError, match=re.escape(needle)):       # the session wrapper says the same
        session._split_providers([("PlusEP", opts)], None)


def test_arch_policy():
    assert options.arch_for({"arch": "90"}) == "sm_90"
    assert options.arch_for({}, cc="9.0") == "sm_90a" and options.arch_for({}, cc="8.6") == "sm_86"
    assert options.arch_for({"arch": "sm_80"}, cc="9.0") == "sm_80"      # the option wins over the device
    assert options.arch_for({}) is None
    with pytest.raises(ValueError, match="unsupported GPU architecture"):
        options.arch_for({}, cc="10.0")
    assert options.cli_archs("none") == [] and options.cli_archs("sm_80, 90a") == ["sm_80", "sm_90a"]
    assert options.disabled({"disable": "gemm, attention,"}) == ("attention", "gemm")
