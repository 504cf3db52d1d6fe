"""PlusEP's run options, one owner: their names, accepted values, defaults and the arch policy.

Used by the CLI (`plus-ep rewrite --arch/--fp32-math`), `plus_ep.InferenceSession` (provider options)
and the plugin EP's planner (plus_ep/ep.py, which gets the options from plus_ep/native/ep_factory.c as
JSON); tests/cpu/test_options.py checks ep_factory.c's names and accepted values against this table.

    opts = options.check({"arch": "sm_90", "verify": "true"})   # strings; ValueError names the option
    options.fp32_math(opts), options.disabled(opts), options.verify(opts)
    options.arch_for(opts, cc="9.0")          # the `arch` option, else the device's: "sm_90a"
    options.cli_archs("auto")                 # the local GPU's arch, else ["sm_80", "sm_90a"]

| option    | values                         | default                                           |
|-----------|--------------------------------|---------------------------------------------------|
| arch      | an arch of kernels/arch.py (sm_80, ..., sm_90a) | the local GPU's, else the EP device's |
| cache_dir | a folder                       | $PLUS_EP_CACHE_DIR, else ~/.cache/plus_ep         |
| disable   | comma-separated pattern names of the warehouse, or `all` | none                    |
| fp32_math | exact, tf32                    | tf32 (as ONNX Runtime's CUDA EP, use_tf32=1)      |
| verify    | 1, 0, true, false (any case)   | 0                                                 |
| cuda_graph | 1, 0, true, false (any case)  | 0 (1: the plugin EP captures a run into a CUDA graph and replays it) |
| cuda_graph_warmup | a run count, 0 to 1000 | 1 (runs before the capture)                          |
| kernel_times | 1, 0, true, false (any case) | 0 (1: CUDA events around each node's launches, `PlusEP_NodeStats`) |
| trust     | any, verify                    | verify (embedded kernels run only when trusted: plus_ep/trust.py; any: opt out, warns once) |

The last three are the plugin EP's own (plus_ep/native/ep_stream.c); `plus_ep.InferenceSession` passes
them on.

Bad options, one way everywhere: `check` raises ValueError naming the option and what it accepts, and every
front end turns that into its own error at once, never a fallback: `plus_ep.InferenceSession` raises it,
the plugin EP's factory (ep_factory.c) refuses the session with the same text (its C checks of names and
values, then, in a Python process, this `check` through the option-check callback plus_ep/ep.py installs,
which also knows the warehouse's pattern names), and the CLI exits 2 with it.

Archs (`DEFAULT_ARCHS`, the policy): sm_80 SASS runs on every Ampere and Ada GPU (sm_86, sm_89) and its
PTX is what a newer GPU JIT-compiles; sm_90a holds the Hopper kernels (wgmma, TMA, clusters) that run on
compute capability 9.0 exactly (H100, H200), which the launcher prefers there. Plain sm_90 kernels add
nothing on a 9.0 device once sm_90a is built; build sm_90 instead of sm_90a only to leave out
the arch-specific instructions (debugging, comparing).
"""
from __future__ import annotations

from dataclasses import dataclass

from .kernels.target import FP32_MATH_DEFAULT, FP32_MATHS

NAME = "PlusEP"                   # the provider name in providers=[...] and the EP library's name
DEFAULT_ARCHS = ("sm_80", "sm_90a")   # what the CLI's `--arch auto` builds on a machine without a GPU PlusEP builds for
VERIFY_ON, VERIFY_OFF = ("1", "true"), ("0", "false", "")   # compared case-insensitively, as ep_factory.c


@dataclass(frozen=True)
class Option:
    name: str
    default: str                  # "" = not set
    values: tuple = ()            # the accepted spellings; () = free text
    help: str = ""


OPTIONS = (   # in the order ep_factory.c's OPTION_NAMES lists them
    Option("arch", "", (), "GPU arch of the kernels (sm_80, sm_90a, ...); default: the local GPU, else the "
                           "EP device's"),
    Option("cache_dir", "", (), "cache root; default $PLUS_EP_CACHE_DIR, else ~/.cache/plus_ep"),
    Option("cuda_graph", "0", VERIFY_ON + VERIFY_OFF[:2], "1: capture a run of PlusEP's stream into a CUDA graph "
                                                          "and replay it (device-bound inputs and outputs)"),
    Option("cuda_graph_warmup", "1", (), "runs before the CUDA-graph capture (0 to 1000)"),
    Option("disable", "", (), "comma-separated pattern names not to fuse ('all': none fused)"),
    Option("fp32_math", FP32_MATH_DEFAULT, FP32_MATHS, "fp32 GEMMs and attention: TF32 tensor cores ('tf32') or "
                                                      "exact SIMT ('exact')"),
    Option("kernel_times", "0", VERIFY_ON + VERIFY_OFF[:2], "1: CUDA events around each node's launches "
                                                            "(PlusEP_NodeStats)"),
    Option("trust", "verify", ("any", "verify"), "any: run a rewritten model's embedded kernels without the trust "
                                                 "check (plus_ep/trust.py; one warning per process)"),
    Option("verify", "0", VERIFY_ON + VERIFY_OFF[:2], "1: compare one random run with the plain providers"),
)
FLAGS = ("cuda_graph", "kernel_times", "verify")   # on/off options, read as `verify` is
NAMES = tuple(o.name for o in OPTIONS)
_BY_NAME = {o.name: o for o in OPTIONS}


