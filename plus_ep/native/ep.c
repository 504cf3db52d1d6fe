/* The PlusEP OrtEp: GetCapability claims ai.plus_ep::Fused nodes (or, for a model without them, the
 * node groups the registered planner returns), Compile builds each claimed node's launcher kernel from
 * its plan and image packs (kernel.h, shared with the RegisterCustomOps path), Compute binds the run's
 * shapes and launches on the stream ORT hands the node (gpu mode) or through host staging (staging
 * mode). Nodes PlusEP does not claim keep their function bodies, which ORT inlines for the next EP. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"
#include "ort_run.h"
#include "trust.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- the planner (registered from Python by `import plus_ep`) ---- */

static _Atomic(plus_ep_planner_fn) g_planner;

EXPORT void PlusEP_SetPlanner(plus_ep_planner_fn fn) { atomic_store(&g_planner, fn); }
plus_ep_planner_fn plus_ep_get_planner(void) { return atomic_load(&g_planner); }

static void free_list(char** v, size_t n) {
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* Split "a\nb\n\nc" into its n+1 fields (empty fields kept); "" gives none. */
static int split_lines(const char* s, char*** out, size_t* n) {
    *out = NULL;
    *n = 0;
    if (!s || !*s) return 0;
    size_t count = 1;
    for (const char* p = s; *p; p++) count += *p == '\n';
    char** v = calloc(count, sizeof *v);
    if (!v) return -1;
    for (size_t i = 0; i < count; i++) {
        size_t len = strcspn(s, "\n");
        if (!(v[i] = strndup(s, len))) return free_list(v, count), -1;
        s += len + (s[len] == '\n');
    }
    *out = v;
    *n = count;
    return 0;
}

static void part_free(plus_ep_part* p) {
    free_list(p->inputs, p->n_inputs);
    free_list(p->outputs, p->n_outputs);
    free(p->plan);
    for (int i = 0; i < p->n_packs; i++) free(p->pack_arch[i]), free(p->pack_data[i]);
    free(p->model);
    plus_ctx_fused_free(&p->fused);
    memset(p, 0, sizeof *p);
}

static void group_free(plus_ep_group* g) {
    free_list(g->members, g->n_members);
    free_list(g->inputs, g->n_inputs);
    free_list(g->outputs, g->n_outputs);
    for (size_t i = 0; i < g->n_parts; i++) part_free(&g->parts[i]);
    free(g->parts);
    for (size_t i = 0; i < g->n_consts; i++) free(g->consts[i].name), free(g->consts[i].data);
    free(g->consts);
    memset(g, 0, sizeof *g);
}

void plus_ep_groups_free(plus_ep_plan_request* r) {
    for (size_t i = 0; i < r->n; i++) group_free(&r->groups[i]);
    free(r->groups);
    r->groups = NULL;
    r->n = r->cap = 0;
}

/* Called by the planner during its call: a group of the model's nodes PlusEP claims. members, inputs and
 * outputs are '\n'-joined tensor names (members: each original node's first output). Its parts and
 * constants follow (PlusEP_PlanAddPart, PlusEP_PlanAddConstant). Returns 0 or -1. */
EXPORT int PlusEP_PlanBeginGroup(void* request, const char* node, const char* members, const char* inputs,
                                 const char* outputs) {
    plus_ep_plan_request* r = request;
    if (!r) return -1;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        plus_ep_group* g = realloc(r->groups, cap * sizeof *g);
        if (!g) return -1;
        r->groups = g;
        r->cap = cap;
    }
    plus_ep_group* g = &r->groups[r->n];
    memset(g, 0, sizeof *g);
    snprintf(g->node, sizeof g->node, "%s", node ? node : "");
    if (split_lines(members, &g->members, &g->n_members) || split_lines(inputs, &g->inputs, &g->n_inputs) ||
        split_lines(outputs, &g->outputs, &g->n_outputs) || !g->n_members || !g->n_outputs) {
        group_free(g);
        return -1;
    }
    r->n++;
    return 0;
}

/* A part of the last group begun: kind PLUS_PART_KERNEL (plan, packs) or PLUS_PART_HOST (model). */
EXPORT int PlusEP_PlanAddPart(void* request, int kind, const char* node, const char* inputs, const char* outputs,
                              const char* plan, int n_packs, const char* const* archs, const uint8_t* const* data,
                              const size_t* sizes, const uint8_t* model, size_t model_size) {
    plus_ep_plan_request* r = request;
    if (!r || !r->n || n_packs < 0 || n_packs > PLUS_MAX_ARCHS || (kind != PLUS_PART_KERNEL && kind != PLUS_PART_HOST))
        return -1;
    plus_ep_group* g = &r->groups[r->n - 1];
    if (g->n_parts == PLUS_CTX_MAX_PARTS) return -1;
    if (g->n_parts == g->cap_parts) {
        size_t cap = g->cap_parts ? 2 * g->cap_parts : 4;
        plus_ep_part* grown = realloc(g->parts, cap * sizeof *grown);
        if (!grown) return -1;
        g->parts = grown;
        g->cap_parts = cap;
    }
    plus_ep_part* p = &g->parts[g->n_parts];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    snprintf(p->node, sizeof p->node, "%s", node ? node : "");
    int bad = split_lines(inputs, &p->inputs, &p->n_inputs) || split_lines(outputs, &p->outputs, &p->n_outputs) ||
              !p->n_outputs;
    if (!bad && kind == PLUS_PART_KERNEL) {
        bad = !plan || !(p->plan = strdup(plan)) || !n_packs;
        for (int i = 0; i < n_packs && !bad; i++) {
            p->pack_arch[i] = strdup(archs[i]);
            p->pack_data[i] = malloc(sizes[i] ? sizes[i] : 1);
            p->n_packs = i + 1;
            if (!p->pack_arch[i] || !p->pack_data[i]) bad = 1;
            else memcpy(p->pack_data[i], data[i], sizes[i]), p->pack_size[i] = sizes[i];
        }
    } else if (!bad) {
        bad = !model || !model_size || !(p->model = malloc(model_size));
        if (!bad) memcpy(p->model, model, model_size), p->model_size = model_size;
    }
    if (bad) {
        part_free(p);
        return -1;
    }
    g->n_parts++;
    return 0;
}

/* The Fused node the last kernel part was, as the trust digest covers it (an EPContext node written from
 * the group carries it on): its op type and every attribute name ('\n'-joined). Returns 0 or -1. */
EXPORT int PlusEP_PlanSetPartNode(void* request, const char* op_type, const char* attr_names) {
    plus_ep_plan_request* r = request;
    if (!r || !r->n || !r->groups[r->n - 1].n_parts || !op_type) return -1;
    plus_ep_part* p = &r->groups[r->n - 1].parts[r->groups[r->n - 1].n_parts - 1];
    free(p->fused.op_type);
    free_list(p->fused.attr_names, p->fused.n_attr_names);
    p->fused.attr_names = NULL, p->fused.n_attr_names = 0;
    if (!(p->fused.op_type = strdup(op_type))) return -1;
    return split_lines(attr_names, &p->fused.attr_names, &p->fused.n_attr_names);
}

/* One STRING attribute of that Fused node (binary: `len` bytes). Returns 0 or -1. */
EXPORT int PlusEP_PlanAddPartString(void* request, const char* name, const uint8_t* value, size_t len) {
    plus_ep_plan_request* r = request;
    if (!r || !r->n || !r->groups[r->n - 1].n_parts || !name) return -1;
    plus_ep_part* p = &r->groups[r->n - 1].parts[r->groups[r->n - 1].n_parts - 1];
    return plus_ctx_fused_add_string(&p->fused, name, value, len);
}

