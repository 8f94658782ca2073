/*
 * jinja_int.h — private to src/template/: the values, the syntax tree and the
 * interpreter state shared by the Jinja files (lexer, parser, evaluator, filters,
 * values, JSON). Other layers call template.h.
 *
 * Memory: everything a parse or a render creates lives in one arena (jarena):
 * chunks freed together, never one object at a time. A render's arena is
 * bounded (jlimits.max_bytes), so a template that builds ever larger strings
 * fails with an error instead of exhausting memory.
 *
 * Errors: like Lua's luaD_throw, every failure inside a parse or a render (a
 * syntax error, a type error, raise_exception, an exhausted limit, a failed
 * allocation) is jinja_fail(), which writes the message and longjmps back to
 * the one entry point (template.c) that set J->jb. Nothing is freed on the way:
 * the arena holds it all. No function here prints or exits.
 *
 * Values (jv) are immutable once built, except a namespace() object, whose
 * attributes `set ns.x = ...` replaces. Strings are UTF-8 byte ranges (not
 * necessarily NUL-terminated); lengths, indices and slices count code points as
 * Python does.
 */
#ifndef KVI_JINJA_INT_H
#define KVI_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template/template.h"

/* ---- arena ---- */
typedef struct jchunk {
    struct jchunk *next;
    size_t used, cap; /* bytes of data[] handed out / held */
    _Alignas(16) unsigned char data[];
} jchunk;

typedef struct jarena {
    jchunk *head;
    size_t total;     /* bytes of every chunk */
    size_t max_bytes; /* total may not exceed this */
} jarena;

/* ---- values ---- */
typedef enum jv_kind {
    JV_UNDEF, /* str: the name that was undefined (for messages) */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* also tuples (is_tuple) */
    JV_DICT,  /* insertion order kept; keys are values (mostly strings) */
    JV_MACRO, /* a macro or a call block's caller */
    JV_FUNC,  /* a global function or a bound method (self) */
    JV_LOOP,  /* the `loop` object of a for loop */
} jv_kind;

typedef struct jv jv;
struct jnode;
struct jscope;

struct jv {
    uint8_t kind;
    bool is_tuple; /* JV_LIST: printed as (a, b) */
    bool is_ns;    /* JV_DICT: a namespace(), the one mutable value */
    bool is_markup; /* JV_STR: jinja2's Markup (from safe or escape): `+`, `%` and its
                       methods escape their plain string operands, and keep it markup */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *s;
            size_t n; /* bytes */
        } str;
        struct {
            jv **v;
            size_t n, cap;
        } list;
        struct {
            jv **k, **v; /* k[i] -> v[i], i < n */
            size_t n, cap;
        } dict;
        struct {
            const struct jnode *node; /* N_MACRO (or N_CALLBLOCK for caller) */
            struct jscope *scope;     /* where it was defined */
            jv *caller;               /* a call block's caller passed in, or NULL */
        } macro;
        struct {
            int id; /* jfunc_id */
            jv *self;
        } func;
        struct {
            jv *items;     /* the list iterated (JV_LIST) */
            size_t index0; /* the current item */
            int depth;
        } loop;
    } u;
};

