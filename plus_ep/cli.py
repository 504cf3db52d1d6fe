"""`plus-ep` command line: rewrite a model offline, inspect the fusion report, explain a pattern.

    plus-ep rewrite in.onnx -o out.onnx [--arch sm_80,sm_90,sm_90a | --arch none] [--disable PATTERN ...] [--report]
    plus-ep inspect model.onnx [--json] [--graphs]
    plus-ep explain model.onnx --pattern attention
    plus-ep explain --list
    plus-ep cache info | clear [KIND ...] | trim
    plus-ep --version

Errors are one line on stderr (`plus-ep: error: ...`): exit 2 for input the compiler cannot read
(not ONNX, truncated, missing, cyclic, unknown pattern, bad option), exit 1 for an internal error;
`--debug` re-raises instead, for developers. Long steps show a progress bar on a terminal
(plus_ep/progress.py); `-q` hides it, `-v` prints lines as the work goes instead.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import onnx

from . import progress
from .explain import explain, format_explanation, format_pattern_list
from .kernels.arch import ARCHS
from . import config
from .options import DEFAULT_ARCHS, FP32_MATH_DEFAULT, FP32_MATHS, cli_archs
from .report_text import format_fused_report, format_kernel_check, format_rewrite_report, fused_report, is_rewritten

log = logging.getLogger("plus_ep")

PROG = "plus-ep"
# protobuf cannot serialize a message of 2 GiB or more; larger models are saved with external data
EXTERNAL_DATA_THRESHOLD = 2**31 - 1


class UsageError(ValueError):
    """Bad arguments or input the user can fix (exit code 2)."""


class _Version(argparse.Action):
    """`--version`: PlusEP's version and the versions that decide what it builds and loads."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def version_text() -> str:
    import platform

    import onnxruntime as ort
    from . import __version__
    return (f"{PROG} {__version__} (onnxruntime {ort.__version__}, onnx {onnx.__version__}, "
            f"Python {platform.python_version()})")


def _zoo_help() -> str:
    from .zoo.configs import EXPORTERS, FAMILIES, SIZES
    return (f"a path, or zoo:FAMILY[/EXPORTER][@SIZE] for a model-zoo export (built with torch on first use, "
            f"the [models] extra): families {', '.join(FAMILIES)}; exporters {', '.join(EXPORTERS)} "
            f"(default {EXPORTERS[0]}); sizes {', '.join(SIZES)} (default {SIZES[0]}); e.g. zoo:bert, "
            f"zoo:gpt2/dynamo@real")


# ------------------------------------------------------------------------------------------------
# argument parsing
# ------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The `plus-ep` parser: the global flags, then one sub-parser per command, each added by its own
    function in `COMMANDS` (help order). docs/reference/cli.md is generated from this parser."""
    # the flags work before or after the command; SUPPRESS keeps a subcommand's defaults from
    # overwriting what was given before it
    common = _flags(argparse.SUPPRESS, argparse.SUPPRESS, argparse.SUPPRESS)
    ap = argparse.ArgumentParser(
        prog=PROG, parents=[_flags(0, False, False)],
        description="PlusEP: PluS-style pluggable graph fusion for ONNX models.",
        epilog=f"MODEL and IN: {_zoo_help()}.")
    ap.add_argument("--version", action=_Version, help="print the version (and onnxruntime's, onnx's) and exit")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add_command in COMMANDS:
        add_command(sub, common)
    return ap


def _flags(default_verbose, default_debug, default_quiet) -> argparse.ArgumentParser:
    """-v, -q and --debug: on the main parser (with defaults) and on every command (SUPPRESSed)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-v", "--verbose", action="count", default=default_verbose,
                   help="print progress lines as the work goes and log (-v: INFO, -vv: DEBUG) on the "
                        "'plus_ep' logger")
    p.add_argument("-q", "--quiet", action="store_true", default=default_quiet,
                   help="no progress bar (it shows only on a terminal anyway)")
    p.add_argument("--debug", action="store_true", default=default_debug,
                   help="re-raise errors with a traceback instead of a one-line message")
    return p


