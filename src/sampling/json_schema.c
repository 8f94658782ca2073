/*
 * json_schema.c — a JSON Schema as a GBNF grammar whose every sentence is a JSON
 * text valid against the schema.
 *
 * Data structure: one pass over the schema (cJSON tree) appends rules to a
 * gbnf_buf ("name ::= body\n"); each subschema becomes a rule s<N> (or a shared
 * one for plain types: string, number, integer, boolean, null, value, object,
 * array, emitted once at the end when used). Rule names s<N>, f<N>, c<N> carry
 * the caller's prefix when the schema is one of several in a grammar
 * (json_schema_int.h; "" for kvi_json_schema_to_gbnf). A local $ref (#,
 * #/$defs/X, #/definitions/X) becomes a rule generated once per target (refs
 * table), so recursive schemas become recursive rules.
 *
 * Invariants: every keyword of a schema object is either an annotation (title,
 * description, ...), or consumed by the code that enforces it, or an error naming
 * it: nothing is dropped silently. Where the grammar is stricter than the schema
 * it is still sound (every output is valid): properties come in their declared
 * order, additional properties are allowed only as a map when `properties` is
 * absent, prefixItems are all present, and oneOf is generated as anyOf (exact
 * when its branches are disjoint, as in tagged unions). Whitespace between
 * tokens is bounded (none, a space, or a newline and at most 20 blanks) and so
 * are numbers' digits, so a constrained output cannot run on in either. Nesting of inline subschemas is
 * bounded (JS_MAX_DEPTH); counts ({m,n}) are bounded by the grammar's limit.
 */
#include "kvinfer.h"
#include "formats/json_util.h"
#include "base/error.h"
#include "sampling/json_schema_int.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JS_MAX_DEPTH 64
#define JS_MAX_REFS 1024
#define JS_MAX_COUNT 1000

enum {
    P_VALUE = 1 << 0,
    P_STRING = 1 << 1,
    P_NUMBER = 1 << 2,
    P_INTEGER = 1 << 3,
    P_BOOLEAN = 1 << 4,
    P_NULL = 1 << 5,
    P_OBJECT = 1 << 6,
    P_ARRAY = 1 << 7,
    P_DATE = 1 << 8,
    P_TIME = 1 << 9,
    P_UUID = 1 << 10,
    P_EMAIL = 1 << 11,
    P_CHAR = 1 << 12,
};

typedef struct js {
    gbnf_buf *b;
    const char *pfx; /* rule name prefix ("" for a whole grammar) */
    unsigned prims;
    unsigned n_rules;
    const cJSON *root;
    const cJSON *ref_target[JS_MAX_REFS];
    unsigned ref_rule[JS_MAX_REFS];
    int n_refs;
    kvi_error *err;
    bool failed;
} js;

void gbnf_vput(gbnf_buf *b, const char *fmt, va_list ap)
{
    if (b->oom) return;
    for (;;) {
        va_list aq;
        va_copy(aq, ap);
        int n = vsnprintf(b->text ? b->text + b->len : NULL, b->text ? b->cap - b->len : 0, fmt, aq);
        va_end(aq);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->text && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = 2 * (b->cap + (size_t)n) + 64;
        char *o = realloc(b->text, nc);
        if (!o) {
            b->oom = true;
            return;
        }
        b->text = o;
        b->cap = nc;
    }
}

void gbnf_put(gbnf_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gbnf_vput(b, fmt, ap);
    va_end(ap);
}

static void put(js *j, const char *fmt, ...) KVI_PRINTF(2, 3);
static void put(js *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gbnf_vput(j->b, fmt, ap);
    va_end(ap);
}

static int fail(js *j, const char *fmt, ...) KVI_PRINTF(2, 3);
static int fail(js *j, const char *fmt, ...)
{
    if (!j->failed) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        err_set(j->err, KVI_E_INVALID, "json_schema: %s", msg);
    }
    j->failed = true;
    return -1;
}

