"""The launcher's limits as Python code reads them: the mirror of kernels/templates/plus_abi.h (PlusArgs
and the plan's PLUS_MAX_*, shared by every generated kernel and plus_ep/native/plan.h) and of the
image pack's bound in plus_ep/native/pack.c. tests/cpu/test_abi.py checks every number against the C.

A leaf like plus_ep/config.py (standard library only, imports nothing of plus_ep), so the compiler
core may read it: graph_rewrites (how many inputs and outputs a horizontal group may have, how many
CPU-resident shape inputs a fused node may take) and kernels (the plan and pack writers).
"""

# PlusArgs: the one parameter of every kernel entry point (864 bytes)
MAX_IN = 64            # PLUS_MAX_IN: a fused node's inputs
MAX_OUT = 8            # PLUS_MAX_OUT: its outputs
MAX_SCRATCH = 4        # PLUS_MAX_SCRATCH: scratch buffers of a plan
MAX_V = 32             # PLUS_MAX_V: integer values a plan computes per run
ARGS_BYTES = 8 * (MAX_IN + MAX_OUT + MAX_SCRATCH + MAX_V)

# a plan (kernels/wire/plan.py writes it, plus_ep/native/plan.c reads it)
MAX_RANK = 8           # PLUS_MAX_RANK: dims of an input or output
MAX_SYM = 32           # PLUS_MAX_SYM: symbols
MAX_ROUTES = 32        # PLUS_MAX_ROUTES: routes
MAX_KERNELS = 64       # PLUS_MAX_KERNELS: kernel lines, all routes together
MAX_GROUPS = 8         # PLUS_MAX_GROUPS: `arch` records (route groups)
MAX_ARCHS = 24         # PLUS_MAX_ARCHS: archs named by the `arch` records
MAX_STACK = 32         # PLUS_MAX_STACK: expression evaluation depth
MAX_SHAPEV = 16        # PLUS_MAX_SHAPEV: `shapev` lines (= the FusedHost<n> op types, graph_rewrites/fuse.py)
MAX_EQUAL = 32         # PLUS_MAX_EQUAL: `equal` lines (dims a rewrite assumed equal; `bcast` lines: MAX_SYM)
MAX_TMAP_LINES = 32    # PLUS_MAX_TMAP_LINES: `tmap` records, all kernel lines together

# generated code (the one number here without a C mirror, so not named MAX_*): a constant a kernel
# holds as a literal array has at most this many elements (kernels/codegen/pull.py); a larger Constant
# node stays outside a subgraph and is its input (graph_rewrites/identify.py)
LITERAL_ELEMENTS = 64

# an image pack (kernels/wire/pack.py writes it, plus_ep/native/pack.c reads it)
MAX_IMAGES = 4096      # PACK_MAX_IMAGES