/* A constant of the last group begun (a value a contrib op's expansion made): ONNX dtype, dims, data. */
EXPORT int PlusEP_PlanAddConstant(void* request, const char* name, int dtype, int rank, const int64_t* dims,
                                  const uint8_t* data, size_t bytes) {
    plus_ep_plan_request* r = request;
    if (!r || !r->n || !name || !*name || rank < 0 || rank > PLUS_MAX_RANK) return -1;
    plus_ep_group* g = &r->groups[r->n - 1];
    if (g->n_consts == g->cap_consts) {
        size_t cap = g->cap_consts ? 2 * g->cap_consts : 8;
        plus_ep_const* grown = realloc(g->consts, cap * sizeof *grown);
        if (!grown) return -1;
        g->consts = grown;
        g->cap_consts = cap;
    }
    plus_ep_const* c = &g->consts[g->n_consts];
    memset(c, 0, sizeof *c);
    long long elems = 1;
    for (int d = 0; d < rank; d++) {
        c->dims[d] = dims[d];
        if (dims[d] < 0 || __builtin_mul_overflow(elems, (long long)dims[d], &elems)) return -1;
    }
    long long want = plus_tensor_bytes(dtype, elems);
    if (want < 0 || (size_t)want != bytes) return -1;
    c->dtype = dtype;
    c->rank = rank;
    c->bytes = bytes;
    if (!(c->name = strdup(name)) || !(c->data = malloc(bytes ? bytes : 1))) return free(c->name), -1;
    if (bytes) memcpy(c->data, data, bytes);
    g->n_consts++;
    return 0;
}

/* One group computed by one kernel node whose inputs and outputs are the group's (a Fused node of the
 * rewrite replacing exactly its original nodes). Returns 0 or -1. */
EXPORT int PlusEP_PlanAddGroup(void* request, const char* node, const char* members, const char* inputs,
                               const char* outputs, const char* plan, int n_packs, const char* const* archs,
                               const uint8_t* const* data, const size_t* sizes) {
    plus_ep_plan_request* r = request;
    if (PlusEP_PlanBeginGroup(request, node, members, inputs, outputs)) return -1;
    if (PlusEP_PlanAddPart(request, PLUS_PART_KERNEL, node, inputs, outputs, plan, n_packs, archs, data, sizes, NULL,
                           0)) {
        group_free(&r->groups[--r->n]);
        return -1;
    }
    return 0;
}

EXPORT void PlusEP_PlanSetError(void* request, const char* message) {
    plus_ep_plan_request* r = request;
    if (r) snprintf(r->error, sizeof r->error, "%s", message ? message : "?");
}

/* The planner's messages (plus_ep/ortlog.py): through the session's logger, at its severity; `level` is
 * ORT's (0 verbose .. 4 fatal). PlusEP_PlanLogSeverity: the severity that logger shows from. */
EXPORT void PlusEP_PlanLog(void* request, int level, const char* message) {
    plus_ep_plan_request* r = request;
    plus_ep_log(r ? r->logger : NULL, level, "%s", message ? message : "");
}

EXPORT int PlusEP_PlanLogSeverity(void* request) {
    plus_ep_plan_request* r = request;
    for (int level = ORT_LOG_VERBOSE; level < 4; level++)
        if (plus_ep_log_shows(r ? r->logger : NULL, level)) return level;
    return 4;
}

/* ---- attribute and graph helpers ---- */

static const char* node_str(const OrtNode* n, OrtStatus* (*fn)(const OrtNode*, const char**)) {
    const char* s = NULL;
    OrtStatus* st = fn(n, &s);
    if (st) plus_ep_drop(st), s = NULL;
    return s ? s : "";
}
#define NODE_STR(n, name) node_str(n, ORT_CALL(plus_ep_api, name))

/* `Fused` or `FusedHost<n>` (the custom op's types; a compiled node takes all of them alike). */
static int is_fused(const OrtNode* n) {
    if (strcmp(NODE_STR(n, Node_GetDomain), "ai.plus_ep")) return 0;
    const char* t = NODE_STR(n, Node_GetOperatorType);
    if (!strcmp(t, "Fused")) return 1;
    if (strncmp(t, "FusedHost", 9) || !t[9]) return 0;
    for (const char* c = t + 9; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return 1;
}

/* A STRING attribute, malloc'ed (its length in *out_len when not NULL); NULL when absent. */
static char* attr_string_len(const OrtNode* n, const char* name, size_t* out_len) {
    const OrtOpAttr* a = NULL;
    OrtStatus* st = ORT_CALL(plus_ep_api, Node_GetAttributeByName)(n, name, &a);
    if (st || !a) return plus_ep_drop(st), NULL;
    size_t len = 0;
    plus_ep_drop(ORT_CALL(plus_ep_api, ReadOpAttr)(a, ORT_OP_ATTR_STRING, NULL, 0, &len));   /* size query */
    char* s = malloc(len + 1);
    if (!s) return NULL;
    st = ORT_CALL(plus_ep_api, ReadOpAttr)(a, ORT_OP_ATTR_STRING, s, len, &len);
    if (st) return plus_ep_drop(st), free(s), NULL;
    s[len] = 0;
    if (out_len) *out_len = len;
    return s;
}

static char* attr_string(const OrtNode* n, const char* name) { return attr_string_len(n, name, NULL); }

/* What the trust digest covers of a kernel part (trust.h: the whole Fused node as the graph held it) and the
 * attribute lists it is built from; filled from a Fused node by fused_fields (free with fields_free). */
typedef struct {
    const char* op_type;
    char* strs[PLUS_TRUST_N_STRINGS];
    size_t str_len[PLUS_TRUST_N_STRINGS];
    const char* str_names[PLUS_TRUST_N_STRINGS];
    const char** attr_names;
    size_t n_attr_names;
    const OrtOpAttr** all;
} fused_fields;

static void fields_free(fused_fields* f) {
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++) free(f->strs[i]);
    free(f->attr_names);
    free(f->all);
    memset(f, 0, sizeof *f);
}

static OrtStatus* fields_of(const OrtNode* n, const char* node, fused_fields* f) {
    memset(f, 0, sizeof *f);
    f->op_type = NODE_STR(n, Node_GetOperatorType);
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++) {
        f->strs[i] = attr_string_len(n, plus_trust_strings[i], &f->str_len[i]);
        f->str_names[i] = plus_trust_strings[i];
    }
    size_t count = 0;
    OrtStatus* st = ORT_CALL(plus_ep_api, Node_GetNumAttributes)(n, &count);
    f->all = st ? NULL : calloc(count ? count : 1, sizeof *f->all);
    f->attr_names = f->all ? calloc(count ? count : 1, sizeof *f->attr_names) : NULL;
    if (f->attr_names && !(st = ORT_CALL(plus_ep_api, Node_GetAttributes)(n, f->all, count)))
        for (size_t i = 0; i < count && !st; i++) st = ORT_CALL(plus_ep_api, OpAttr_GetName)(f->all[i], &f->attr_names[i]);
    f->n_attr_names = count;
    if (st || !f->attr_names) {
        OrtStatus* w = plus_ep_status(ORT_FAIL, "PlusEP node '%s': cannot list its attributes: %s", node,
                                      st ? ORT_CALL(plus_ep_api, GetErrorMessage)(st) : "out of memory");
        plus_ep_drop(st);
        fields_free(f);
        return w;
    }
    return NULL;
}

/* The trust policy (trust.h) for a kernel part from a model file (a Fused node of a rewritten model, a
 * part of an EPContext payload), before anything of it is loaded: the whole Fused node it was (op type,
 * name, wiring, every attribute and pack). */
