/* The launch plan (kernels/CONTRACT.md §1, §3): the argument struct, the parsed `plus_plan`
 * attribute, its limits and expressions. Pure C: no CUDA, no ONNX Runtime. Every function reports
 * errors as text in a caller buffer. Binding a run: bind.h; image packs: pack.h. */
#ifndef PLUS_PLAN_H_PLAN
#define PLUS_PLAN_H_PLAN

#include <stddef.h>
#include <stdint.h>

/* PlusArgs and the plan's limits (PLUS_MAX_*): one header shared with every generated kernel. */
#include "../../kernels/templates/plus_abi.h"
#include "dtype.h"

#define PLUS_SHAPEV_ELEMS 64  /* a `shapev` line reads one of the first 64 elements */
#define PLUS_NAME_LEN 128     /* node, entry, symbol and arch names incl. NUL */
#define PLUS_ERR_LEN 1024     /* suggested size of error buffers */

/* Expression items (reverse Polish). */
enum {
    PX_LIT, PX_SYM, PX_VAL,
    PX_ADD, PX_SUB, PX_MUL, PX_DIV, PX_MOD, PX_MIN, PX_MAX, PX_CDIV,
    PX_LT, PX_LE, PX_GT, PX_GE, PX_EQ, PX_NE, PX_AND, PX_OR, /* binary */
    PX_NOT, PX_TERN
};
typedef struct { int32_t op; int64_t arg; } plus_item;
typedef struct { int32_t off, n, line; } plus_expr;   /* items[off .. off+n), plan line (1-based) */

/* An `in` dim: a literal, `*` (any), `sK` (binds or checks symbol K), or an expression over symbols
 * (`s0,s1,*`: a [batch*seq, C] input), checked once every input axis and shape tensor is bound. */
enum { PLUS_DIM_LIT, PLUS_DIM_ANY, PLUS_DIM_SYM, PLUS_DIM_EXPR };
typedef struct {
    int dtype;                          /* ONNX Runtime element type (C API numbering) */
    int rank;
    int kind[PLUS_MAX_RANK];
    int64_t val[PLUS_MAX_RANK];         /* literal, or symbol index */
    plus_expr dexpr[PLUS_MAX_RANK];     /* PLUS_DIM_EXPR: the expression */
    int line;
    int host;                           /* 1: a shape tensor the launcher reads on the host (`shapev`) */
} plus_in_spec;

typedef struct {
    int dtype, rank, line;
    plus_expr dim[PLUS_MAX_RANK];
} plus_out_spec;

typedef struct {
    int route, image, line;   /* image: index into the pack of the route's group's arch */
    char entry[PLUS_NAME_LEN];
    plus_expr grid[3], block[3], smem;
} plus_kernel_spec;

/* `shapev <k> <input> <element> [<zero> [infer]]`: symbol k is element `element` of input `input`'s
 * values. `zero` says what a 0 there means (ONNX Reshape, allowzero 0, copies its input's dim): an
 * expression bound k takes instead (`s0`; `0` keeps the 0), or `-` (a 0 is refused); `infer`: the
 * Reshape also infers a -1, which a copied 0 leaves nothing to divide by (refused). Without `zero`
 * (plans written before the field existed) the 0 is taken as is. */
enum { PLUS_ZERO_ASIS, PLUS_ZERO_EXPR, PLUS_ZERO_REFUSE };
typedef struct { int sym, input, elem, line, zero, infer; plus_expr zexpr; } plus_shapev;

/* `exact in|out <i> <d>`: dim d of that line is a quotient num/den (ONNX Reshape's exact division). */
typedef struct { int out, index, dim, line; plus_expr num, den; } plus_exact;
#define PLUS_MAX_EXACT (PLUS_MAX_IN + PLUS_MAX_OUT)

/* `extent in|out <i> <expr>`: elements [0, expr) are all the kernels touch of that tensor (several lines
 * may name one tensor: its own shape's count, and that of a view the kernels index it through). */
typedef struct { int out, index; plus_expr e; } plus_extent;
#define PLUS_MAX_EXTENTS (2 * (PLUS_MAX_IN + PLUS_MAX_OUT))

/* `bcast in <i> <d> <expr>`: dim d of input i (a symbol of its own) is 1 or expr (ONNX broadcasting:
 * where it is 1 the kernels read that input with stride 0 along d). */
typedef struct { int index, dim, line; plus_expr e; } plus_bcast;
#define PLUS_MAX_BCAST PLUS_MAX_SYM