void gbnf_put_literal(gbnf_buf *b, const char *s)
{
    gbnf_put(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            gbnf_put(b, "\\%c", *p);
        else if (*p == '\n')
            gbnf_put(b, "\\n");
        else if (*p < 0x20 || *p == 0x7F)
            gbnf_put(b, "\\x%02X", *p);
        else
            gbnf_put(b, "%c", *p);
    }
    gbnf_put(b, "\"");
}

static void put_literal(js *j, const char *s) { gbnf_put_literal(j->b, s); }

/* Appends a JSON value's compact text as a literal. */
static int put_json_literal(js *j, const cJSON *v)
{
    char *t = cJSON_PrintUnformatted(v);
    if (!t) return fail(j, "out of memory");
    put_literal(j, t);
    cJSON_free(t);
    return 0;
}

static bool is_annotation(const char *k)
{
    static const char *const ann[] = { "title",    "description", "$schema", "$id",         "$comment",
                                       "examples", "default",     "$defs",   "definitions", "deprecated",
                                       "readOnly", "writeOnly",   "$anchor", NULL };
    for (int i = 0; ann[i]; i++)
        if (strcmp(k, ann[i]) == 0) return true;
    return false;
}

/* The keywords a handler enforces, to find those nobody did. */
typedef struct used {
    const char *k[24];
    int n;
} used;

static const cJSON *take(const cJSON *s, used *u, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    if (v && u->n < 24) u->k[u->n++] = k;
    return v;
}

static int check_all_used(js *j, const cJSON *s, const used *u)
{
    for (const cJSON *c = s->child; c; c = c->next) {
        if (!c->string || is_annotation(c->string)) continue;
        bool ok = false;
        for (int i = 0; i < u->n && !ok; i++) ok = strcmp(u->k[i], c->string) == 0;
        if (!ok) return fail(j, "keyword '%s' is not supported", c->string);
    }
    return 0;
}

static int gen(js *j, const cJSON *s, int depth);

/* Whether x is a whole number; no conversion to an integer type, so 1e300
 * and infinities are safe to ask about (infinities are not whole). */
static bool dbl_is_integer(double x)
{
    return isfinite(x) && floor(x) == x;
}

/* A count keyword (non-negative integer <= JS_MAX_COUNT); -1 when absent. */
static int64_t count_kw(js *j, const cJSON *v, const char *name)
{
    if (!v) return -1;
    /* Range first: converting a double outside int64_t's range (1e300, NaN)
     * to an integer is undefined behaviour. */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0))
        return fail(j, "'%s' must be a non-negative integer", name), -2;
    if (v->valuedouble > JS_MAX_COUNT)
        return fail(j, "'%s' above %d is not supported", name, JS_MAX_COUNT), -2;
    if (!dbl_is_integer(v->valuedouble))
        return fail(j, "'%s' must be a non-negative integer", name), -2;
    return (int64_t)v->valuedouble;
}

/* {lo,hi} of GBNF: hi < 0 unbounded. */
static void put_count(js *j, int64_t lo, int64_t hi)
{
    if (hi < 0)
        put(j, "{%lld,}", (long long)lo);
    else
        put(j, "{%lld,%lld}", (long long)lo, (long long)hi);
}

static int gen_string(js *j, const cJSON *s, used *u, unsigned rule)
{
    const cJSON *fmt = take(s, u, "format");
    int64_t lo = count_kw(j, take(s, u, "minLength"), "minLength");
    int64_t hi = count_kw(j, take(s, u, "maxLength"), "maxLength");
    if (lo < -1 || hi < -1) return -1;
    if (fmt) {
        if (lo >= 0 || hi >= 0) return fail(j, "'format' together with minLength/maxLength is not supported");
        const char *f = cJSON_IsString(fmt) ? fmt->valuestring : "";
        unsigned p = strcmp(f, "date") == 0        ? P_DATE
                     : strcmp(f, "time") == 0      ? P_TIME
                     : strcmp(f, "date-time") == 0 ? P_DATE | P_TIME
                     : strcmp(f, "uuid") == 0      ? P_UUID
                     : strcmp(f, "email") == 0     ? P_EMAIL
                                                   : 0;
        if (!p) return fail(j, "string format '%s' is not supported", f);
        j->prims |= p;
        put(j, "%ss%u ::= \"\\\"\" %s \"\\\"\"\n", j->pfx, rule,
            p == (P_DATE | P_TIME) ? "date \"T\" time"
            : p == P_DATE          ? "date"
            : p == P_TIME          ? "time"
            : p == P_UUID          ? "uuid"
                                   : "email");
        return 0;
    }
    if (lo < 0 && hi < 0) {
        j->prims |= P_STRING;
        put(j, "%ss%u ::= string\n", j->pfx, rule);
        return 0;
    }
    if (hi >= 0 && lo > hi) return fail(j, "minLength > maxLength");
    j->prims |= P_CHAR;
    put(j, "%ss%u ::= \"\\\"\" char", j->pfx, rule);
    put_count(j, lo < 0 ? 0 : lo, hi);
    put(j, " \"\\\"\"\n");
    return 0;
}