ORT_OWN = ("device_id",)          # ORT's own selector among an EP's devices: accepted, not PlusEP's


def check(opts: dict | None) -> dict[str, str]:
    """`opts` as strings (True -> "1"), validated: an unknown name or a value outside an option's
    accepted ones raises ValueError naming the option and what it accepts (ep_factory.c's rules, plus
    the warehouse's pattern names for `disable`)."""
    from .kernels.arch import ARCHS
    out = {}
    for name, value in (opts or {}).items():
        if name in ORT_OWN:
            continue
        if name not in _BY_NAME:
            raise ValueError(f"unknown PlusEP provider option {name!r} (session config entry ep.plusep.{name}); "
                             f"known options: {', '.join(NAMES)}")
        text = ("1" if value else "0") if isinstance(value, bool) else str(value)
        if name == "arch" and text and text not in ARCHS:
            raise ValueError(f"PlusEP provider option arch={text!r}: use " + " or ".join(repr(a) for a in ARCHS))
        if name == "disable":
            problem = pattern_problem([p.strip() for p in text.split(",") if p.strip()])
            if problem:
                raise ValueError(f"PlusEP provider option disable={text!r}: {problem}")
        if name in FLAGS:
            _verify_flag(text, name)
        elif name == "cuda_graph_warmup" and not (text.isdigit() and int(text) <= 1000):
            raise ValueError(f"PlusEP provider option cuda_graph_warmup={text!r}: use a run count from 0 to 1000")
        elif _BY_NAME[name].values and text not in _BY_NAME[name].values:
            raise ValueError(f"PlusEP provider option {name}={text!r}: use "
                             + " or ".join(repr(v) for v in _BY_NAME[name].values))
        out[name] = text
    return out


def pattern_problem(names) -> str | None:
    """Why `names` (patterns not to fuse) cannot be used: an unknown one, named with the warehouse's
    patterns; None when they are all known (or "all")."""
    names = [n for n in names if n != "all"]
    if not names:
        return None
    from .warehouse import default_warehouse
    have = [p.name for p in default_warehouse()]
    unknown = [n for n in names if n not in have]
    if unknown:
        return f"unknown pattern {unknown[0]!r}; patterns: {', '.join(have)} (or 'all')"
    return None


def _verify_flag(text: str, name: str = "verify") -> bool:
    if text.lower() in VERIFY_ON:
        return True
    if text.lower() in VERIFY_OFF:
        return False
    raise ValueError(f"PlusEP provider option {name}={text!r}: use '1' or '0'")


def verify(opts: dict) -> bool:
    """The `verify` option: 1/true on, 0/false/empty/absent off (any case; True and 1 too)."""
    value = opts.get("verify", "")
    return _verify_flag(("1" if value else "0") if isinstance(value, (bool, int)) else str(value))


def fp32_math(opts: dict) -> str:
    """The `fp32_math` option, else the default (ep_factory.c sends "" when it is not set)."""
    return opts.get("fp32_math") or FP32_MATH_DEFAULT


def disabled(opts: dict) -> tuple[str, ...]:
    """The `disable` option's pattern names, sorted; "all" stands for every pattern of the warehouse."""
    names = sorted(p.strip() for p in (opts.get("disable") or "").split(",") if p.strip())
    if "all" in names:
        from .warehouse import default_warehouse
        return tuple(sorted(p.name for p in default_warehouse()))
    return tuple(names)


def arch_for(opts: dict, cc: str | None = None) -> str | None:
    """The arch kernels are built for: the `arch` option, else the device's compute capability `cc`
    ("9.0" -> "sm_90a", the arch table's choice); None when neither is given. ValueError for an arch
    PlusEP does not build for."""
    from .kernels.arch import for_device, parse
    if opts.get("arch"):
        return parse(opts["arch"])
    if not cc:
        return None
    major, _, minor = str(cc).partition(".")
    return parse(for_device(int(major), int(minor or 0)))


def cli_archs(spec: str | None) -> list[str]:
    """`--arch`: "auto" (or nothing) = the local GPU's arch if PlusEP builds for it, else DEFAULT_ARCHS;
    "none" = no kernels; else comma-separated archs. ValueError for an unknown arch."""
    from .kernels.arch import ARCHS, parse
    from .kernels.compile import nvrtc
    spec = (spec or "auto").strip().lower()
    if spec == "none":
        return []
    if spec == "auto":
        local = nvrtc.local_arch()
        return [local] if local in ARCHS else list(DEFAULT_ARCHS)
    return [parse(a) for a in spec.split(",") if a.strip()]
