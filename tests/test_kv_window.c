/*
 * test_kv_window.c — layer kinds in the paged KV cache (kv/kv_cache.h): window
 * layers' parts released behind a table's window, on a small pool with hand-made
 * tables, no model.
 *
 * Pool: 4 layers, windows {8, 0, 8, 0} (layers 0 and 2 in the window part),
 * blocks of 4 positions, slack 4, f32 rows of 32. Every written row holds values
 * derived from (table, layer, K/V, position), so a read names what it got.
 *
 * Checked after every operation (check_invariants): used + free + cached == the
 * blocks with memory; bytes_sys == n_alloc * global part + n_walloc * window part;
 * the blocks holding a window part plus the free parts == n_walloc; every
 * block's wref equals the references at or after their table's cursor, and a
 * needed part exists; the blocks' parts stay within the budget.
 * Scenarios: a table grown one position at a time holds at most win_blocks window
 * parts while its global layers keep everything, and every row its window can
 * still read reads back exactly; a fork shares parts and each side releases on
 * its own; truncation to kv_table_rewind_min keeps the rows a continuation
 * reads; a cached prefix keeps the parts its window reaches, so a new table
 * matches the whole prefix and reads the same rows; a budget too small for the
 * parts fails cleanly (KVI_E_NO_KV_SPACE) with the pool unchanged.
 */
#include "testutil.h"

#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#define NL 4
#define KVD 32
#define BS 4
#define SLACK 4
static const int WIN[NL] = { 8, 0, 8, 0 };

static float val(int tab, int l, int which, int pos, int c)
{
    return (float)(tab * 100000 + l * 10000 + which * 5000 + pos) + c * 0.001f;
}

static void write_pos(kv_pool *p, kv_table *t, int tab, int pos)
{
    float row[KVD];
    for (int l = 0; l < NL; l++)
        for (int w = 0; w < 2; w++) {
            for (int c = 0; c < KVD; c++) row[c] = val(tab, l, w, pos, c);
            kv_write_row(p, t, l, w, pos, row);
        }
}

/* every row t's next position can still read: global layers all, window layers the last W */
static bool rows_ok(const kv_pool *p, const kv_table *t, int tab)
{
    float row[KVD];
    for (int l = 0; l < NL; l++) {
        const int lo = WIN[l] ? (t->n_pos - WIN[l] + 1 > 0 ? t->n_pos - WIN[l] + 1 : 0) : 0;
        for (int pos = lo; pos < t->n_pos; pos++)
            for (int w = 0; w < 2; w++) {
                kv_read_row(p, t, l, w, pos, row);
                for (int c = 0; c < KVD; c++)
                    if (row[c] != val(tab, l, w, pos, c)) return false;
            }
    }
    return true;
}

static void check_invariants(const kv_pool *p, kv_table *const *tabs, int n_tabs, const char *where)
{
    CHECK(p->n_used + p->n_free + p->n_cached == p->n_alloc, "%s: block counts", where);
    CHECK(p->bytes_sys == (size_t)p->n_alloc * p->gblock_bytes + (size_t)p->n_walloc * p->wblock_bytes +
                              (size_t)p->n_tails * p->tail_bytes,
          "%s: bytes_sys %zu", where, p->bytes_sys);
    CHECK(kv_pool_bytes_allocated(p) <= p->budget, "%s: over budget", where);
    int32_t held = 0;
    for (int32_t b = 0; b < p->n_blocks_max; b++) {
        if (p->wmem[b]) held++;
        int32_t need = 0;
        for (int k = 0; k < n_tabs; k++)
            for (int32_t i = tabs[k]->wdrop; i < tabs[k]->n_blocks; i++) need += tabs[k]->blocks[i] == b;
        CHECK(p->wref[b] == need, "%s: block %d wref %d, tables need %d", where, b, p->wref[b], need);
        CHECK(need == 0 || p->wmem[b], "%s: block %d needed without its window part", where, b);
    }
    CHECK(held + p->n_wfree == p->n_walloc, "%s: %d parts held + %d free != %d", where, held, p->n_wfree,
          p->n_walloc);
}

static void grow(kv_pool *p, kv_table *t, int tab, int to, kv_table *const *tabs, int n_tabs,
                 int32_t *max_parts)
{
    kvi_error err = { 0 };
    for (int pos = t->n_pos; pos < to; pos++) {
        CHECK(kv_table_reserve(p, t, pos + 1, &err) == 0, "reserve %d: %s", pos, err.msg);
        write_pos(p, t, tab, pos);
        t->tokens[pos] = 3 + pos % 7;
        t->n_pos = pos + 1;
        kv_table_window_release(p, t);
        int32_t parts = 0;
        for (int32_t i = t->wdrop; i < t->n_blocks; i++) parts++;
        if (parts > *max_parts) *max_parts = parts;
        CHECK(rows_ok(p, t, tab), "table %d at %d: rows differ", tab, t->n_pos);
        check_invariants(p, tabs, n_tabs, "grow");
    }
}