def _rewrite_command(sub, common) -> None:
    """`plus-ep rewrite`: rewrite a model: IN -> OUT with fused nodes and kernels."""
    model_help = _zoo_help()
    rw = sub.add_parser("rewrite", parents=[common], help="rewrite a model into ai.plus_ep::Fused nodes",
                        description="Identify fusable subgraphs and save the rewritten model. The output "
                                    "runs on any ONNX Runtime (fused nodes carry their original "
                                    "subgraph as a model-local function).")
    rw.add_argument("input", metavar="IN", help=f"input .onnx model: {model_help}")
    rw.add_argument("-o", "--output", metavar="OUT", required=True, help="output .onnx path")
    rw.add_argument("--disable", metavar="PATTERN", nargs="+", default=[], action="extend",
                    help="warehouse patterns not to use")
    rw.add_argument("--report", action="store_true", help="also print the fusion report")
    rw.add_argument("--arch", metavar="ARCHS", default="auto",
                    help=f"GPU archs to compile the kernels for, comma-separated ({', '.join(ARCHS)}); "
                         f"'auto' (default): the local GPU, else {','.join(DEFAULT_ARCHS)}; 'none': no kernels "
                         "(portable functions only). sm_90a: Hopper's wgmma/TMA kernels, which run on H100/H200 "
                         "only; sm_90: portable Hopper kernels")
    rw.add_argument("--fp32-math", choices=FP32_MATHS, default=FP32_MATH_DEFAULT,
                    help=f"fp32 GEMMs and attention: TF32 tensor cores ('tf32') or exact SIMT ('exact'); "
                         f"default {FP32_MATH_DEFAULT!r}, as ONNX Runtime's CUDA EP (use_tf32=1)")
    rw.add_argument("--sign", metavar="KEY",
                    help="sign every fused node and the whole model with this Ed25519 private key (`plus-ep keygen`; "
                         "needs the [sign] extra): machines whose PLUS_EP_TRUSTED_KEYS lists its public key run the "
                         "nodes, and `plus-ep trust MODEL` there checks the whole model (docs/guide/trust.md)")
    rw.add_argument("--epcontext", choices=("embed", "file"),
                    help="write ONNX Runtime's EPContext form (what onnxruntime.ModelCompiler with PlusEP writes): "
                         "each fused node's kernels in an EPContext node, embedded ('embed') or in a file beside "
                         "OUT ('file'); runs only through PlusEP on a GPU its kernels serve (docs/guide/epcontext.md)")
    rw.set_defaults(func=cmd_rewrite)


def _trust_command(sub, common) -> None:
    """`plus-ep trust`: trust a rewritten model's kernels on this machine."""
    tr = sub.add_parser("trust", parents=[common], help="rebuild a rewritten model's kernels here; trust them if identical",
                        description="A model file is data: the launcher runs its embedded kernels only when this "
                                    "installation built them, a configured key signed them, or you opt out "
                                    "(docs/guide/trust.md). This rebuilds every fused node from its function body "
                                    "(this installation's renderer and NVRTC, kernels from the local cache) and "
                                    "records the nodes whose plan and images come out byte-identical in the trust "
                                    "manifest ($PLUS_EP_TRUST_DIR, else <cache root>/trusted). A model signed whole "
                                    "(`plus-ep rewrite MODEL -o OUT --sign KEY`) by a key PLUS_EP_TRUSTED_KEYS lists is recorded "
                                    "without a rebuild. Exits 1 when any node is left untrusted or could not be "
                                    "recorded (docs/guide/trust.md).")
    tr.add_argument("model", metavar="MODEL", help="rewritten .plus.onnx model with kernels")
    tr.add_argument("-o", "--output", metavar="OUT",
                    help="when some node differs: write the locally built model (trusted) here")
    tr.add_argument("--accept", action="store_true",
                    help="trust the embedded kernels as they are, without rebuilding (an explicit opt-out for "
                         "this model)")
    tr.add_argument("--status", action="store_true", help="only print how each fused node is trusted")
    tr.set_defaults(func=cmd_trust)


def _keygen_command(sub, common) -> None:
    """`plus-ep keygen`: make a signing key."""
    kg = sub.add_parser("keygen", parents=[common], help="make an Ed25519 key for signing rewritten models",
                        description="Write a new Ed25519 private key (PEM, mode 0600) and KEY.pub with its public "
                                    "line, the form PLUS_EP_TRUSTED_KEYS files list. Needs the [sign] extra.")
    kg.add_argument("key", metavar="KEY", help="private key file to write")
    kg.set_defaults(func=cmd_keygen)


def _demo_command(sub, common) -> None:
    """`plus-ep demo`: the demo BERT end to end."""
    dm = sub.add_parser("demo", parents=[common], help="build a small BERT, rewrite and compile it, compare",
                        description="Build a small BERT with onnx (no torch), rewrite it with kernels, print the "
                                    "fusion report, run the kernels on the CPU PTX interpreter through the launcher "
                                    "and check them (as `plus-ep verify`), and with a GPU compare PlusEP with the "
                                    "plain CUDA EP.")
    dm.add_argument("--layers", type=int, default=1)
    dm.add_argument("--batch", type=int, default=2, help="batch of the GPU comparison (default 2)")
    dm.add_argument("--seq", type=int, default=128, help="sequence length of the GPU comparison (default 128)")
    dm.add_argument("--verify-batch", type=int, default=1,
                    help="batch of the kernel check on the CPU PTX interpreter (default 1)")
    dm.add_argument("--verify-seq", type=int, default=8,
                    help="sequence length of the kernel check on the CPU PTX interpreter (default 8)")
    dm.add_argument("--no-verify", action="store_true", help="skip the kernel check on the CPU PTX interpreter")
    dm.add_argument("--arch", metavar="ARCHS", default="auto", help="as for rewrite")
    dm.set_defaults(func=cmd_demo)


