/*
 * api_events: the /v2 event rules. An event links at most one theme and one
 * address of its user; a theme or address belongs to at most one event
 * (the index derives each one's EventID from the events). Reading an event
 * embeds what it links.
 */
#include <stdio.h>

#include "api/api.h"
#include "core/reply.h"

/*
 * Events link a theme and an address. A linked record must be the caller's,
 * of the right kind, and not linked to another event. Returns true if fine.
 */
bool events_check_links(struct handlers *h, uint64_t user_id, struct http_response *r,
                        const union value *vals, uint64_t event_id) {
    static const struct {
        int field;
        uint8_t type;
        const char *what;
    } links[] = {{EVENT_THEME_ID, REC_THEME, "theme"}, {EVENT_ADDRESS_ID, REC_ADDRESS, "address"}};
    for (int i = 0; i < 2; i++) {
        uint64_t id = vals[links[i].field].i;
        if (id == 0) continue;
        const char *name = record_event.fields[links[i].field].name;
        const struct record *t = db_get(h->db, id);
        if (!t || t->type != links[i].type || t->user_id != user_id) {
            reply_error(r, ERR_INVALID_FIELD, name, "%s %llu is not one of your %s records", name,
                        (unsigned long long)id, links[i].what);
            return false;
        }
        if (t->event_id && t->event_id != event_id) {
            reply_error(r, ERR_CONFLICT, name, "%s %llu already belongs to event %llu",
                        links[i].what, (unsigned long long)id, (unsigned long long)t->event_id);
            return false;
        }
    }
    return true;
}

void events_write_embeds(struct handlers *h, const struct record *rec, struct buf *out) {
    static const struct {
        int field;
        uint8_t type;
        const char *key;
    } embeds[] = {{EVENT_THEME_ID, REC_THEME, ",\"Theme\":"},
                  {EVENT_ADDRESS_ID, REC_ADDRESS, ",\"Address\":"}};
    for (int i = 0; i < 2; i++) {
        buf_append_str(out, embeds[i].key);
        const struct record *t = db_get_ref(h->db, rec, embeds[i].field);
        /* The API links only the event's owner's records of the right kind; a log
         * that says otherwise (an import checked less well) never shows another's. */
        if (t && t->type == embeds[i].type && t->user_id == rec->user_id)
            json_write_record(out, t, false);
        else
            buf_append_str(out, "null");
    }
}