static OrtStatus* check_trust(const plus_ep* ep, const plus_ctx_part* p) {
    plus_trust_opts to = {.any = !strcmp(ep->opts.trust, "any"), .any_source = "provider option trust=any",
                          .cache_dir = ep->opts.cache_dir};
    plus_trust_node nd = {.domain = "ai.plus_ep", .op_type = p->op_type ? p->op_type : "", .name = p->node,
                          .n_in = p->n_inputs, .in_names = p->inputs, .n_out = p->n_outputs, .out_names = p->outputs,
                          .packs = p->packs, .n_packs = p->n_packs, .attr_names = p->attr_names,
                          .n_attr_names = p->n_attr_names};
    for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++) {
        if (!strcmp(plus_trust_strings[i], "plus_plan")) {   /* the plan that runs, never a copy beside it */
            nd.str[i] = p->plan, nd.str_len[i] = p->plan ? strlen(p->plan) : 0;
            continue;
        }
        for (size_t k = 0; k < p->n_strs; k++)
            if (!strcmp(p->str_names[k], plus_trust_strings[i])) nd.str[i] = p->str_values[k], nd.str_len[i] = p->str_lens[k];
    }
    char warning[PLUS_ERR_LEN], err[PLUS_ERR_LEN];
    if (plus_trust_check(&nd, p->signature, &to, warning, sizeof warning, err, sizeof err) < 0)
        return plus_ep_status(ORT_FAIL, "%s", err);
    if (warning[0]) plus_ep_log(ep->logger, ORT_LOG_WARNING, "%s", warning);
    return NULL;
}

/* The node's attributes named plus_images_<arch>: the archs (into names) and the attributes. -1 when
 * there are more than max or an arch name does not fit (a model the launcher refuses). */
static int image_attrs(const OrtNode* n, char names[][PLUS_NAME_LEN], const OrtOpAttr** attrs, int max) {
    size_t count = 0;
    OrtStatus* st = ORT_CALL(plus_ep_api, Node_GetNumAttributes)(n, &count);
    if (st || !count) return plus_ep_drop(st), 0;
    const OrtOpAttr** all = calloc(count, sizeof *all);
    if (!all) return 0;
    int k = 0;
    if (!(st = ORT_CALL(plus_ep_api, Node_GetAttributes)(n, all, count)))
        for (size_t i = 0; i < count && k >= 0; i++) {
            const char* name = NULL;
            OrtStatus* s2 = ORT_CALL(plus_ep_api, OpAttr_GetName)(all[i], &name);
            if (s2 || !name || strncmp(name, "plus_images_", 12)) {
                plus_ep_drop(s2);
                continue;
            }
            if (k == max || strlen(name + 12) >= PLUS_NAME_LEN) {
                k = -1;
                break;
            }
            snprintf(names[k], PLUS_NAME_LEN, "%s", name + 12);
            attrs[k++] = all[i];
        }
    plus_ep_drop(st);
    free(all);
    return k;
}

static const char* first_output(const OrtNode* n) {
    const char** v = NULL;
    size_t c = 0;
    OrtStatus* st = plus_ep_io_names(n, 1, &v, &c);
    const char* s = !st && c ? v[0] : "";
    plus_ep_drop(st);
    free(v);
    return s;
}

static OrtStatus* graph_nodes(const OrtGraph* g, const OrtNode*** nodes, size_t* n) {
    *nodes = NULL;
    OrtStatus* st = ORT_CALL(plus_ep_api, Graph_GetNumNodes)(g, n);
    if (st) return st;
    *nodes = calloc(*n ? *n : 1, sizeof **nodes);
    if (!*nodes) return plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
    if ((st = ORT_CALL(plus_ep_api, Graph_GetNodes)(g, *nodes, *n))) free(*nodes), *nodes = NULL;
    return st;
}

/* ---- GetCapability ---- */

static const char* ep_name(const OrtEp* base) { (void)base; return PLUS_EP_NAME; }

/* Free for PlusEP: not yet assigned, or assigned to PlusEP by the first of two calls. */
static int unassigned(const OrtNode* n) {
    const char* ep = NODE_STR(n, Node_GetEpName);
    return !*ep || !strcmp(ep, PLUS_EP_NAME);
}

static int pattern_disabled(const plus_ep* ep, const char* pattern) {
    if (!ep->opts.disable[0]) return 0;
    if (!strcmp(ep->opts.disable, "all")) return 1;
    if (!pattern || !*pattern) return 0;
    size_t len = strlen(pattern);
    for (const char* p = ep->opts.disable; *p;) {
        size_t k = strcspn(p, ",");
        if (k == len && !strncmp(p, pattern, len)) return 1;
        p += k + (p[k] == ',');
    }
    return 0;
}

/* No cubin fits the device: 1 when an older arch's pack carries PTX the driver can JIT (the launcher
 * then loads it, kernel.c), as for an sm_80-only model on a 9.0 GPU. */
static int ptx_pack_fits(const OrtOpAttr* const* attrs, char names[][PLUS_NAME_LEN], int k, int major, int minor) {
    plus_pack packs[PLUS_MAX_ARCHS];
    OrtValue* values[PLUS_MAX_ARCHS] = {0};
    int n = 0, fits = 0;
    for (int i = 0; i < k; i++) {
        const void* data = NULL;
        size_t bytes = 0;
        char err[PLUS_ERR_LEN];
        OrtStatus* st = ORT_CALL(plus_ep_api, OpAttr_GetTensorAttributeAsOrtValue)(attrs[i], &values[i]);
        if (!st) st = ORT_CALL(plus_ep_api, GetTensorData)(values[i], &data);
        if (!st) st = ORT_CALL(plus_ep_api, GetTensorSizeInBytes)(values[i], &bytes);
        if (st) {
            plus_ep_drop(st);
            continue;
        }
        snprintf(packs[n].arch, sizeof packs[n].arch, "%.127s", names[i]);
        if (!plus_pack_parse(data, bytes, &packs[n], err, sizeof err)) n++;
    }
    fits = n && plus_pack_select_ptx(packs, n, major, minor) >= 0;
    for (int i = 0; i < k; i++)
        if (values[i]) ORT_CALL(plus_ep_api, ReleaseValue)(values[i]);
    return fits;
}

/* Every kernel part of a planned group has a pack the device loads (a cubin of its arch, or PTX the driver
 * can JIT); else why not, into err. */
static int group_fits(const plus_ep_group* g, int major, int minor, char* err, size_t errlen) {
    for (size_t k = 0; k < g->n_parts; k++) {
        const plus_ep_part* p = &g->parts[k];
        if (p->kind != PLUS_PART_KERNEL) continue;
        plus_pack packs[PLUS_MAX_ARCHS];
        for (int i = 0; i < p->n_packs; i++) snprintf(packs[i].arch, sizeof packs[i].arch, "%.127s", p->pack_arch[i]);
        if (plus_pack_select(packs, p->n_packs, major, minor, err, errlen) >= 0) continue;
        int n = 0;
        char e2[PLUS_ERR_LEN];
        for (int i = 0; i < p->n_packs; i++) {
            snprintf(packs[n].arch, sizeof packs[n].arch, "%.127s", p->pack_arch[i]);
            if (!plus_pack_parse(p->pack_data[i], p->pack_size[i], &packs[n], e2, sizeof e2)) n++;
        }
        if (!n || plus_pack_select_ptx(packs, n, major, minor) < 0) return 0;
    }
    return 1;
}