def _verify_command(sub, common) -> None:
    """`plus-ep verify`: run the kernels on the CPU PTX interpreter and check them."""
    vf = sub.add_parser("verify", parents=[common], help="run a rewritten model's kernels on the CPU and check them",
                        description="Run the rewritten model on ORT CPU with the native launcher on the emulated "
                                    "CUDA driver: every kernel's PTX executes on PlusEP's PTX interpreter (checkers "
                                    "on). Compares each fused node's outputs with its function body on the same "
                                    "inputs, and the model's outputs with the original graph. Exit 1 on any "
                                    "mismatch beyond tolerance, checker finding, or node whose kernels did not run.")
    vf.add_argument("model", metavar="MODEL", help="rewritten .plus.onnx model with kernels (path)")
    vf.add_argument("--arch", metavar="ARCHS", default=None,
                    help="image archs to verify, comma-separated (default: every arch in the packs)")
    vf.add_argument("--batch", type=int, default=None,
                    help="batch size of the random inputs (default: batch 1, seq 8 for the model run, plus stress "
                         "runs at that shape and at one spanning every kernel tile; --batch/--seq run one shape)")
    vf.add_argument("--seq", type=int, default=None, help="sequence length of the random inputs (see --batch)")
    vf.add_argument("--past", type=int, default=0, metavar="N",
                    help="KV-cache length of a decoder exported with past key/values: --seq 1 --past N runs one "
                         "decode step at past length N (default 0: the prefill)")
    vf.add_argument("--inputs", metavar="NPZ", help="inputs from an .npz file instead of random ones")
    vf.add_argument("--no-stress", action="store_true",
                    help="skip the node-level runs on synthetic inputs (only the model run on its inputs)")
    vf.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    vf.add_argument("--no-cubin-check", action="store_true",
                    help="do not assemble each image's PTX with ptxas and compare it with the shipped cubin "
                         "(the PTX alone is verified: the report says the cubins were not checked)")
    vf.add_argument("--json", action="store_true", help="print the whole report as JSON")
    vf.set_defaults(func=cmd_verify)


def _profile_command(sub, common) -> None:
    """`plus-ep profile`: per-node counts and modelled times on the PTX interpreter."""
    pf = sub.add_parser("profile", parents=[common],
                        help="per fused node: flops, bytes, coalescing, CTAs, waves, modelled time",
                        description="With --emulate: run the kernels on the PTX interpreter and report per fused "
                                    "node the flops, compulsory and emulated DRAM bytes, sectors and shared-memory "
                                    "wavefronts per request against the ideal, tensor-core share, a roofline "
                                    "bound and, per node and kernel, the CTAs, waves and a wave-aware modelled time "
                                    "for the arch's reference part (an H100 SXM5 for sm_90a), with launch gaps on a "
                                    "stream and from a CUDA graph apart. A model from interpreted execution, not a "
                                    "measurement.")
    pf.add_argument("model", metavar="MODEL", help="rewritten .plus.onnx model with kernels")
    pf.add_argument("--emulate", action="store_true", help="run on the PTX interpreter (required: no GPU profiling yet)")
    pf.add_argument("--arch", metavar="ARCH", default=None, help="image arch (default: sm_90a if present, else the first)")
    pf.add_argument("--batch", type=int, default=1)
    pf.add_argument("--seq", type=int, default=8)
    pf.add_argument("--past", type=int, default=0, metavar="N",
                    help="KV-cache length of a decoder exported with past key/values (--seq 1 --past N: a decode step)")
    pf.add_argument("--inputs", metavar="NPZ", help="inputs from an .npz file instead of random ones")
    pf.add_argument("--sample-ctas", type=int, default=None, metavar="N",
                    help="run N CTAs per launch (corners first) and scale the counts to the grid")
    pf.add_argument("--json", action="store_true", help="print the whole profile as JSON")
    pf.set_defaults(func=cmd_profile)


def _inspect_command(sub, common) -> None:
    """`plus-ep inspect`: the fusion report."""
    model_help = _zoo_help()
    ins = sub.add_parser("inspect", parents=[common], help="print the fusion report of a model",
                         description="Rewrite in memory and print the fusion report; for a model that is "
                                     "already rewritten, report its fused nodes.")
    ins.add_argument("model", metavar="MODEL", help=f".onnx model: {model_help}")
    ins.add_argument("--json", action="store_true", help="print the whole report as JSON")
    ins.add_argument("--graphs", action="store_true", help="print each fused subgraph's +Graph")
    ins.add_argument("--disable", metavar="PATTERN", nargs="+", default=[], action="extend",
                     help="warehouse patterns not to use")
    ins.add_argument("--arch", metavar="ARCHS", default="auto",
                     help="render every subgraph's kernels for these archs (no NVRTC compile) and report what a "
                          "build delivers: subgraphs whose kernels cannot be rendered stay unfused, each listed "
                          "once with its reason (default: as for rewrite; 'none': fusion only)")
    ins.set_defaults(func=cmd_inspect)