/* ---- syntax tree ---- */
typedef enum jnode_type {
    /* expressions */
    N_LIT,      /* val */
    N_NAME,     /* s */
    N_LIST,     /* kids */
    N_TUPLE,    /* kids */
    N_DICT,     /* kids: key, value, key, value ... */
    N_ATTR,     /* kids[0].s */
    N_ITEM,     /* kids[0][kids[1]] */
    N_SLICE,    /* kids[0][kids[1]:kids[2]:kids[3]], absent parts NULL */
    N_CALL,     /* kids[0](kids[1..]); an argument's kw names a keyword argument */
    N_FILTER,   /* kids[0] | s(kids[1..]); kids[0] NULL in a filter block's chain */
    N_TEST,     /* kids[0] is [not] s(kids[1..]); op = 1 when negated */
    N_UNARY,    /* op kids[0] */
    N_BINARY,   /* kids[0] op kids[1] */
    N_COND,     /* kids[1] if kids[0] else kids[2] (kids[2] may be NULL) */
    N_BLOCKVAL, /* the body text of a filter block (its chain's innermost operand) */
    /* statements */
    N_BODY,     /* kids: statements */
    N_TEXT,     /* s, n */
    N_OUTPUT,   /* {{ kids[0] }} */
    N_IF,       /* if kids[0]: kids[1] else kids[2] (N_BODY, N_IF for elif, or NULL) */
    N_FOR,      /* for kids[0] in kids[1] if kids[2]: kids[3] else kids[4] */
    N_SET,      /* kids[0] (N_NAME, N_ATTR, N_TUPLE) = kids[1] */
    N_SETBLOCK, /* kids[0] (N_NAME) = body kids[1], filtered by kids[2] (chain or NULL) */
    N_MACRO, /* s: name; kids[0]: params (N_TUPLE of N_NAME whose kids[0] is the default or NULL); kids[1]: body */
    N_CALLBLOCK,   /* kids[0]: the call; kids[1]: caller params; kids[2]: body */
    N_FILTERBLOCK, /* kids[0]: filter chain; kids[1]: body */
    N_BREAK,
    N_CONTINUE,
} jnode_type;

typedef enum jop {
    OP_NONE,
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
    OP_AND,
    OP_OR,
    OP_NOT,
    OP_NEG,
    OP_POS,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN,
} jop;

typedef struct jnode {
    uint8_t type; /* jnode_type */
    uint8_t op;   /* jop, or the negation of N_TEST */
    int line;
    const char *s;  /* a name, a text */
    size_t n;       /* bytes of s */
    const char *kw; /* set on a call argument given as kw=value */
    jv *val;        /* N_LIT */
    struct jnode **kids;
    size_t nk;
} jnode;

/* ---- interpreter state ---- */
typedef struct jscope {
    struct jscope *parent;
    jv *vars; /* JV_DICT */
} jscope;

typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

typedef struct jctx {
    jmp_buf jb;
    kvi_error *err;
    jarena *A; /* where new values go */
    jlimits lim;
    uint64_t steps;
    int depth;
    jbuf *out;        /* where output goes now */
    size_t out_total; /* bytes statements wrote (output and captures), against max_output */
    jscope *top;      /* the template's own scope (top-level set, macros) */
    jscope *sc;       /* the current scope */
    jv *vars;         /* the render's variables (messages, tools ...) */
    jv *blockval;     /* N_BLOCKVAL's value while a filter block's chain runs */
    int line;         /* line of the node being evaluated (messages) */
} jctx;