/* 0 = PlusEP can run it here; else why not (into why). */
static int unclaimable(const plus_ep* ep, const OrtNode* n, char* why, size_t wn) {
    char* plan = attr_string(n, "plus_plan");
    char* pattern = attr_string(n, "pattern");
    int rc = 0;
    if (!plan) rc = snprintf(why, wn, "it carries no plus_plan (rewritten without kernels)");
    else if (pattern_disabled(ep, pattern)) rc = snprintf(why, wn, "pattern %s is disabled", pattern);
    else {
        char names[PLUS_MAX_ARCHS][PLUS_NAME_LEN];
        const OrtOpAttr* attrs[PLUS_MAX_ARCHS];
        plus_pack packs[PLUS_MAX_ARCHS];
        int k = image_attrs(n, names, attrs, PLUS_MAX_ARCHS);
        for (int i = 0; i < k; i++) snprintf(packs[i].arch, sizeof packs[i].arch, "%.127s", names[i]);
        char err[PLUS_ERR_LEN];
        if (k < 0)
            rc = snprintf(why, wn, "it has more than %d plus_images_<arch> attributes or an arch name of %d bytes "
                          "or more", PLUS_MAX_ARCHS, PLUS_NAME_LEN);
        else if (plus_pack_select(packs, k, ep->cc_major, ep->cc_minor, err, sizeof err) < 0 &&
                 !ptx_pack_fits(attrs, names, k, ep->cc_major, ep->cc_minor))
            rc = snprintf(why, wn, "%s", err);
    }
    free(plan);
    free(pattern);
    return rc;
}

static OrtNodeFusionOptions fusion_options(void) {
    OrtNodeFusionOptions o = {.ort_version_supported = plus_ep_version, .drop_constant_initializers = false};
    return o;
}

static void run_planner(plus_ep* ep, const OrtGraph* graph) {
    ep->planned = 1;
    plus_ep_planner_fn planner = plus_ep_get_planner();
    if (!planner) return;
    const char* path = NULL;
    plus_ep_drop(ORT_CALL(plus_ep_api, Graph_GetModelPath)(graph, &path));
    if (!path || !*path) {
        plus_ep_log(ep->logger, ORT_LOG_WARNING, "PlusEP: the model has no ai.plus_ep::Fused nodes and was not loaded "
                    "from a file, so the planner cannot rewrite it; it runs unfused on the next providers (rewrite "
                    "it with `plus-ep rewrite` or load it from a path)");
        return;
    }
    char opts[8192];
    /* The values are plain (checked option text); only the path-like ones may need escaping. */
    char cache[2 * sizeof ep->opts.cache_dir], disable[2 * sizeof ep->opts.disable];
    const char* srcs[2] = {ep->opts.cache_dir, ep->opts.disable};
    char* dsts[2] = {cache, disable};
    for (int k = 0; k < 2; k++) {
        char* o = dsts[k];
        for (const char* p = srcs[k]; *p; p++) {
            if (*p == '"' || *p == '\\') *o++ = '\\';
            if ((unsigned char)*p >= 0x20) *o++ = *p;
        }
        *o = 0;
    }
    snprintf(opts, sizeof opts,
             "{\"arch\": \"%s\", \"cc\": \"%d.%d\", \"cache_dir\": \"%s\", \"disable\": \"%s\", \"fp32_math\": \"%s\", "
             "\"verify\": \"%d\"}",
             ep->opts.arch, ep->cc_major, ep->cc_minor, cache, disable, ep->opts.fp32_math, ep->opts.verify);
    ep->plan.logger = ep->logger;
    int rc = planner(path, opts, &ep->plan);
    if (rc || ep->plan.error[0]) {   /* compiling an EPContext model: an error (it would hold no PlusEP node) */
        plus_ep_log(ep->logger, ep->ctx.enable ? ORT_LOG_ERROR : ORT_LOG_WARNING, "PlusEP: the planner failed for %s "
                    "(%s); the model runs unfused on the next providers", path,
                    ep->plan.error[0] ? ep->plan.error : "no message");
        plus_ep_groups_free(&ep->plan);
    }
}

/* 1 when `actual` is one of the tab-separated names of a planned tensor ("name" or "name\tname ORT gives
 * it": the planner lists both for constants ONNX Runtime's basic optimizations replace, plus_ep/ep.py). */
int plus_ep_name_is(const char* planned, const char* actual) {
    size_t len = strlen(actual);
    for (const char* p = planned;;) {
        size_t k = strcspn(p, "\t");
        if (k == len && !strncmp(p, actual, len)) return 1;
        if (!p[k]) return 0;
        p += k + 1;
    }
}

static int in_list(const char* s, const char* const* v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, v[i])) return 1;
    return 0;
}

/* 1 when the members' inputs from outside the group are exactly the planned node's inputs (ORT's basic
 * optimizations may have changed the graph since the planner read the file). */
static int same_boundary(const plus_ep_group* g, const OrtNode** members, size_t n) {
    const char** outs = NULL;
    size_t n_outs = 0;
    int ok = 1;
    for (size_t m = 0; m < n && ok; m++) {   /* every member output */
        const char** v = NULL;
        size_t c = 0;
        OrtStatus* st = plus_ep_io_names(members[m], 1, &v, &c);
        const char** grown = st ? NULL : realloc(outs, (n_outs + c + 1) * sizeof *outs);
        if (!grown) ok = 0;
        else {
            outs = grown;
            for (size_t i = 0; i < c; i++) outs[n_outs++] = v[i];
        }
        plus_ep_drop(st);
        free(v);
    }
    int used[PLUS_MAX_IN] = {0};
    for (size_t m = 0; m < n && ok; m++) {
        const char** v = NULL;
        size_t c = 0;
        OrtStatus* st = plus_ep_io_names(members[m], 0, &v, &c);
        if (st) ok = 0;
        for (size_t i = 0; i < c && ok; i++) {
            if (!v[i][0] || in_list(v[i], outs, n_outs)) continue;
            ok = 0;
            for (size_t j = 0; j < g->n_inputs && j < PLUS_MAX_IN; j++)
                if (plus_ep_name_is(g->inputs[j], v[i])) ok = used[j] = 1;
        }
        plus_ep_drop(st);
        free(v);
    }
    for (size_t j = 0; j < g->n_inputs && ok; j++)
        if (g->inputs[j][0] && (j >= PLUS_MAX_IN || !used[j])) ok = 0;
    for (size_t j = 0; j < g->n_outputs && ok; j++)
        if (!in_list(g->outputs[j], outs, n_outs)) ok = 0;
    free(outs);
    return ok;
}

/* Claim the planner's groups whose nodes ORT still has, unassigned. Returns the number claimed. */
static int claim_groups(plus_ep* ep, const OrtNode** nodes, size_t n, OrtEpGraphSupportInfo* info) {
    const char** key = calloc(n ? n : 1, sizeof *key);
    const OrtNode** members = NULL;
    int claimed = 0;
    if (!key) return 0;
    for (size_t i = 0; i < n; i++) key[i] = first_output(nodes[i]);
    for (size_t g = 0; g < ep->plan.n; g++) {
        const plus_ep_group* grp = &ep->plan.groups[g];
        const OrtNode** m = realloc(members, grp->n_members * sizeof *m);
        if (!m) break;
        members = m;
        size_t found = 0;
        for (size_t j = 0; j < grp->n_members; j++)
            for (size_t i = 0; i < n; i++)
                if (key[i][0] && !strcmp(key[i], grp->members[j])) {
                    if (unassigned(nodes[i])) members[found++] = nodes[i];
                    break;
                }
        if (found != grp->n_members) {
            plus_ep_log(ep->logger, ORT_LOG_INFO, "PlusEP: planned group %s not claimed: %zu of its %zu nodes are in "
                        "the graph ONNX Runtime optimized and free", grp->node, found, grp->n_members);
            continue;
        }
        char err[PLUS_ERR_LEN] = "";
        if (!grp->n_parts) continue;
        if (!group_fits(grp, ep->cc_major, ep->cc_minor, err, sizeof err)) {
            plus_ep_log(ep->logger, ORT_LOG_WARNING, "PlusEP: planned group %s not claimed: %s", grp->node, err);
            continue;
        }
        if (!same_boundary(grp, members, found)) {
            plus_ep_log(ep->logger, ORT_LOG_INFO, "PlusEP: planned group %s not claimed: its inputs in the graph "
                        "ONNX Runtime optimized differ from the plan's", grp->node);
            continue;
        }
        OrtNodeFusionOptions fo = fusion_options();
        OrtStatus* st = EP_CALL(plus_ep_epapi, EpGraphSupportInfo_AddNodesToFuse)(info, members, found, &fo);
        if (st) {
            plus_ep_log(ep->logger, ORT_LOG_INFO, "PlusEP: planned group %s not claimed: %s", grp->node,
                        ORT_CALL(plus_ep_api, GetErrorMessage)(st));
            plus_ep_drop(st);
            continue;
        }
        claimed++;
    }
    free(members);
    free(key);
    return claimed;
}