/* `equal <a> <b> <what...>`: a dim the rewrite took as equal to another (a Concat's axis and the sum
 * of its parts, a Slice's length and its clamped bounds): checked after binding, before any launch. */
typedef struct { int line; plus_expr a, b; } plus_equal;

typedef struct plus_plan {
    char node[PLUS_NAME_LEN];
    int n_in, n_out, n_sym, n_val, n_routes, n_kernels, n_archs, n_shapev;
    plus_in_spec in[PLUS_MAX_IN];
    plus_out_spec out[PLUS_MAX_OUT];
    char sym_name[PLUS_MAX_SYM][PLUS_NAME_LEN];   /* "" when no `sym` line names it */
    int val_slot[PLUS_MAX_V];                     /* val lines in file order */
    plus_expr val[PLUS_MAX_V];
    int has_scratch[PLUS_MAX_SCRATCH];
    plus_expr scratch[PLUS_MAX_SCRATCH];
    plus_expr route[PLUS_MAX_ROUTES];
    /* Route groups: `arch <a>...` records split the routes; group g's routes serve the packs of its
     * archs (kernels rendered per arch: wgmma on sm_90a, mma.sync on sm_80). No `arch` record: one
     * group (0) serving every pack. */
    int n_groups;
    int route_group[PLUS_MAX_ROUTES];
    int group_first[PLUS_MAX_GROUPS];             /* first route of group g */
    int group_n_archs[PLUS_MAX_GROUPS];
    char group_arch[PLUS_MAX_GROUPS][PLUS_MAX_ARCHS][16];
    plus_kernel_spec kernel[PLUS_MAX_KERNELS];    /* file order */
    char arch[PLUS_MAX_ARCHS][PLUS_NAME_LEN];     /* optional `archs` line (extension) */
    plus_shapev shapev[PLUS_MAX_SHAPEV];          /* file order */
    /* What the kernels touch (`extent`, `exact`, `optional` records, CONTRACT.md §3): elements
     * [0, extent) of each input they read and each output they write, checked before any launch. */
    int n_extent;
    plus_extent extent[PLUS_MAX_EXTENTS];         /* file order */
    int n_exact;
    plus_exact exact[PLUS_MAX_EXACT];
    unsigned char in_optional[PLUS_MAX_IN], out_optional[PLUS_MAX_OUT];   /* may be wired "" */
    int n_bcast;
    plus_bcast bcast[PLUS_MAX_BCAST];             /* file order */
    int n_equal;
    plus_equal equal[PLUS_MAX_EQUAL];             /* file order */
    /* `tmap` records (tensor maps of the kernel line above each): plan.c keeps their lines, tmap.c parses them
     * (plus_tmap_parse, called when a kernel object is created) into `tmaps` (freed with the plan) */
    int n_tmap_lines;
    int tmap_line[PLUS_MAX_TMAP_LINES], tmap_kernel[PLUS_MAX_TMAP_LINES];
    struct plus_tmaps* tmaps;
    plus_item* items;                             /* all expressions' items */
    int n_items, cap_items;
    char* text;                                   /* copy of the plan, lines NUL-terminated */
    char** lines;
    int n_lines;
} plus_plan;

/* Parse a plan. Returns 0, or -1 with a message ("plus_plan line N `...`: why") in err. */
int plus_plan_parse(const char* text, plus_plan* plan, char* err, size_t errlen);
void plus_plan_free(plus_plan* plan);
const char* plus_plan_line(const plus_plan* plan, int line);   /* "" when out of range */

/* Compile one expression token. nsym: symbols s0..s(nsym-1) may be used; vmask: bit k set when
 * v<k> may be used. Returns 0 or -1 with the reason in err. */
int plus_expr_compile(plus_plan* plan, const char* tok, int nsym, uint32_t vmask, plus_expr* out,
                      char* err, size_t errlen);

/* An expression written back as its token ("s0,s1,*"), truncated to n. */
void plus_expr_text(const plus_plan* plan, plus_expr e, char* buf, size_t n);

/* Values an expression reads. */
typedef struct {
    int64_t sym[PLUS_MAX_SYM];
    uint32_t bound;        /* bit k set when sym[k] is bound */
    int64_t v[PLUS_MAX_V];
} plus_env;

/* Evaluate. Returns 0 or -1 (division by zero, overflow, unbound symbol) with the reason in err. */
int plus_expr_eval(const plus_plan* plan, plus_expr e, const plus_env* env, int64_t* out, char* err,
                   size_t errlen);

#endif