/* The object's properties in order: f<k> (first one, no comma) and c<k>. */
static int gen_object(js *j, const cJSON *s, used *u, unsigned rule, int depth)
{
    const cJSON *props = take(s, u, "properties");
    const cJSON *req = take(s, u, "required");
    const cJSON *add = take(s, u, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(j, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(j, "'required' must be an array");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return fail(j, "'required' must hold strings");
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return fail(j, "required property '%s' is not in 'properties'", r->valuestring);
    }
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add))
        return fail(j, "'additionalProperties' must be a boolean or a schema");
    const bool has_props = props && props->child;
    if (!has_props) {
        if (add && cJSON_IsFalse(add)) {
            put(j, "%ss%u ::= \"{\" ws \"}\"\n", j->pfx, rule);
        } else if (add && cJSON_IsObject(add)) {
            int v = gen(j, add, depth + 1);
            if (v < 0) return -1;
            j->prims |= P_STRING;
            put(j,
                "%ss%u ::= \"{\" ws (string ws \":\" sp %ss%d ws (\",\" sp string ws \":\" sp %ss%d ws)*)? "
                "\"}\"\n",
                j->pfx, rule, j->pfx, v, j->pfx, v);
        } else {
            j->prims |= P_OBJECT;
            put(j, "%ss%u ::= object\n", j->pfx, rule);
        }
        return 0;
    }
    if (add && cJSON_IsObject(add) && add->child)
        return fail(j, "'additionalProperties' with a schema beside 'properties' is not supported");
    int n = cJSON_GetArraySize(props);
    if (n > JS_MAX_COUNT) return fail(j, "more than %d properties", JS_MAX_COUNT);
    int *val = malloc((size_t)n * sizeof *val);
    if (!val) return fail(j, "out of memory");
    int k = 0;
    for (const cJSON *p = props->child; p; p = p->next, k++) {
        val[k] = gen(j, p, depth + 1);
        if (val[k] < 0) {
            free(val);
            return -1;
        }
    }
    const unsigned base = j->n_rules;
    j->n_rules += 2 * (unsigned)n + 2;
    /* f<base+k>: from property k on, none emitted yet; c<base+k>: one was */
    k = 0;
    for (const cJSON *p = props->child; p; p = p->next, k++) {
        bool required = false;
        for (const cJSON *r = req ? req->child : NULL; r && !required; r = r->next)
            required = strcmp(r->valuestring, p->string) == 0;
        cJSON *name = cJSON_CreateString(p->string);
        char *nt = name ? cJSON_PrintUnformatted(name) : NULL;
        cJSON_Delete(name);
        if (!nt) {
            free(val);
            return fail(j, "out of memory");
        }
        put(j, "%sf%u ::= ", j->pfx, base + (unsigned)k);
        put_literal(j, nt);
        put(j, " ws \":\" sp %ss%d ws %sc%u%s", j->pfx, val[k], j->pfx, base + (unsigned)k + 1,
            required ? "" : " | ");
        if (!required) put(j, "%sf%u", j->pfx, base + (unsigned)k + 1);
        put(j, "\n%sc%u ::= \",\" sp ", j->pfx, base + (unsigned)k);
        put_literal(j, nt);
        put(j, " ws \":\" sp %ss%d ws %sc%u%s", j->pfx, val[k], j->pfx, base + (unsigned)k + 1,
            required ? "" : " | ");
        if (!required) put(j, "%sc%u", j->pfx, base + (unsigned)k + 1);
        put(j, "\n");
        cJSON_free(nt);
    }
    put(j, "%sf%u ::= \"\"\n%sc%u ::= \"\"\n", j->pfx, base + (unsigned)n, j->pfx, base + (unsigned)n);
    put(j, "%ss%u ::= \"{\" ws %sf%u \"}\"\n", j->pfx, rule, j->pfx, base);
    free(val);
    return 0;
}