int main(void)
{
    kv_pool p;
    kvi_error err = { 0 };
    const size_t lb = kv_layout_block_bytes(1, KVD, BS, KVI_TYPE_F32, KVI_TYPE_F32);
    CHECK(kv_pool_init_layers(&p, NL, WIN, SLACK, KVD, BS, KVI_TYPE_F32, KVI_TYPE_F32, 64 * 4 * lb, &err) ==
              0,
          "pool: %s", err.msg);
    CHECK(p.n_wlayers == 2 && p.gblock_bytes == 2 * lb && p.wblock_bytes == 2 * lb, "layout");
    kv_table a = { 0 }, b = { 0 }, c = { 0 };
    kv_table *tabs[3] = { &a, &b, &c };

    /* one table, 64 positions: window parts bounded, global layers all kept */
    int32_t max_parts = 0;
    grow(&p, &a, 1, 64, tabs, 3, &max_parts);
    const int32_t bound = (8 + SLACK + BS - 1) / BS + 2;
    CHECK(max_parts <= bound, "table held %d window parts (bound %d)", max_parts, bound);
    CHECK(a.wdrop > 0 && p.n_wreleased > 0, "nothing released (wdrop %d)", a.wdrop);
    printf("64 positions: %d blocks, %d window parts held at most (bound %d), %llu released\n", a.n_blocks,
           max_parts, bound, (unsigned long long)p.n_wreleased);
    {
        float row[KVD];
        kv_read_row(&p, &a, 1, 0, 0, row); /* a global layer still has position 0 */
        CHECK(row[3] == val(1, 1, 0, 0, 3), "global layer lost position 0");
    }
    /* the pool's accounting of what a table holds, vs a full cache */
    const size_t full = (size_t)a.n_blocks * p.block_bytes;
    const size_t held = (size_t)a.n_blocks * p.gblock_bytes + (size_t)(a.n_blocks - a.wdrop) * p.wblock_bytes;
    CHECK(held < full * 3 / 4, "held %zu of a full %zu", held, full);
    CHECK(kv_layout_seq_bytes(NL, WIN, SLACK, KVD, BS, KVI_TYPE_F32, KVI_TYPE_F32, 64) ==
              16 * p.gblock_bytes + (size_t)bound * p.wblock_bytes,
          "kv_layout_seq_bytes");

    /* fork: shares every block; each side releases on its own */
    CHECK(kv_table_share(&p, &b, &a, &err) == 0, "share: %s", err.msg);
    check_invariants(&p, tabs, 3, "share");
    int32_t mp = 0;
    grow(&p, &b, 1, 80, tabs, 3, &mp); /* b continues a's rows with the same values */
    CHECK(rows_ok(&p, &a, 1), "a's rows changed by its fork");
    check_invariants(&p, tabs, 3, "fork grown");

    /* rewind: to rewind_min keeps what a continuation reads */
    const int32_t rm = kv_table_rewind_min(&p, &b);
    CHECK(rm > 0 && rm < b.n_pos, "rewind_min %d of %d", rm, b.n_pos);
    kv_table_truncate(&p, &b, rm);
    check_invariants(&p, tabs, 3, "rewind");
    CHECK(rows_ok(&p, &b, 1), "rows after rewinding to %d", rm);
    grow(&p, &b, 1, 90, tabs, 3, &mp);

    /* prefix: a's full blocks indexed; a released; c matches all of them */
    kv_prefix_index_table(&p, &a, 0);
    int32_t toks[64];
    memcpy(toks, a.tokens, sizeof toks);
    kv_table_release(&p, &b); /* (released after a, b would have dropped the parts only a still needed) */
    kv_table_release(&p, &a);
    check_invariants(&p, tabs, 3, "released");
    const int32_t got = kv_prefix_match(&p, &c, toks, 64, &err);
    CHECK(got == 64, "prefix match %d of 64", got);
    check_invariants(&p, tabs, 3, "matched");
    CHECK(rows_ok(&p, &c, 1), "matched rows differ");
    kv_table_release(&p, &c);
    check_invariants(&p, tabs, 3, "end");
    kv_pool_free(&p);

    /* a budget with room for blocks but not for their window parts: clean refusal */
    CHECK(kv_pool_init_layers(&p, NL, WIN, SLACK, KVD, BS, KVI_TYPE_F32, KVI_TYPE_F32, 4 * lb, &err) == 0,
          "small pool");
    kv_table d = { 0 };
    CHECK(kv_table_reserve(&p, &d, BS, &err) == 0, "first block");
    CHECK(kv_table_reserve(&p, &d, 2 * BS, &err) == KVI_E_NO_KV_SPACE, "second block must not fit");
    CHECK(d.n_blocks == 1 && p.n_used == 1, "failed reserve changed the table");
    kv_table *dt[1] = { &d };
    check_invariants(&p, dt, 1, "small");
    kv_table_release(&p, &d);
    kv_pool_free(&p);
    return test_main_end();
}