def _explain_command(sub, common) -> None:
    """`plus-ep explain`: a pattern's best partial match."""
    model_help = _zoo_help()
    ex = sub.add_parser("explain", parents=[common], help="show a pattern's best partial match and why it stopped",
                        description="For the named pattern, show the largest subgraph growth where it "
                                    "matched exactly or partially, each step with the pattern's reason, "
                                    "and the reason growth stopped.")
    ex.add_argument("model", metavar="MODEL", nargs="?", help=f".onnx model: {model_help}")
    ex.add_argument("--pattern", "-p", metavar="NAME", help="warehouse pattern name")
    ex.add_argument("--list", action="store_true", help="list the warehouse patterns with their +Graphs")
    ex.set_defaults(func=cmd_explain)


def _cache_command(sub, common) -> None:
    """`plus-ep cache`: the caches."""
    kinds = ", ".join(config.CACHE_KINDS)
    ca = sub.add_parser("cache", parents=[common], help="show, clear or trim PlusEP's caches",
                        description=f"PlusEP's caches under the cache root (PLUS_EP_CACHE_DIR, else "
                                    f"{config.DEFAULT_ROOT}): compiled kernels, rewritten models, model-zoo exports "
                                    f"(PLUS_EP_ZOO_DIR). The kernel and model caches stay under a size limit "
                                    f"(PLUS_EP_KERNEL_CACHE_LIMIT, PLUS_EP_MODEL_CACHE_LIMIT), the entries used "
                                    f"longest ago removed first.")
    csub = ca.add_subparsers(dest="cache_command", metavar="ACTION")
    csub.required = True
    ci = csub.add_parser("info", parents=[common], help="size and entries per kind, limits, folders")
    ci.add_argument("--json", action="store_true", help="print it as JSON")
    cc = csub.add_parser("clear", parents=[common], help=f"remove cached entries (kinds: {kinds}; default all)")
    cc.add_argument("kinds", metavar="KIND", nargs="*", help=f"which caches to clear: {kinds} (default: all three)")
    csub.add_parser("trim", parents=[common], help="apply the size limits now (least recently used entries first)")
    ca.set_defaults(func=cmd_cache)


COMMANDS = (_rewrite_command, _trust_command, _keygen_command, _demo_command, _verify_command, _profile_command,
            _inspect_command, _explain_command, _cache_command)


def main(argv=None) -> int:
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:           # --help, or argparse's own usage error (exit 2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    _setup_logging(args.verbose)
    progress.set_mode("quiet" if args.quiet else "lines" if args.verbose else "auto")
    try:
        for field in ("input", "model"):
            if isinstance(getattr(args, field, None), str) and getattr(args, field).startswith("zoo:"):
                setattr(args, field, resolve_zoo(getattr(args, field)))
        return args.func(args) or 0
    except BrokenPipeError:             # `plus-ep inspect big.onnx | head`: stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1
    except KeyboardInterrupt:
        if args.debug:
            raise
        _error("interrupted")
        if argv is None:                # the program itself (not a caller's main([...])): leave now
            _exit_now(130)
        return 130
    except (UsageError, ValueError, OSError, onnx.checker.ValidationError) as exc:
        # ModelError is a ValueError: unreadable / invalid input
        if args.debug:
            raise
        _error(_one_line(exc) if not isinstance(exc, OSError) else _os_message(exc))
        return 2
    except Exception as exc:  # noqa: BLE001 - the CLI never shows a bare traceback
        if args.debug:
            raise
        _error(f"internal error: {type(exc).__name__}: {_one_line(exc)} (rerun with --debug for a traceback)")
        return 1


def _exit_now(code: int) -> None:
    """End the process at once after Ctrl-C: kernel compiles still in flight (NVRTC cannot be stopped,
    kernels/compile/jobs.py) end with it, and the seconds an interpreter can spend tearing down a
    rewrite's heap are skipped. Output is flushed first; nothing is left half-written (outputs and cache
    entries are written to temporaries and moved into place)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)


def resolve_zoo(spec: str) -> str:
    """``zoo:FAMILY[/EXPORTER][@SIZE]`` -> the path of that model-zoo export (built if needed)."""
    from . import zoo
    body = spec[len("zoo:"):]
    body, _, size = body.partition("@")
    family, _, exporter = body.partition("/")
    if family not in zoo.FAMILIES:
        raise UsageError(f"{spec}: unknown zoo family {family!r}; have {', '.join(zoo.FAMILIES)}")
    if exporter and exporter not in zoo.EXPORTERS:
        raise UsageError(f"{spec}: unknown exporter {exporter!r}; have {', '.join(zoo.EXPORTERS)}")
    try:
        return str(zoo.export(family, exporter or "torchscript", size or "small"))
    except zoo.MissingModelsExtra as exc:       # torch / transformers not installed: the user's to fix
        raise UsageError(f"{spec}: {exc}") from None


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (stdout stays clean for --json)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


_LOG_STATE = {"handler": None, "level": None}


def _setup_logging(verbose: int) -> None:
    """-v: INFO, -vv: DEBUG on the 'plus_ep' logger; each main() call undoes the previous call's."""
    logger = logging.getLogger("plus_ep")
    if _LOG_STATE["handler"] is not None:
        logger.removeHandler(_LOG_STATE["handler"])
        logger.setLevel(_LOG_STATE["level"])
        _LOG_STATE.update(handler=None, level=None)
    if verbose <= 0:
        return
    _LOG_STATE.update(handler=_StderrHandler(), level=logger.level)
    logger.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)
    logger.addHandler(_LOG_STATE["handler"])