static int gen_array(js *j, const cJSON *s, used *u, unsigned rule, int depth)
{
    const cJSON *items = take(s, u, "items");
    const cJSON *prefix = take(s, u, "prefixItems");
    int64_t lo = count_kw(j, take(s, u, "minItems"), "minItems");
    int64_t hi = count_kw(j, take(s, u, "maxItems"), "maxItems");
    if (lo < -1 || hi < -1) return -1;
    if (lo < 0) lo = 0;
    if (hi >= 0 && lo > hi) return fail(j, "minItems > maxItems");
    if (prefix && !cJSON_IsArray(prefix)) return fail(j, "'prefixItems' must be an array");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return fail(j, "'items' must be a schema (an array of schemas is 'prefixItems')");
    const int np = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (np > JS_MAX_COUNT) return fail(j, "more than %d prefixItems", JS_MAX_COUNT);
    if (hi >= 0 && np > hi) return fail(j, "more prefixItems than maxItems");
    int item = -1; /* rule of the further items, -1: none allowed */
    if (!items || cJSON_IsTrue(items)) {
        j->prims |= P_VALUE;
        item = -2; /* value */
    } else if (cJSON_IsObject(items)) {
        item = gen(j, items, depth + 1);
        if (item < 0) return -1;
    }
    if (np > 0 && (!items || cJSON_IsTrue(items))) item = -1; /* stricter: only the tuple */
    int64_t more_lo = lo > np ? lo - np : 0, more_hi = hi < 0 ? -1 : hi - np;
    if (item == -1 && more_lo > 0) return fail(j, "minItems exceeds the items allowed");
    int *pv = np ? malloc((size_t)np * sizeof *pv) : NULL;
    if (np && !pv) return fail(j, "out of memory");
    int k = 0;
    for (const cJSON *p = prefix ? prefix->child : NULL; p; p = p->next, k++) {
        pv[k] = gen(j, p, depth + 1);
        if (pv[k] < 0) {
            free(pv);
            return -1;
        }
    }
    char it[JS_MAX_PREFIX + 32];
    if (item == -2)
        snprintf(it, sizeof it, "value");
    else
        snprintf(it, sizeof it, "%ss%d", j->pfx, item);
    put(j, "%ss%u ::= \"[\" ws ", j->pfx, rule);
    for (k = 0; k < np; k++) put(j, "%s%ss%d ws ", k ? "\",\" sp " : "", j->pfx, pv[k]);
    free(pv);
    if (item != -1 && more_hi != 0) {
        if (np > 0) {
            put(j, "(\",\" sp %s ws)", it);
            put_count(j, more_lo, more_hi);
        } else {
            /* first item without a comma, the rest with one */
            if (more_lo == 0) put(j, "(");
            put(j, "%s ws (\",\" sp %s ws)", it, it);
            put_count(j, more_lo > 0 ? more_lo - 1 : 0, more_hi < 0 ? -1 : more_hi - 1);
            if (more_lo == 0) put(j, ")?");
        }
    }
    put(j, " \"]\"\n");
    return 0;
}

/* One branch of a schema's type. */
static int gen_type(js *j, const cJSON *s, used *u, const char *type, unsigned rule, int depth)
{
    if (strcmp(type, "string") == 0) return gen_string(j, s, u, rule);
    if (strcmp(type, "object") == 0) return gen_object(j, s, u, rule, depth);
    if (strcmp(type, "array") == 0) return gen_array(j, s, u, rule, depth);
    unsigned p = strcmp(type, "number") == 0    ? P_NUMBER
                 : strcmp(type, "integer") == 0 ? P_INTEGER
                 : strcmp(type, "boolean") == 0 ? P_BOOLEAN
                 : strcmp(type, "null") == 0    ? P_NULL
                                                : 0;
    if (!p) return fail(j, "type '%s' is not a JSON Schema type", type);
    j->prims |= p;
    put(j, "%ss%u ::= %s\n", j->pfx, rule, type);
    return 0;
}

