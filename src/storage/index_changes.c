/*
 * index_changes: the change feed's index (index.h, "The change feed's lists"):
 * each user's changes in rev order, kept short as they are superseded, taken
 * back by a failed batch's undo, and trimmed behind a compaction's horizon.
 */
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "storage/index.h"
#include "storage/index_internal.h"

void index_change_add(struct index *ix, uint64_t user_id, uint64_t rev, uint64_t id, uint8_t type,
                      uint8_t op) {
    if (!record_type_in_quota(type) || rev <= ix->rev_horizon) return;
    change_append(ix, owner_get(ix, user_id, true), rev, id, type, op);
}

void change_append(struct index *ix, struct owner *o, uint64_t rev, uint64_t id, uint8_t type,
                   uint8_t op) {
    struct index_changes *l = &o->changes;
    if (l->len == l->cap) {
        /* Drop what a compaction left behind the horizon before growing. */
        uint32_t keep = index_changes_after(l, ix->rev_horizon);
        if (keep) {
            memmove(l->v, l->v + keep, (l->len - keep) * sizeof *l->v);
            l->len -= keep;
        }
        /* And the superseded changes, which a page would only skip one by one, also
         * while changes are not acknowledged yet (a client pipelining its writes, or
         * writing from several connections, has some in every batch: waiting for a
         * list with none kept every change until the next compaction). An undone
         * change brings back its record's earlier state, whose listed change
         * index_change_undo lists again if it left; the record's last listed change
         * stays here, so that the usual undo, of the change being added, finds it. */
        {
            uint32_t back = l->len; /* the record's last change, if listed */
            for (uint32_t i = l->len; i-- > 0;)
                if (index_change_id(&l->v[i]) == id) {
                    back = i;
                    break;
                }
            uint32_t w = 0;
            for (uint32_t i = 0; i < l->len; i++)
                if (i == back || index_change_current(ix, &l->v[i]) != INDEX_CHANGE_STALE)
                    l->v[w++] = l->v[i];
            l->len = w;
        }
        /* Grown unless at least half was dropped: the next walk is then at least
         * cap / 2 appends away, so a walk costs at most two steps an append. */
        if (l->cap == 0 || l->len > l->cap / 2) {
            l->cap = l->cap ? l->cap * 2 : 8;
            l->v = xrealloc(l->v, l->cap * sizeof *l->v);
        }
    }
    l->v[l->len++] = (struct index_change){rev, id | (uint64_t)type << 53 | (uint64_t)op << 56};
}

void index_changes_trim(struct index *ix) {
    for (int t = 0; t < OWNER_SHARDS; t++) {
        struct owner_table *ot = &ix->owners[t];
        for (size_t i = 0; i < ot->cap; i++) {
            struct index_changes *l = &ot->slots[i].changes;
            if (!l->cap) continue;
            uint32_t keep = index_changes_after(l, ix->rev_horizon);
            if (keep) {
                memmove(l->v, l->v + keep, (l->len - keep) * sizeof *l->v);
                l->len -= keep;
            }
            if (!l->len) {
                free(l->v);
                l->v = NULL;
                l->cap = 0;
            } else if (l->len <= l->cap / 4 && l->cap > 8) {
                l->cap = l->len * 2 > 8 ? l->len * 2 : 8;
                l->v = xrealloc(l->v, l->cap * sizeof *l->v);
            }
        }
    }
}

void index_change_undo(struct index *ix, uint64_t user_id, uint8_t type, uint64_t id, uint64_t rev,
                       const struct record *restored, uint64_t undone_from) {
    if (!record_type_in_quota(type)) return;
    struct owner *o = owner_get(ix, user_id, false);
    if (!o) return;
    struct index_changes *l = &o->changes;
    /* The undone change never happened: it leaves the list (a deletion whose create was
     * undone too would be current, its record being absent). Undone newest first, each
     * is the last of the undo's changes left in its list: a short move. */
    uint32_t i = index_changes_after(l, rev);
    if (i > 0 && l->v[i - 1].rev == rev && index_change_id(&l->v[i - 1]) == id) {
        memmove(l->v + i - 1, l->v + i, (l->len - i) * sizeof *l->v);
        ix->undo_moved += l->len - i;
        l->len--;
    }
    /* The state it brings back is listed at its rev unless it is listed still (its op is no
     * longer known when it left the list: an update, which the feed's readers take as an
     * upsert). Not one the undo takes back too, nor one behind the horizon. */
    if (!restored || restored->rev <= ix->rev_horizon || restored->rev >= undone_from) return;
    if (ix->relist_len == ix->relist_cap) {
        ix->relist_cap = ix->relist_cap ? ix->relist_cap * 2 : 64;
        ix->relist = xrealloc(ix->relist, ix->relist_cap * sizeof *ix->relist);
    }
    ix->relist[ix->relist_len++] = (struct index_relist){
        user_id, {restored->rev, id | (uint64_t)type << 53 | (uint64_t)INDEX_OP_UPDATE << 56}};
}

static int by_user_rev(const void *a, const void *b) {
    const struct index_relist *x = a, *y = b;
    if (x->user_id != y->user_id) return x->user_id < y->user_id ? -1 : 1;
    return (x->c.rev > y->c.rev) - (x->c.rev < y->c.rev);
}

void index_change_undo_done(struct index *ix) {
    if (!ix->relist_len) return;
    qsort(ix->relist, ix->relist_len, sizeof *ix->relist, by_user_rev);
    for (size_t g = 0, e; g < ix->relist_len; g = e) {
        uint64_t user_id = ix->relist[g].user_id;
        for (e = g; e < ix->relist_len && ix->relist[e].user_id == user_id; e++) {
        }
        struct owner *o = owner_get(ix, user_id, false);
        if (!o) continue;
        /* One merge of two rev-ordered runs; a change listed still is not listed twice. */
        struct index_changes *l = &o->changes;
        uint32_t cap = l->len + (uint32_t)(e - g);
        struct index_change *v = xrealloc(NULL, cap * sizeof *v);
        uint32_t n = 0, i = 0;
        for (size_t j = g; j < e; j++) {
            const struct index_change *c = &ix->relist[j].c;
            while (i < l->len && l->v[i].rev < c->rev)
                v[n++] = l->v[i++];
            if (i < l->len && l->v[i].rev == c->rev) continue; /* listed still */
            v[n++] = *c;
        }
        while (i < l->len)
            v[n++] = l->v[i++];
        ix->undo_moved += n;
        free(l->v);
        l->v = v;
        l->len = n;
        l->cap = cap;
    }
    ix->relist_len = 0;
}

const struct index_changes *index_changes_of(const struct index *ix, uint64_t user_id) {
    static const struct index_changes empty;
    const struct owner *o = owner_get((struct index *)ix, user_id, false);
    return o ? &o->changes : &empty;
}

uint32_t index_changes_after(const struct index_changes *l, uint64_t rev) {
    uint32_t lo = 0, hi = l->len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (l->v[mid].rev <= rev)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

const struct record *index_change_current(const struct index *ix, const struct index_change *c) {
    const struct record *r = index_get(ix, index_change_id(c));
    if (index_change_op(c) == INDEX_OP_DELETE) return r ? INDEX_CHANGE_STALE : NULL;
    return r && r->rev == c->rev ? r : INDEX_CHANGE_STALE;
}