/* jinja_value.c */
_Noreturn void jinja_fail(jctx *J, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void *ja_alloc(jctx *J, size_t n);
void ja_free_all(jarena *A);
char *ja_strdup(jctx *J, const char *s, size_t n);
jv *jv_new(jctx *J, int kind);
jv *jv_str(jctx *J, const char *s, size_t n);
jv *jv_cstr(jctx *J, const char *s);
jv *jv_int(jctx *J, int64_t i);
jv *jv_float(jctx *J, double f);
jv *jv_bool(bool b);
jv *jv_none(void);
jv *jv_undef(jctx *J, const char *name, size_t n);
jv *jv_list(jctx *J, size_t cap);
jv *jv_dict(jctx *J);
void jv_list_push(jctx *J, jv *l, jv *x);
void jv_dict_set(jctx *J, jv *d, jv *k, jv *v);
jv *jv_dict_get(const jv *d, const char *k, size_t n); /* NULL when absent */
jv *jv_dict_getv(const jv *d, const jv *k);
bool jv_truthy(const jv *x);
bool jv_equal(const jv *a, const jv *b);
int jv_compare(jctx *J, const jv *a, const jv *b); /* <0, 0, >0; type error otherwise */
const char *jv_type_name(const jv *x);
/* str(x) and repr(x) as Python writes them, appended to b. */
void jb_put(jctx *J, jbuf *b, const char *s, size_t n);
void jv_to_str(jctx *J, jbuf *b, const jv *x);
void jv_repr(jctx *J, jbuf *b, const jv *x);
jv *jv_stringify(jctx *J, const jv *x); /* str(x) as a JV_STR */
jv *jv_markup(jctx *J, jv *s);          /* the string s as markup (a new value; s is kept) */
jv *jinja_escape(jctx *J, jv *x, bool force); /* HTML-escaped markup of str(x); markup as is unless force */
void jv_float_repr(char *buf, size_t cap, double f);
/* json.dumps(x, ensure_ascii, indent (<0: None), separators, sort_keys) */
typedef struct jjson_opts {
    int indent;
    bool ensure_ascii, sort_keys;
    const char *item_sep, *key_sep; /* NULL: Python's defaults for indent */
} jjson_opts;
void jv_to_json(jctx *J, jbuf *b, const jv *x, const jjson_opts *o, int level);
/* UTF-8 helpers: code points of s; byte offset of code point i. */
size_t u8_len(const char *s, size_t n);
size_t u8_offset(const char *s, size_t n, size_t cp);
bool u8_isspace_at(const char *s, size_t n, size_t at, size_t *len);

/* jinja_json.c: JSON text to values (ints stay ints, key order kept). */
jv *jinja_json_parse(jctx *J, const char *s, size_t n, bool *ok);

/* jinja_lex.c: template text to tokens; the text between tags (T_DATA) with
 * jinja2's whitespace control already applied (trim_blocks, lstrip_blocks,
 * {%- -%}); comments dropped. The last token is T_EOF. */
enum {
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING, /* s, n: the decoded text */
    T_INT,
    T_FLOAT,
    T_OP, /* s, n: the operator */
    T_EOF,
};
typedef struct jtok {
    uint8_t t;
    int line;
    const char *s;
    size_t n;
} jtok;
jtok *jinja_lex(jctx *J, const char *src, size_t n, size_t *n_tok);

/* jinja_parse.c: template text to a tree (an N_BODY). */
jnode *jinja_parse(jctx *J, const char *src, size_t n);
/* jinja_content.c: whether some loop iterates a message's content (vLLM's "openai" form). */
bool jinja_iterates_content(const jnode *root);

/* jinja_eval.c */
void jinja_exec(jctx *J, const jnode *body);
jv *jinja_eval(jctx *J, const jnode *e);
jv *jinja_call_value(jctx *J, jv *fn, jv **args, const char **kws, size_t na);
jv *jinja_getattr(jctx *J, jv *obj, const char *name, size_t n);
jv *jinja_getitem(jctx *J, jv *obj, jv *key);
void jinja_step(jctx *J);
bool jinja_contains(jctx *J, jv *hay, jv *needle); /* needle in hay */
jv *jinja_iter_list(jctx *J, jv *x);               /* what `for` visits in x, as a list */
jv *jinja_str_format(jctx *J, jv *fmt, jv *args);  /* fmt % args */
/* The argument at position pos (counting positional ones) or named name; NULL when not given. */
jv *jinja_arg(jv **args, const char **kws, size_t na, size_t pos, const char *name);

/* jinja_filters.c */
jv *jinja_filter(jctx *J, const char *name, jv *x, jv **args, const char **kws, size_t na);
bool jinja_test(jctx *J, const char *name, jv *x, jv **args, size_t na);
/* jinja_methods.c: x.name(...) for strings, dicts and lists; NULL when x has no such method */
jv *jinja_method(jctx *J, jv *self, const char *name, size_t n, jv **args, const char **kws, size_t na);
bool jinja_has_method(const jv *self, const char *name, size_t n);
/* jinja_globals.c: range, namespace, dict, raise_exception, strftime_now */
jv *jinja_global(jctx *J, const char *name, size_t n); /* NULL when none */
jv *jinja_call_func(jctx *J, jv *fn, jv **args, const char **kws, size_t na);

#endif