/* A $ref to a rule: the target generated once. */
static int gen_ref(js *j, const char *ref, int depth)
{
    const cJSON *t = NULL;
    if (strcmp(ref, "#") == 0) {
        t = j->root;
    } else if (strncmp(ref, "#/$defs/", 8) == 0) {
        t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j->root, "$defs"), ref + 8);
    } else if (strncmp(ref, "#/definitions/", 14) == 0) {
        t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j->root, "definitions"),
                                             ref + 14);
    } else {
        return fail(j, "$ref '%.200s' is not supported (only #, #/$defs/NAME, #/definitions/NAME)", ref);
    }
    if (!t) return fail(j, "$ref '%.200s' points nowhere", ref);
    for (int i = 0; i < j->n_refs; i++)
        if (j->ref_target[i] == t) return (int)j->ref_rule[i];
    if (j->n_refs >= JS_MAX_REFS) return fail(j, "too many $ref targets");
    const unsigned rule = j->n_rules++;
    j->ref_target[j->n_refs] = t;
    j->ref_rule[j->n_refs++] = rule;
    int v = gen(j, t, depth + 1);
    if (v < 0) return -1;
    put(j, "%ss%u ::= %ss%d\n", j->pfx, rule, j->pfx, v);
    return (int)rule;
}

/* Whether JSON value e is of JSON Schema type t. */
static bool json_is_type(const cJSON *e, const char *t)
{
    if (strcmp(t, "string") == 0) return cJSON_IsString(e);
    if (strcmp(t, "boolean") == 0) return cJSON_IsBool(e);
    if (strcmp(t, "null") == 0) return cJSON_IsNull(e);
    if (strcmp(t, "array") == 0) return cJSON_IsArray(e);
    if (strcmp(t, "object") == 0) return cJSON_IsObject(e);
    if (strcmp(t, "number") == 0) return cJSON_IsNumber(e);
    if (strcmp(t, "integer") == 0)
        return cJSON_IsNumber(e) && dbl_is_integer(e->valuedouble);
    return false;
}