static OrtStatus* get_capability(OrtEp* base, const OrtGraph* graph, OrtEpGraphSupportInfo* info) {
    plus_ep* ep = (plus_ep*)base;
    if (ep->mode == PLUS_MODE_INERT || !strcmp(ep->opts.disable, "all")) return NULL;
    const OrtNode** nodes = NULL;
    size_t n = 0;
    OrtStatus* st = graph_nodes(graph, &nodes, &n);
    if (st) return st;
    size_t n_fused = 0, n_skipped = 0;
    char first_why[PLUS_ERR_LEN] = "", first_node[PLUS_NAME_LEN] = "";
    for (size_t i = 0; i < n && !st; i++) {
        int context = !is_fused(nodes[i]) && plus_ctx_is_node(nodes[i]);   /* an EPContext model (ep_context.c) */
        if (!context && !is_fused(nodes[i])) continue;
        n_fused++;
        if (!unassigned(nodes[i])) continue;
        char why[PLUS_ERR_LEN];
        if (!context && unclaimable(ep, nodes[i], why, sizeof why)) {
            if (!n_skipped++) {
                snprintf(first_why, sizeof first_why, "%s", why);
                snprintf(first_node, sizeof first_node, "%s", NODE_STR(nodes[i], Node_GetName));
            }
            continue;
        }
        OrtNodeFusionOptions fo = fusion_options();
        st = EP_CALL(plus_ep_epapi, EpGraphSupportInfo_AddNodesToFuse)(info, &nodes[i], 1, &fo);
    }
    if (n_skipped && !ep->warned_unclaimed) {
        ep->warned_unclaimed = 1;
        plus_ep_log(ep->logger, ORT_LOG_WARNING, "PlusEP leaves %zu of %zu Fused nodes to their function bodies on the "
                    "next providers; node '%s': %s", n_skipped, n_fused, first_node, first_why);
    }
    /* A model without Fused nodes: ask the planner (main graph only; nested graphs are never planned). */
    const OrtNode* parent = NULL;
    plus_ep_drop(ORT_CALL(plus_ep_api, Graph_GetParentNode)(graph, &parent));
    if (n_fused) ep->saw_fused = 1;   /* a rewritten model: never planned, also after ORT inlined bodies */
    if (!st && !n_fused && !parent && !ep->saw_fused) {
        if (!ep->planned) run_planner(ep, graph);
        if (ep->plan.n) claim_groups(ep, nodes, n, info);
    }
    free(nodes);
    return st;
}

/* ---- Compile / Compute ---- */

/* A kernel part of a compiled node (ep_chain.c runs the parts). */
struct plus_ep_node {
    plus_ep* ep;
    plus_kernel* k;
    int n_in, n_out;           /* the plan's */
    int in_map[PLUS_MAX_IN];   /* plan input -> the run's value (ep_chain.c; -1: absent) */
    int out_map[PLUS_MAX_OUT]; /* plan output -> the run's value (-1: not used outside: temporary) */
    int warned_host_input;     /* gpu: the one warning about an input ORT left in host memory */
    int have_shapes;           /* gpu: shape_cache holds the last run's shape-tensor values (CUDA graphs) */
    plus_ep_stat* stat;        /* runs and device times (ep_stream.c) */
    plus_host_values shape_cache;
};

static OrtStatus* node_fail(const plus_ep_node* nd, int code, const char* what, OrtStatus* st) {
    OrtStatus* out = plus_ep_status(code, "PlusEP node '%s': %s%s%s", plus_kernel_node(nd->k), what, st ? ": " : "",
                                    st ? ORT_CALL(plus_ep_api, GetErrorMessage)(st) : "");
    plus_ep_drop(st);
    return out;
}

typedef struct {
    plus_run r;                        /* first: the hooks get &r */
    plus_ep_node* nd;
    int foreign;                       /* gpu: the stream is another EP's (ORT handed it) */
    CUdeviceptr staged[PLUS_MAX_IN];   /* gpu: device copies of inputs ORT left in host memory */
    plus_host_values hv;
    plus_ep_timing* timing;
    plus_ep_run* chain;                /* the compiled node's run (ep_chain.c): the part's values */
} ep_run;

OrtStatus* plus_ep_node_stream(plus_ep* ep, OrtKernelContext* kctx, CUcontext* ctx, void** stream, int* foreign) {
    char err[PLUS_ERR_LEN];
    OrtStatus* st = ORT_CALL(plus_ep_api, KernelContext_GetGPUComputeStream)(kctx, stream);
    if (st) plus_ep_drop(st), *stream = NULL;
    *foreign = *stream != NULL;
    if (!(*ctx = plus_ep_primary_ctx(ep->drv, ep->ordinal, err, sizeof err)))
        return plus_ep_status(ORT_EP_FAIL, "%s", err);
    if (!*stream) *stream = plus_ep_device_stream(ep->drv, ep->ordinal, err, sizeof err);
    return NULL;
}

/* GPU mode: every input the kernels read must be device memory. ONNX Runtime normally sees to it (our
 * Memcpy kernels, ep_memory.c); an input it still leaves in host memory (another ORT version's planner,
 * a CPU-EP Memcpy) is copied to temporary device memory on the node's stream, with one warning per
 * node, and its host copy serves the shape reads. Never a host pointer to a kernel. */
static OrtStatus* inputs_on_device(ep_run* run) {
    plus_run* r = &run->r;
    plus_ep_node* nd = run->nd;
    plus_ep* ep = nd->ep;
    char err[PLUS_ERR_LEN];
    for (int i = 0; i < nd->n_in; i++) {
        if (!r->desc[i].present || !r->data[i]) continue;
        const OrtMemoryDevice* md = EP_CALL(plus_ep_epapi, Value_GetMemoryDevice)(r->value[i]);
        if (plus_ep_on_gpu(md)) continue;
        long long bytes = plus_tensor_bytes(r->desc[i].dtype, r->elems[i]);
        if (bytes < 0) return node_fail(nd, ORT_INVALID_ARGUMENT, "an input in host memory has an element type that "
                                        "cannot be copied to the device", NULL);
        if (!nd->warned_host_input) {
            nd->warned_host_input = 1;
            plus_ep_log(ep->logger, ORT_LOG_WARNING, "PlusEP node '%s': input %d arrived in host memory; it is copied "
                        "to the device on every run (ONNX Runtime placed a Memcpy output or a CPU node's output in CPU "
                        "memory)", plus_kernel_node(nd->k), i);
        }
        int rc = plus_ep_temp_alloc(ep->drv, ep->ordinal, r->ctx, r->stream, run->foreign, (size_t)bytes,
                                    &run->staged[i], err, sizeof err);
        CUresult cr = rc ? 0 : plus_ep_htod(ep->drv, r->ctx, run->staged[i], r->data[i], (size_t)bytes, r->stream);
        if (rc) return plus_ep_status(ORT_FAIL, "PlusEP node '%s': %s", plus_kernel_node(nd->k), err);
        if (cr) {
            char e[128];
            plus_cu_error(ep->drv, cr, e, sizeof e);
            return plus_ep_status(ORT_FAIL, "PlusEP node '%s': copying input %d to the device failed: %s",
                                  plus_kernel_node(nd->k), i, e);
        }
        r->desc[i].host = r->data[i];
        r->data[i] = (void*)(uintptr_t)run->staged[i];
    }
    return NULL;
}