def _error(msg: str) -> None:
    print(f"{PROG}: error: {msg}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, KeyError) and text.startswith(("'", '"')):
        text = text[1:-1]
    return " ".join(text.split())


def _os_message(exc: OSError) -> str:
    if exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or _one_line(exc)}"
    return _one_line(exc)


# ------------------------------------------------------------------------------------------------
# rewrite
# ------------------------------------------------------------------------------------------------
def cmd_rewrite(args) -> int:
    from .report import report
    from .rewrite import rewrite_detailed

    out = os.path.abspath(args.output)
    out_dir = os.path.dirname(out)
    if not os.path.isdir(out_dir):
        raise UsageError(f"{args.output}: output directory {out_dir} does not exist")
    if os.path.isdir(out):
        raise UsageError(f"{args.output}: is a directory")
    archs = resolve_archs(args.arch)
    check_patterns(args.disable)
    if args.sign and not archs:
        raise UsageError("--sign needs kernels to sign (drop --arch none)")
    if args.epcontext and not archs:
        raise UsageError("--epcontext needs kernels (drop --arch none)")
    if args.epcontext and args.sign:
        raise UsageError("--epcontext with --sign: the whole-model signature would not cover the EPContext form; "
                         "sign the rewritten model instead (or leave out --sign)")
    result = rewrite_detailed(args.input, disable=tuple(args.disable), archs=archs,
                              progress=None, fp32_math=args.fp32_math, warn=False)
    signed = 0
    if args.sign:
        from . import trust
        signed = trust.sign_model(result.model, args.sign)
        trust.sign_whole_model(result.model, args.sign)      # last: nothing changes the model after it
    rep = report(result)
    if result.kernels is not None:
        for _, name, reason in result.kernels.failures:
            print(f"note: {name} stays unfused: {reason}", file=sys.stderr)
    if not result.subgraphs:
        _copy_untouched(result.model, out, args.input)
        print(f"{args.input}: nothing to fuse; wrote the model unchanged to {args.output} "
              f"({rep['data_kernels_before']} data kernels, {result.seconds:.2f}s)")
    else:
        model = result.model
        if args.epcontext:
            from .epcontext import to_epcontext
            model = to_epcontext(model, out, embed=args.epcontext == "embed")
        external = save_model(model, out)
        print(f"{args.input} -> {args.output}: {len(result.subgraphs)} fused subgraphs "
              f"({rep['functions']} distinct), data kernels {rep['data_kernels_before']} -> "
              f"{rep['data_kernels_after']}, {result.seconds:.2f}s"
              + (f" (weights in {os.path.basename(external)})" if external else "")
              + (f", kernels for {','.join(archs)}" if archs else ", no kernels")
              + (f", {signed} nodes and the whole model signed" if args.sign else "")
              + (f", as EPContext nodes ({'embedded' if args.epcontext == 'embed' else 'side files'})"
                 if args.epcontext else ""))
    if args.report:
        print()
        print(format_rewrite_report(rep, args.input))
    return 0


