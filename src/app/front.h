/*
 * front: the server_handler callbacks: per-connection request state,
 * routing each request to its surface (api/, site/, admin/), /metrics.
 * Knows nothing of the assembly (app.c).
 */
#ifndef EVENTD_APP_FRONT_H
#define EVENTD_APP_FRONT_H

#include <uv.h>

#include "core/handlers.h"

/*
 * Fills h (caller-owned storage) and out with the callbacks that serve the
 * API over db. set is copied (site_secret_path is read here only). db, srv
 * and metrics (or NULL) are borrowed and must outlive h; srv is the server
 * that out is given to: it is not used before its first request, so
 * server_start may come after front_init. Returns 0, or -1 after writing
 * the reason (a bad trusted_proxies entry or site_origin, an unreadable
 * secret file) to msg.
 */
int front_init(struct handlers *h, uv_loop_t *loop, struct db *db, struct server *srv,
               struct metrics *metrics, const struct handlers_settings *set,
               struct server_handler *out, char *msg, size_t msg_len);
void front_destroy(struct handlers *h);

/*
 * The checks of front_init that need nothing opened: a bad trusted_proxies
 * entry or site_origin. A server runs them before it opens (or creates) its
 * data directory and replays the log, so that a mistyped setting costs
 * neither. Returns 0, or -1 after writing the reason, naming the setting, to
 * msg.
 */
int front_check_settings(const struct handlers_settings *set, char *msg, size_t msg_len);

#endif