/* The rule number of schema s (rules are s<N>). */
static int gen(js *j, const cJSON *s, int depth)
{
    if (j->failed) return -1;
    if (depth > JS_MAX_DEPTH) return fail(j, "schema nested deeper than %d", JS_MAX_DEPTH);
    const unsigned rule = j->n_rules++;
    if (cJSON_IsTrue(s) || (cJSON_IsObject(s) && !s->child)) {
        j->prims |= P_VALUE;
        put(j, "%ss%u ::= value\n", j->pfx, rule);
        return (int)rule;
    }
    if (cJSON_IsFalse(s)) return fail(j, "the schema 'false' allows no value");
    if (!cJSON_IsObject(s)) return fail(j, "a schema must be an object or a boolean");
    used u = { .n = 0 };
    const cJSON *ref = take(s, &u, "$ref");
    const cJSON *cnst = take(s, &u, "const");
    const cJSON *en = take(s, &u, "enum");
    const cJSON *any = take(s, &u, "anyOf");
    const cJSON *one = take(s, &u, "oneOf");
    const cJSON *all = take(s, &u, "allOf");
    const cJSON *type = take(s, &u, "type");
    int n_forms = !!ref + !!cnst + !!en + !!any + !!one + !!all;
    if (n_forms > 1 || (n_forms == 1 && type && !en && !cnst))
        return fail(
            j, "combining $ref, const, enum, anyOf, oneOf, allOf and type in one schema is not supported");
    if (ref) {
        if (!cJSON_IsString(ref)) return fail(j, "'$ref' must be a string");
        if (check_all_used(j, s, &u) < 0) return -1;
        int r = gen_ref(j, ref->valuestring, depth);
        if (r < 0) return -1;
        put(j, "%ss%u ::= %ss%d\n", j->pfx, rule, j->pfx, r);
        return (int)rule;
    }
    if (cnst || en) {
        if (check_all_used(j, s, &u) < 0) return -1;
        if (en && (!cJSON_IsArray(en) || !en->child)) return fail(j, "'enum' must be a non-empty array");
        if (type && !cJSON_IsString(type)) return fail(j, "'type' beside enum/const must be one type name");
        put(j, "%ss%u ::= ", j->pfx, rule);
        for (const cJSON *e = cnst ? cnst : en->child; e; e = cnst ? NULL : e->next) {
            if (type && !json_is_type(e, type->valuestring))
                return fail(j, "an enum/const value is not of type '%s'", type->valuestring);
            if (e != cnst && e != en->child) put(j, " | ");
            if (put_json_literal(j, e) < 0) return -1;
        }
        put(j, "\n");
        return (int)rule;
    }
    if (any || one || all) {
        const cJSON *list = any ? any : one ? one : all;
        const char *kw = any ? "anyOf" : one ? "oneOf" : "allOf";
        if (!cJSON_IsArray(list) || !list->child) return fail(j, "'%s' must be a non-empty array", kw);
        if (all && list->child->next) return fail(j, "'allOf' with more than one schema is not supported");
        if (check_all_used(j, s, &u) < 0) return -1;
        int n = cJSON_GetArraySize(list), k = 0;
        int *alt = malloc((size_t)n * sizeof *alt);
        if (!alt) return fail(j, "out of memory");
        for (const cJSON *e = list->child; e; e = e->next, k++)
            if ((alt[k] = gen(j, e, depth + 1)) < 0) {
                free(alt);
                return -1;
            }
        put(j, "%ss%u ::= ", j->pfx, rule);
        for (k = 0; k < n; k++) put(j, "%s%ss%d", k ? " | " : "", j->pfx, alt[k]);
        put(j, "\n");
        free(alt);
        return (int)rule;
    }
    /* by type: a string, a list of them, or inferred from the keywords */
    const char *types[8];
    int nt = 0;
    if (type && cJSON_IsString(type)) {
        types[nt++] = type->valuestring;
    } else if (type && cJSON_IsArray(type)) {
        for (const cJSON *t = type->child; t; t = t->next) {
            if (!cJSON_IsString(t) || nt >= 7) return fail(j, "'type' must be a type name or a list of them");
            types[nt++] = t->valuestring;
        }
    } else if (type) {
        return fail(j, "'type' must be a type name or a list of them");
    } else if (cJSON_GetObjectItemCaseSensitive(s, "properties") ||
               cJSON_GetObjectItemCaseSensitive(s, "required") ||
               cJSON_GetObjectItemCaseSensitive(s, "additionalProperties")) {
        types[nt++] = "object";
    } else if (cJSON_GetObjectItemCaseSensitive(s, "items") ||
               cJSON_GetObjectItemCaseSensitive(s, "prefixItems")) {
        types[nt++] = "array";
    } else {
        if (check_all_used(j, s, &u) < 0) return -1;
        j->prims |= P_VALUE;
        put(j, "%ss%u ::= value\n", j->pfx, rule);
        return (int)rule;
    }
    if (nt == 0) return fail(j, "'type' is an empty list");
    if (nt == 1) {
        if (gen_type(j, s, &u, types[0], rule, depth) < 0) return -1;
    } else {
        const unsigned b = j->n_rules;
        j->n_rules += (unsigned)nt;
        for (int k = 0; k < nt; k++)
            if (gen_type(j, s, &u, types[k], b + (unsigned)k, depth) < 0) return -1;
        put(j, "%ss%u ::= ", j->pfx, rule);
        for (int k = 0; k < nt; k++) put(j, "%s%ss%u", k ? " | " : "", j->pfx, b + (unsigned)k);
        put(j, "\n");
    }
    return check_all_used(j, s, &u) < 0 ? -1 : (int)rule;
}