def cmd_trust(args) -> int:
    from . import trust
    from .rewrite import load_model
    model = load_model(args.model)
    nodes = trust.status(model)
    if not nodes:
        raise UsageError(f"{args.model}: no fused node carries kernels (nothing to trust)")
    if args.status:
        width = max(len(n.node) for n in nodes)
        for n in nodes:
            print(f"{n.node:<{width}}  {(n.digest or '-' * 16)[:16]}  {n.how or 'NOT TRUSTED: ' + n.why}")
        signer = trust.model_signer(model)
        print(f"{sum(bool(n.how) for n in nodes)} of {len(nodes)} fused nodes trusted here"
              + (f"; the whole model is signed by listed key {signer}" if signer else ""))
        return 0 if all(n.how for n in nodes) else 1
    todo = trust.kernel_nodes(model)
    signer = trust.model_signer(model)
    if signer or args.accept:
        note = (f"whole model signed by key {signer} ({args.model})" if signer else
                f"accepted without rebuilding (plus-ep trust --accept {args.model})")
        recorded, failed = trust.record_nodes(todo, note)
        if signer:
            print(f"{args.model}: the whole model is signed by key {signer} (PLUS_EP_TRUSTED_KEYS lists it): "
                  f"{recorded} of {len(todo)} fused nodes recorded as trusted")
        else:
            print(f"warning: {args.model}: the embedded kernels of its {len(todo)} fused nodes are trusted as they "
                  "are, unchecked; a model file can carry any GPU code", file=sys.stderr)
        return _recorded_all(args.model, recorded, len(todo), failed[0] if failed else "")
    from .rebuild import rebuild
    r = rebuild(model)
    recorded, failed = 0, []
    for node in todo:
        if r.same.get(node.name):
            try:
                trust.record(trust.node_digest(node), f"rebuilt here byte-identical ({args.model}): node {node.name}")
                recorded += 1
            except trust.RecordError as exc:
                failed.append(str(exc))
    width = max(len(n) for n in r.same)
    for name, same in r.same.items():
        print(f"{name:<{width}}  {'identical: trusted' if same else 'DIFFERS from the local build'}")
    differ = [k for k, v in r.same.items() if not v]
    print(f"{args.model}: {len(r.same) - len(differ)} of {len(r.same)} fused nodes rebuilt byte-identical "
          f"({','.join(r.archs)}, fp32 math {r.fp32_math}, {r.seconds:.1f}s)")
    if failed:
        return _recorded_all(args.model, recorded, len(r.same) - len(differ), failed[0])
    if not differ:
        return 0
    if args.output:
        out = save_model(r.local, os.path.abspath(args.output))
        print(f"wrote the locally built model to {args.output} (its kernels are trusted here)"
              + (f"; weights in {os.path.basename(out)}" if out else ""))
        return 0
    _error(f"{args.model}: {len(differ)} fused node(s) differ from what this installation builds from their "
           f"function bodies ({', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''}); the launcher refuses "
           "them. Run the locally built model instead: plus-ep trust MODEL -o OUT")
    return 1


def _recorded_all(model: str, recorded: int, want: int, why: str = "") -> int:
    """0 when every node was recorded; else the one-line error (the launcher refuses the rest) and 1."""
    if recorded == want:
        return 0
    _error(f"{model}: recorded {recorded} of {want} fused nodes as trusted; the launcher refuses the others"
           + (f" ({why})" if why else ""))
    return 1


def cmd_keygen(args) -> int:
    from . import trust
    pub, line = trust.keygen(args.key)
    print(f"wrote {args.key} (private, mode 0600) and {pub}:\n{line}\n"
          "List that line in the file PLUS_EP_TRUSTED_KEYS names on every machine that should run models signed "
          f"with `plus-ep rewrite MODEL -o OUT --sign {args.key}`.")
    return 0


def cmd_demo(args) -> int:
    from . import demo
    archs = resolve_archs(args.arch) if args.arch != "auto" else None
    summary = demo.run(layers=args.layers, batch=args.batch, seq=args.seq, archs=archs,
                       verify_kernels=not args.no_verify, verify_batch=args.verify_batch, verify_seq=args.verify_seq)
    return 0 if summary.get("kernels_verified", True) else 1


def cmd_verify(args) -> int:
    from .verification.check import verify, verify_text
    archs = resolve_archs(args.arch) if args.arch else None
    if (args.batch is not None and args.batch < 1) or (args.seq is not None and args.seq < 1) or args.past < 0:
        raise UsageError("--batch and --seq must be at least 1, --past at least 0")
    if args.inputs and (args.batch is not None or args.seq is not None or args.past):
        raise UsageError("--inputs fixes the shapes: leave out --batch, --seq and --past")
    report = verify(args.model, archs=archs, batch=args.batch, seq=args.seq, inputs=args.inputs, seed=args.seed,
                    stress=not args.no_stress, past=args.past, cubins=not args.no_cubin_check)
    if args.json:
        print(json.dumps(report, indent=1, default=float))
    else:
        print(verify_text(report))
    return 0 if report["ok"] else 1


def cmd_profile(args) -> int:
    from .verification.profile import profile, profile_text
    if not args.emulate:
        raise UsageError("profile needs --emulate (kernels run on the CPU PTX interpreter; GPU profiling is "
                         "Nsight Compute's job)")
    if args.batch < 1 or args.seq < 1 or args.past < 0:
        raise UsageError("--batch and --seq must be at least 1, --past at least 0")
    if args.sample_ctas is not None and args.sample_ctas < 1:
        raise UsageError(f"--sample-ctas {args.sample_ctas}: run at least 1 CTA per launch (leave the option out to "
                         "run every CTA)")
    arch = resolve_archs(args.arch)[0] if args.arch else None
    rep = profile(args.model, arch=arch, batch=args.batch, seq=args.seq, inputs=args.inputs,
                  sample_ctas=args.sample_ctas, past=args.past)
    print(json.dumps(rep, indent=1, default=float) if args.json else profile_text(rep))
    return 0 if rep["ok"] else 1


def check_patterns(names) -> None:
    """--disable: every name a warehouse pattern (options.pattern_problem, as the `disable` option)."""
    from .options import pattern_problem
    problem = pattern_problem(names)
    if problem:
        raise UsageError(f"--disable: {problem}")


def resolve_archs(spec: str) -> list:
    """--arch: 'auto' = the local GPU's arch, else sm_80 and sm_90; 'none' = no kernels (options.cli_archs)."""
    try:
        return cli_archs(spec)
    except ValueError as exc:
        raise UsageError(f"--arch: {exc}") from None