/* Before binding: the stream and context (gpu), inputs in device memory, and the shape tensors the plan
 * reads on the host (`shapev`, kernels/CONTRACT.md §3): in place when staging, else copied from device
 * memory after the node's stream (plus_kernel_read_shape_inputs). A compiled node cannot declare
 * CPU-resident inputs (ORT 1.31's OrtNodeFusionOptions has only drop_constant_initializers; input memory
 * types exist only for kernel-registry ops), unlike the custom op's `FusedHost<n>`, so that copy waits
 * for the stream: one synchronisation per such node and run. While a CUDA graph is captured
 * (ep_stream.c) nothing may wait: the values of the last run are used (a graph replays one shape). */
static OrtStatus* ep_prepare(plus_run* r) {
    ep_run* run = (ep_run*)r;
    plus_ep_node* nd = run->nd;
    plus_ep* ep = nd->ep;
    const plus_plan* plan = plus_kernel_plan(nd->k);
    char err[PLUS_ERR_LEN];
    OrtStatus* st;
    if (ep->mode == PLUS_MODE_GPU) {
        void* stream = NULL;
        if ((st = plus_ep_node_stream(ep, r->kctx, &r->ctx, &stream, &run->foreign))) return st;
        r->stream = (CUstream)stream;
        if (ep->capturing && run->foreign)
            return plus_ep_status(ORT_EP_FAIL, "PlusEP node '%s': cuda_graph=1 needs PlusEP's own stream, but ONNX "
                                  "Runtime runs the node on another execution provider's stream", plus_kernel_node(nd->k));
        if ((st = inputs_on_device(run))) return st;
    }
    if (plan->n_shapev && ep->mode == PLUS_MODE_STAGING) {
        for (int i = 0; i < nd->n_in; i++)
            if (plus_plan_input_on_host(plan, i)) r->desc[i].host = r->data[i];
    } else if (plan->n_shapev && ep->capturing) {
        if (!nd->have_shapes)
            return plus_ep_status(ORT_EP_FAIL, "PlusEP node '%s' reads shape tensors from device memory and did not "
                                  "run before the CUDA graph capture (raise cuda_graph_warmup)", plus_kernel_node(nd->k));
        int used = 0;   /* the order plus_kernel_read_shape_inputs fills them in */
        for (int i = 0; i < nd->n_in; i++)
            if (plus_plan_input_on_host(plan, i) && r->desc[i].present && !r->desc[i].host)
                r->desc[i].host = nd->shape_cache.v[used++];
    } else if (plan->n_shapev) {
        if (plus_kernel_read_shape_inputs(nd->k, ep->drv, r->ctx, r->stream, r->desc, (const void* const*)r->data,
                                          (size_t)nd->n_in, &run->hv, err, sizeof err))
            return plus_ep_status(ORT_FAIL, "%s", err);
        nd->shape_cache = run->hv;
        nd->have_shapes = 1;
    }
    return NULL;
}

static OrtStatus* ep_check_output(plus_run* r, int o, const OrtValue* v) {
    ep_run* run = (ep_run*)r;
    if (run->nd->ep->mode == PLUS_MODE_GPU && !plus_ep_on_gpu(EP_CALL(plus_ep_epapi, Value_GetMemoryDevice)(v)))
        return plus_ep_status(ORT_FAIL, "PlusEP node '%s': ONNX Runtime allocated output %d in host memory; the "
                              "kernels write device memory", plus_kernel_node(run->nd->k), o);
    return NULL;
}

static int ep_temp_alloc(plus_run* r, size_t bytes, void** out, char* err, size_t errlen) {
    ep_run* run = (ep_run*)r;
    plus_ep* ep = run->nd->ep;
    CUdeviceptr p = 0;
    int rc = plus_ep_temp_alloc(ep->drv, ep->ordinal, r->ctx, r->stream, run->foreign, bytes, &p, err, errlen);
    *out = (void*)(uintptr_t)p;
    return rc;
}

static void ep_temp_free(plus_run* r, void* p) {
    ep_run* run = (ep_run*)r;
    plus_ep* ep = run->nd->ep;
    plus_ep_temp_free(ep->drv, ep->ordinal, r->ctx, r->stream, run->foreign, (CUdeviceptr)(uintptr_t)p);
}

/* Device tensors launch on the node's stream (the CUDA EP's when it shares the device), else on
 * PlusEP's stream of the device; no synchronisation (ep_memory.c, ep_stream.c). With no stream at all
 * (a driver without streams) plus_kernel_launch synchronises the context. */
static void ep_launch_begin(plus_run* r) {
    ep_run* run = (ep_run*)r;
    run->timing = plus_ep_timing_begin(run->nd->ep, run->nd->stat, r->stream);
}

static void ep_finish(plus_run* r, int ok) {
    ep_run* run = (ep_run*)r;
    plus_ep_node* nd = run->nd;
    plus_ep* ep = nd->ep;
    if (ep->mode == PLUS_MODE_STAGING) {
        if (ok) plus_ep_timing_end(ep, nd->stat, NULL, NULL, 1);
        return;
    }
    plus_ep_timing_end(ep, nd->stat, run->timing, r->stream, ok);
    for (int i = 0; i < PLUS_MAX_IN; i++)
        if (run->staged[i]) plus_ep_temp_free(ep->drv, ep->ordinal, r->ctx, r->stream, run->foreign, run->staged[i]);
}

static OrtStatus* ep_get_input(plus_run* r, int i, const OrtValue** v) {
    ep_run* run = (ep_run*)r;
    *v = plus_ep_run_input(run->chain, run->nd->in_map[i]);
    return NULL;
}

static OrtStatus* ep_get_output(plus_run* r, int o, int dtype, const int64_t* dims, int rank, OrtValue** v) {
    ep_run* run = (ep_run*)r;
    return plus_ep_run_output(run->chain, run->nd->out_map[o], dtype, dims, rank, v);
}

static const plus_run_hooks EP_HOOKS = {.prepare = ep_prepare, .temp_alloc = ep_temp_alloc, .temp_free = ep_temp_free,
                                        .check_output = ep_check_output, .launch_begin = ep_launch_begin,
                                        .finish = ep_finish, .get_input = ep_get_input, .get_output = ep_get_output};

OrtStatus* plus_ep_kernel_run(plus_ep_node* nd, plus_ep_run* chain) {
    ep_run run;
    memset(run.staged, 0, sizeof run.staged);
    run.nd = nd;
    run.foreign = 0;
    run.timing = NULL;
    run.chain = chain;
    run.r = (plus_run){.api = plus_ep_api, .kctx = plus_ep_run_context(chain), .k = nd->k, .drv = nd->ep->drv,
                       .in_map = nd->in_map, .out_map = nd->out_map, .staged = nd->ep->mode == PLUS_MODE_STAGING,
                       .hooks = &EP_HOOKS};
    return plus_run_node(&run.r);
}

void plus_ep_kernel_destroy(plus_ep_node* nd) {
    if (!nd) return;
    plus_kernel_destroy(nd->k);
    free(nd);
}

void plus_ep_kernel_set_slots(plus_ep_node* nd, const int* in_slot, const int* out_slot) {
    for (int i = 0; i < nd->n_in; i++) nd->in_map[i] = in_slot[i];
    for (int o = 0; o < nd->n_out; o++) nd->out_map[o] = out_slot[o];
}