void json_schema_put_prims(gbnf_buf *b, unsigned prims)
{
    js jj = { .b = b, .pfx = "" };
    js *j = &jj;
    unsigned p = prims;
    if (p & P_VALUE) p |= P_OBJECT | P_ARRAY | P_STRING | P_NUMBER | P_BOOLEAN | P_NULL;
    if (p & (P_OBJECT | P_ARRAY))
        p |= P_VALUE | P_STRING | P_NUMBER | P_BOOLEAN | P_NULL | P_OBJECT | P_ARRAY;
    if (p & P_STRING) p |= P_CHAR;
    /* ws: around tokens; sp: after ':' and ',' (json.dumps' separators when compact) */
    if (prims & JS_WS_COMPACT)
        put(j, "ws ::= \"\"\nsp ::= \" \"\n");
    else
        put(j, "ws ::= \"\" | \" \" | \"\\n\" [ \\t]{0,20}\nsp ::= ws\n");
    if (p & P_VALUE) put(j, "value ::= object | array | string | number | boolean | null\n");
    if (p & P_OBJECT)
        put(j, "object ::= \"{\" ws (string ws \":\" sp value ws (\",\" sp string ws \":\" sp value ws)*)? "
               "\"}\"\n");
    if (p & P_ARRAY) put(j, "array ::= \"[\" ws (value ws (\",\" sp value ws)*)? \"]\"\n");
    if (p & P_STRING) put(j, "string ::= \"\\\"\" char* \"\\\"\"\n");
    if (p & P_CHAR)
        put(j, "char ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n");
    if (p & P_NUMBER) put(j, "number ::= integer (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?\n");
    if (p & (P_NUMBER | P_INTEGER)) put(j, "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n");
    if (p & P_BOOLEAN) put(j, "boolean ::= \"true\" | \"false\"\n");
    if (p & P_NULL) put(j, "null ::= \"null\"\n");
    if (p & P_DATE)
        put(j, "date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" "
               "[01])\n");
    if (p & P_TIME)
        put(j, "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
               "(\"Z\" | [-+] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n");
    if (p & P_UUID) {
        put(j, "uuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n");
        put(j, "hex ::= [0-9a-fA-F]\n");
    }
    if (p & P_EMAIL)
        put(j, "email ::= [a-zA-Z0-9._+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} (\".\" [a-zA-Z0-9-]{1,63}){1,4}\n");
}

int json_schema_rules(gbnf_buf *b, const cJSON *doc, const cJSON *schema, const char *prefix, const char *top,
                      unsigned *prims, kvi_error *err)
{
    if (strlen(prefix) > JS_MAX_PREFIX) {
        err_set(err, KVI_E_INVALID, "json_schema: rule prefix too long");
        return -1;
    }
    js j = { .b = b, .pfx = prefix, .root = doc, .err = err };
    if (schema) {
        int r = gen(&j, schema, 0);
        if (r >= 0) put(&j, "%s ::= %ss%d\n", top, prefix, r);
    } else {
        j.prims |= P_OBJECT;
        put(&j, "%s ::= object\n", top);
    }
    if (j.failed) return -1;
    *prims |= j.prims;
    return 0;
}

char *kvi_json_schema_to_gbnf(const char *schema, size_t len, kvi_error *err)
{
    gbnf_buf b = { 0 };
    cJSON *doc = NULL;
    if (schema) {
        bool oom = false;
        doc = kvi_json_parse(schema, len, &oom);
        if (oom) {
            err_set(err, KVI_E_NOMEM, "json_schema: out of memory");
            return NULL;
        }
        if (!doc) {
            err_set(err, KVI_E_INVALID, "json_schema: the schema is not valid JSON");
            return NULL;
        }
    }
    unsigned prims = 0;
    int rc = json_schema_rules(&b, doc, doc, "", "root", &prims, err);
    if (rc == 0) json_schema_put_prims(&b, prims);
    cJSON_Delete(doc);
    if (rc == 0 && b.oom) err_set(err, KVI_E_NOMEM, "json_schema: out of memory");
    if (rc < 0 || b.oom) {
        free(b.text);
        return NULL;
    }
    return b.text;
}