def _names_out(fn):
    """An OSError while writing through a hidden temporary (`.plus-ep-*.onnx.tmp`) names OUT instead."""
    def wrapped(model, out, *a, **kw):
        try:
            return fn(model, out, *a, **kw)
        except OSError as exc:
            if exc.filename is not None and os.path.basename(str(exc.filename)).startswith(".plus-ep-"):
                raise OSError(exc.errno, f"cannot write it ({exc.strerror or exc})", out) from None
            raise
    wrapped.__doc__, wrapped.__name__ = fn.__doc__, fn.__name__
    return wrapped


def _has_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


@_names_out
def _copy_untouched(model: onnx.ModelProto, out: str, src) -> None:
    """Nothing fused: copy the input file byte for byte when that is self-contained and already at the IR
    version `model` has (rewrite lowers one onnxruntime cannot load)."""
    try:
        probe = onnx.load(os.fspath(src), load_external_data=False)
        self_contained = not _has_external_data(probe) and probe.ir_version == model.ir_version
    except Exception:  # noqa: BLE001
        self_contained = False
    if self_contained and os.path.abspath(src) != out:
        fd, tmp = tempfile.mkstemp(prefix=".plus-ep-", suffix=".onnx.tmp", dir=os.path.dirname(out))
        os.close(fd)
        try:
            shutil.copyfile(src, tmp)
            _plain_mode(tmp)
            os.replace(tmp, out)
        except BaseException:
            _remove(tmp)
            raise
    else:
        save_model(model, out)