OrtStatus* plus_ep_kernel_create(plus_ep* ep, const char* node, const char* plan, const plus_pack_src* packs,
                                 int n_packs, const char* const* input_names, size_t n_inputs,
                                 const char* const* output_names, size_t n_outputs, plus_ep_node** out) {
    char err[PLUS_ERR_LEN];
    *out = NULL;
    plus_ep_node* nd = calloc(1, sizeof *nd);
    if (!nd) return plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
    if (plus_kernel_create(node, plan, packs, n_packs, input_names, n_inputs, &nd->k, err, sizeof err)) {
        free(nd);
        return plus_ep_status(ORT_FAIL, "%s", err);
    }
    const plus_plan* pl = plus_kernel_plan(nd->k);
    OrtStatus* st = NULL;
    if ((size_t)pl->n_in != n_inputs || (size_t)pl->n_out != n_outputs)
        st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': the node has %zu inputs and %zu outputs, its plan declares %d "
                            "and %d", node, n_inputs, n_outputs, pl->n_in, pl->n_out);
    if (!st) {   /* wired "": refused unless the plan marks it optional (an output ORT dropped gets a temporary) */
        int in_present[PLUS_MAX_IN], out_present[PLUS_MAX_OUT];
        for (size_t i = 0; i < n_inputs && i < PLUS_MAX_IN; i++) in_present[i] = input_names[i][0] != 0;
        for (size_t o = 0; o < n_outputs && o < PLUS_MAX_OUT; o++) out_present[o] = output_names[o][0] != 0;
        if (plus_kernel_check_wiring(nd->k, in_present, n_inputs, out_present, n_outputs, err, sizeof err))
            st = plus_ep_status(ORT_FAIL, "%s", err);
    }
    if (st) {
        plus_ep_kernel_destroy(nd);
        return st;
    }
    nd->ep = ep;
    nd->stat = plus_ep_stat_for(node);
    nd->n_in = pl->n_in;
    nd->n_out = pl->n_out;
    for (int i = 0; i < PLUS_MAX_IN; i++) nd->in_map[i] = -1;
    for (int o = 0; o < PLUS_MAX_OUT; o++) nd->out_map[o] = -1;
    *out = nd;
    return NULL;
}

static const plus_ep_group* find_group(const plus_ep* ep, const char* key) {
    for (size_t g = 0; g < ep->plan.n; g++)
        for (size_t j = 0; j < ep->plan.groups[g].n_members; j++)
            if (!strcmp(ep->plan.groups[g].members[j], key)) return &ep->plan.groups[g];
    return NULL;
}

#define MAX_VIEW_PARTS PLUS_CTX_MAX_PARTS

static OrtStatus* compile_one(plus_ep* ep, const OrtGraph* graph, const OrtNode* fused, OrtNodeComputeInfo** out,
                              OrtNode** ctx_out) {
    const OrtNode** nodes = NULL;
    size_t n = 0;
    *out = NULL;
    OrtStatus* st = graph_nodes(graph, &nodes, &n);
    if (st) return st;
    char node[PLUS_NAME_LEN];
    char* plan_owned = NULL;
    const char** names[2 * MAX_VIEW_PARTS] = {0};   /* per part: input and output names, malloc'ed */
    const char** fin = NULL;
    const char** fout = NULL;
    size_t n_fin = 0, n_fout = 0;
    plus_pack_src packs[MAX_VIEW_PARTS][PLUS_MAX_ARCHS];
    OrtValue* values[PLUS_MAX_ARCHS] = {0};
    char archs[PLUS_MAX_ARCHS][PLUS_NAME_LEN];
    plus_ctx_part parts[MAX_VIEW_PARTS];
    plus_ctx_const* consts = NULL;
    size_t n_parts = 0, n_consts = 0;
    char* sig = NULL;
    plus_ctx_payload payload = {.n = 0};
    fused_fields ff = {0};
    const char* str_names[PLUS_TRUST_N_STRINGS];
    const char* str_values[PLUS_TRUST_N_STRINGS];
    size_t str_lens[PLUS_TRUST_N_STRINGS], n_strs = 0;
    memset(parts, 0, sizeof parts);
    if (n == 1 && !is_fused(nodes[0]) && plus_ctx_is_node(nodes[0])) {   /* an EPContext node (ep_context.c) */
        if ((st = plus_ctx_load(graph, nodes[0], &payload))) goto done;
        snprintf(node, sizeof node, "%s", NODE_STR(nodes[0], Node_GetName));
        for (size_t i = 0; i < payload.n && !st; i++) {
            parts[i] = payload.parts[i];
            if ((st = plus_ctx_names(nodes[0], &payload.parts[i], &names[2 * i], &names[2 * i + 1]))) break;
            parts[i].inputs = names[2 * i];      /* "#k" refs -> the node's tensors as ORT holds them */
            parts[i].outputs = names[2 * i + 1];
            /* a model file's kernels: trusted exactly as a Fused node's (the node the payload says it was) */
            if (parts[i].kind == PLUS_PART_KERNEL) st = check_trust(ep, &parts[i]);
        }
        n_parts = payload.n;
        consts = payload.consts;
        n_consts = payload.n_consts;
        if (st) goto done;
    } else if (n == 1 && is_fused(nodes[0])) {   /* a Fused node of a rewritten model */
        snprintf(node, sizeof node, "%s", NODE_STR(nodes[0], Node_GetName));
        const char* plan = plan_owned = attr_string(nodes[0], "plus_plan");
        if (!plan) {
            st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': no plus_plan attribute", node);
            goto done;
        }
        const OrtOpAttr* attrs[PLUS_MAX_ARCHS];
        int k = image_attrs(nodes[0], archs, attrs, PLUS_MAX_ARCHS), n_packs = 0;
        if (k < 0) {
            st = plus_ep_status(ORT_FAIL, "PlusEP node '%s': more than %d plus_images_<arch> attributes, or an arch "
                                "name of %d bytes or more", node, PLUS_MAX_ARCHS, PLUS_NAME_LEN);
            goto done;
        }
        for (int i = 0; i < k; i++) {
            const void* data = NULL;
            size_t bytes = 0;
            if ((st = ORT_CALL(plus_ep_api, OpAttr_GetTensorAttributeAsOrtValue)(attrs[i], &values[i])) ||
                (st = ORT_CALL(plus_ep_api, GetTensorData)(values[i], &data)) ||
                (st = ORT_CALL(plus_ep_api, GetTensorSizeInBytes)(values[i], &bytes))) {
                OrtStatus* w = plus_ep_status(ORT_FAIL, "PlusEP node '%s': reading plus_images_%s: %s", node, archs[i],
                                              ORT_CALL(plus_ep_api, GetErrorMessage)(st));
                plus_ep_drop(st);
                st = w;
                goto done;
            }
            packs[0][n_packs++] = (plus_pack_src){.arch = archs[i], .data = data, .size = bytes};
        }
        size_t n_in = 0, n_out = 0;
        if ((st = plus_ep_io_names(nodes[0], 0, &names[0], &n_in)) || (st = plus_ep_io_names(nodes[0], 1, &names[1], &n_out))) goto done;
        sig = attr_string(nodes[0], PLUS_TRUST_SIG_ATTR);
        if ((st = fields_of(nodes[0], node, &ff))) goto done;
        parts[0] = (plus_ctx_part){.kind = PLUS_PART_KERNEL, .node = node, .inputs = names[0], .n_inputs = n_in,
                                   .outputs = names[1], .n_outputs = n_out, .plan = plan, .packs = packs[0],
                                   .n_packs = n_packs, .signature = sig, .op_type = ff.op_type,
                                   .attr_names = ff.attr_names, .n_attr_names = ff.n_attr_names};
        for (int i = 0; i < PLUS_TRUST_N_STRINGS; i++)
            if (ff.strs[i] && strcmp(ff.str_names[i], "plus_plan")) {   /* the plan travels as the part's plan */
                str_names[n_strs] = ff.str_names[i];
                str_values[n_strs] = ff.strs[i];
                str_lens[n_strs++] = ff.str_len[i];
            }
        parts[0].str_names = str_names, parts[0].str_values = str_values, parts[0].str_lens = str_lens;
        parts[0].n_strs = n_strs;
        /* The trust policy (trust.h) before anything of the node is loaded. Planned groups (below) come
         * from this process's own rewriter (its model cache verified by plus_ep/model_cache.py). */
        if ((st = check_trust(ep, &parts[0]))) goto done;
        n_parts = 1;
    } else {   /* a planned group of original nodes */
        const plus_ep_group* g = n ? find_group(ep, first_output(nodes[0])) : NULL;
        if (!g || g->n_parts > MAX_VIEW_PARTS) {
            st = plus_ep_status(ORT_FAIL, "PlusEP: Compile got a node group (%zu nodes) it did not claim", n);
            goto done;
        }
        snprintf(node, sizeof node, "%s", g->node);
        for (size_t i = 0; i < g->n_parts; i++) {
            const plus_ep_part* p = &g->parts[i];
            for (int a = 0; a < p->n_packs; a++)
                packs[i][a] = (plus_pack_src){.arch = p->pack_arch[a], .data = p->pack_data[a], .size = p->pack_size[a]};
            parts[i] = (plus_ctx_part){.kind = p->kind, .node = p->node, .inputs = (const char* const*)p->inputs,
                                       .n_inputs = p->n_inputs, .outputs = (const char* const*)p->outputs,
                                       .n_outputs = p->n_outputs, .plan = p->plan, .packs = packs[i],
                                       .n_packs = p->n_packs, .model = p->model, .model_size = p->model_size};
            plus_ctx_fused_view(&p->fused, &parts[i]);
        }
        n_parts = g->n_parts;
        if (g->n_consts && !(consts = calloc(g->n_consts, sizeof *consts))) {
            st = plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
            goto done;
        }
        for (size_t c = 0; c < g->n_consts; c++)
            consts[c] = (plus_ctx_const){.name = g->consts[c].name, .dtype = g->consts[c].dtype, .rank = g->consts[c].rank,
                                         .dims = g->consts[c].dims, .data = g->consts[c].data, .bytes = g->consts[c].bytes};
        n_consts = g->n_consts;
    }
    if ((st = plus_ep_io_names(fused, 0, &fin, &n_fin)) || (st = plus_ep_io_names(fused, 1, &fout, &n_fout))) goto done;
    if ((st = plus_ep_chain_create(ep, node, parts, n_parts, consts, n_consts, fin, n_fin, fout, n_fout, out))) goto done;
    if (ctx_out && (st = plus_ep_chain_context_node(*out, &ep->ctx, graph, fused, ctx_out))) {
        plus_ep_chain_destroy(*out);   /* ep.context_enable=1: the EPContext node standing for it (ep_context.c) */
        *out = NULL;
    }
done:
    for (int i = 0; i < PLUS_MAX_ARCHS; i++)
        if (values[i]) ORT_CALL(plus_ep_api, ReleaseValue)(values[i]);
    for (size_t i = 0; i < 2 * MAX_VIEW_PARTS; i++) free(names[i]);
    if (consts != payload.consts) free(consts);
    plus_ctx_payload_free(&payload);
    fields_free(&ff);
    free(sig);
    free(plan_owned);
    free(fin);
    free(fout);
    free(nodes);
    return st;
}