@_names_out
def save_model(model: onnx.ModelProto, out: str) -> str | None:
    """Save atomically: write into a temporary file (or folder, with external data) in the output's
    directory, then os.replace; a failure never leaves a partial OUT. Models too large for one
    protobuf get their tensors in `OUT.data` next to OUT. Returns that data path or None."""
    out = os.path.abspath(out)
    out_dir = os.path.dirname(out)
    if _proto_size(model) < EXTERNAL_DATA_THRESHOLD:
        fd, tmp = tempfile.mkstemp(prefix=".plus-ep-", suffix=".onnx.tmp", dir=out_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(model.SerializeToString())
            _plain_mode(tmp)
            os.replace(tmp, out)
        except BaseException:
            _remove(tmp)
            raise
        return None
    location = os.path.basename(out) + ".data"
    tmpdir = tempfile.mkdtemp(prefix=".plus-ep-", dir=out_dir)
    moved_data = False
    try:
        staged = os.path.join(tmpdir, os.path.basename(out))
        onnx.save_model(model, staged, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=location, size_threshold=1024)
        data = os.path.join(tmpdir, location)
        wrote_data = os.path.exists(data)
        if wrote_data:
            os.replace(data, os.path.join(out_dir, location))
            moved_data = True
        os.replace(staged, out)
    except BaseException:
        if moved_data:          # the model did not follow its data: no orphan OUT.data either
            _remove(os.path.join(out_dir, location))
        raise
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return os.path.join(out_dir, location) if wrote_data else None


def _proto_size(model: onnx.ModelProto) -> int:
    try:
        return model.ByteSize()
    except Exception:  # noqa: BLE001 - some protobuf builds refuse to size >2 GiB messages
        return EXTERNAL_DATA_THRESHOLD


def _plain_mode(path: str) -> None:
    """mkstemp makes 0600 files; give the output the mode a plain open() would."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


# ------------------------------------------------------------------------------------------------
# cache
# ------------------------------------------------------------------------------------------------
def cache_folders() -> dict:
    """{kind: folder} of the three caches (plus_ep/config.py's layout)."""
    return {config.KERNELS: config.kernel_cache_dir(), config.MODELS: config.model_cache_dir(),
            config.ZOO: config.zoo_dir()}


def cache_info() -> dict:
    from . import model_cache
    from .kernels.compile.cache import KernelCache, tree_size
    folders = cache_folders()
    out = {"root": str(config.cache_root()), "kinds": {}}
    counts = {config.KERNELS: lambda: len(KernelCache(folders[config.KERNELS]).entries()),
              config.MODELS: lambda: len(model_cache.entries()),
              config.ZOO: lambda: sum(1 for f in folders[config.ZOO].glob("*.onnx"))
              if folders[config.ZOO].is_dir() else 0}
    for kind, folder in folders.items():
        limit = config.cache_limit(kind) if kind in config.CACHE_LIMITS else None
        out["kinds"][kind] = {"folder": str(folder), "bytes": tree_size(folder) if folder.exists() else 0,
                              "entries": counts[kind](), "limit": limit}
    out["bytes"] = sum(k["bytes"] for k in out["kinds"].values())
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def cmd_cache(args) -> int:
    from .kernels.compile.cache import KernelCache
    from . import model_cache
    folders = cache_folders()
    if args.cache_command == "info":
        info = cache_info()
        if args.json:
            print(json.dumps(info, indent=1))
            return 0
        print(f"PlusEP caches under {info['root']}")
        for kind, k in info["kinds"].items():
            limit = "" if k["limit"] is None else (f", limit {_mib(k['limit'])}" if k["limit"] else ", no limit")
            print(f"  {kind:<8} {_mib(k['bytes']):>12}  {k['entries']:>6} entries{limit}  {k['folder']}")
        print(f"  {'total':<8} {_mib(info['bytes']):>12}")
        return 0
    if args.cache_command == "trim":
        gone = KernelCache(folders[config.KERNELS]).evict() + model_cache.evict()
        print(f"removed {len(gone)} least recently used entries ({_mib(sum(e.size for e in gone))})")
        return 0
    kinds = args.kinds or list(config.CACHE_KINDS)
    bad = [k for k in kinds if k not in config.CACHE_KINDS]
    if bad:
        raise UsageError(f"cache clear: unknown kind {bad[0]!r}; kinds: {', '.join(config.CACHE_KINDS)}")
    from .kernels.compile.cache import tree_size
    for kind in dict.fromkeys(kinds):
        folder = folders[kind]
        before = tree_size(folder) if folder.exists() else 0
        if kind == config.KERNELS:
            KernelCache(folder).clear()
        else:
            _clear_folder(folder)
        left = tree_size(folder) if folder.exists() else 0
        print(f"{kind}: removed {_mib(before - left)} from {folder}"
              + (f" ({_mib(left)} left: in use or not removable)" if left else ""))
    from . import trust
    tdir = trust.trust_dir()
    if tdir.is_dir():              # the manifest is policy, not a cache: only failed writes' leftovers go
        print(f"trusted: removed {trust.sweep(tdir)} leftover .tmp files from {tdir} (its entries stay)")
    return 0


def _clear_folder(folder) -> None:
    """Remove what a model or zoo cache folder holds; another process's export in progress (a `.tmp-*`
    staging folder younger than an hour) is left alone."""
    import time
    if not folder.is_dir():
        return
    for child in folder.iterdir():
        try:
            if child.name.startswith(".tmp-") and time.time() - child.stat().st_mtime < 3600:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        except OSError as exc:
            log.warning("cannot remove %s (%s)", child, exc.strerror or exc)


# ------------------------------------------------------------------------------------------------
# inspect
# ------------------------------------------------------------------------------------------------
def cmd_inspect(args) -> int:
    from .report import report
    from .rewrite import load_model, rewrite_detailed

    model = load_model(args.model)
    if is_rewritten(model):
        rep = fused_report(model)
        if args.json:
            print(json.dumps({"model": args.model, **rep}, indent=2))
        else:
            print(format_fused_report(rep, args.model, graphs=args.graphs))
        return 0
    archs = resolve_archs(args.arch)
    check_patterns(args.disable)
    result = rewrite_detailed(model, disable=tuple(args.disable), archs=archs or None, compile_kernels=False,
                              warn=False, runtime_ir=False)   # a report: nothing is written
    rep = report(result)
    failures = [{"node": name, "reason": reason} for _, name, reason in sorted(result.kernels.failures)] \
        if result.kernels is not None else []
    if args.json:
        print(json.dumps({"model": args.model, "rewritten": False, **rep, "kernel_archs": archs,
                          "kernel_failures": failures}, indent=2))
    else:
        print(format_rewrite_report(rep, args.model, graphs=args.graphs))
        print(f"fp32 math: {rep['fp32_math']} ({_FP32_MATH_NOTE[rep['fp32_math']]})")
        print(format_kernel_check(archs, len(rep["subgraphs"]), failures))
    return 0


_FP32_MATH_NOTE = {"tf32": "TF32 tensor cores for fp32 GEMMs and attention, as ONNX Runtime's CUDA EP by default "
                           "(use_tf32=1); plus-ep rewrite IN -o OUT --fp32-math exact for exact fp32",
                   "exact": "exact fp32 SIMT GEMMs and attention"}


def cmd_explain(args) -> int:
    from .warehouse import default_warehouse

    wh = default_warehouse()
    names = [p.name for p in wh]
    if args.list:
        print(format_pattern_list(wh))
        return 0
    if not args.pattern:
        raise UsageError(f"explain needs --pattern NAME (or --list); available patterns: {', '.join(names)}")
    if args.pattern not in names:
        raise UsageError(f"no pattern {args.pattern!r}; available patterns: {', '.join(names)}")
    if not args.model:
        raise UsageError("explain needs a MODEL (or --list)")

    from .rewrite import load_model, rewrite_detailed
    model = load_model(args.model)
    if is_rewritten(model):
        print(f"note: {args.model} is already rewritten; its ai.plus_ep::Fused nodes are opaque to "
              "identification, so explain the original model for a full picture", file=sys.stderr)
    result = rewrite_detailed(model, warehouse=wh, runtime_ir=False)
    print(format_explanation(explain(result, args.pattern, wh.get(args.pattern)), args.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