static OrtStatus* get_registry(OrtEp* base, const OrtKernelRegistry** out) {
    *out = ((plus_ep*)base)->registry;
    return NULL;
}

static OrtStatus* compile(OrtEp* base, const OrtGraph** graphs, const OrtNode** fused, size_t count,
                          OrtNodeComputeInfo** infos, OrtNode** ctx_nodes) {
    plus_ep* ep = (plus_ep*)base;
    for (size_t i = 0; i < count; i++) infos[i] = NULL;
    for (size_t i = 0; i < count; i++) {
        if (ctx_nodes) ctx_nodes[i] = NULL;
        OrtStatus* st = compile_one(ep, graphs[i], fused[i], &infos[i], ep->ctx.enable && ctx_nodes ? &ctx_nodes[i] : NULL);
        if (st) {
            for (size_t j = 0; j < i; j++) plus_ep_chain_destroy(infos[j]), infos[j] = NULL;
            return st;   /* EPContext nodes made so far: ORT releases what the array holds */
        }
    }
    return NULL;
}

static void release_infos(OrtEp* base, OrtNodeComputeInfo** infos, size_t n) {
    (void)base;
    for (size_t i = 0; i < n; i++) plus_ep_chain_destroy(infos[i]);
}

/* ---- the EP object ---- */

OrtStatus* plus_ep_create(int mode, int ordinal, const char* why, const OrtSessionOptions* so, const OrtLogger* logger,
                          OrtEp** out) {
    *out = NULL;
    plus_ep* ep = calloc(1, sizeof *ep);
    if (!ep) return plus_ep_status(ORT_FAIL, "PlusEP: out of memory");
    OrtStatus* st = plus_ep_read_options(so, &ep->opts);
    if (!st) st = plus_ctx_read_config(so, &ep->ctx);
    if (st) return free(ep), st;
    ep->base.ort_version_supported = plus_ep_version;
    ep->base.GetName = ep_name;
    ep->base.GetCapability = get_capability;
    ep->base.Compile = compile;
    ep->base.ReleaseNodeComputeInfos = release_infos;
    ep->mode = mode;
    ep->ordinal = ordinal;
    ep->logger = logger;
    snprintf(ep->why, sizeof ep->why, "%s", why ? why : "");
    if (mode != PLUS_MODE_INERT) {
        const char* dwhy = NULL;
        CUdevice dev;
        ep->drv = plus_driver_get(&dwhy);
        if (!ep->drv || ep->drv->cuDeviceGet(&dev, ordinal) ||
            ep->drv->cuDeviceGetAttribute(&ep->cc_major, PLUS_CU_ATTR_CC_MAJOR, dev) ||
            ep->drv->cuDeviceGetAttribute(&ep->cc_minor, PLUS_CU_ATTR_CC_MINOR, dev)) {
            ep->mode = PLUS_MODE_INERT;
            snprintf(ep->why, sizeof ep->why, "CUDA device %d is not usable%s%s", ordinal, dwhy ? ": " : "",
                     dwhy ? dwhy : "");
        }
    }
    if (ep->mode == PLUS_MODE_GPU) {   /* Memcpy kernels, run hooks, the device's pool (ep_memory.c, ep_stream.c) */
        if ((st = plus_ep_kernel_registry(ep, &ep->registry))) return free(ep), st;
        ep->base.GetKernelRegistry = get_registry;
        plus_ep_install_run_hooks(ep);
        plus_ep_device_ref(ep->ordinal, +1);
    }
    static atomic_int warned_inert;   /* once per process, through the session's logger (its severity) */
    if (ep->mode == PLUS_MODE_INERT)
        plus_ep_log_once(logger, ORT_LOG_WARNING, &warned_inert, "PlusEP: no usable NVIDIA GPU (%s); ai.plus_ep::Fused nodes run their "
                    "original subgraphs on the next execution providers", ep->why[0] ? ep->why : "unknown reason");
    else if (ep->mode == PLUS_MODE_STAGING)
        plus_ep_log(logger, ORT_LOG_INFO, "PlusEP: no NVIDIA GPU in ONNX Runtime's devices; running kernels on CUDA "
                    "device %d (compute capability %d.%d) of the driver $PLUS_EP_CUDA_LIBRARY through host staging",
                    ordinal, ep->cc_major, ep->cc_minor);
    *out = &ep->base;
    return NULL;
}

void plus_ep_destroy(OrtEp* base) {
    plus_ep* ep = (plus_ep*)base;
    if (!ep) return;
    plus_ep_groups_free(&ep->plan);
    if (ep->mode == PLUS_MODE_GPU) {
        plus_ep_release_graphs(ep);
        if (ep->registry) EP_CALL(plus_ep_epapi, ReleaseKernelRegistry)(ep->registry);
        plus_ep_device_ref(ep->ordinal, -1);
    }
    free(ep);
}
