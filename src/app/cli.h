/*
 * cli: the subcommands that work on a data directory (user, compact) and
 * the demo user of a first start. Each prints its outcome for a person and
 * returns the process exit status.
 */
#ifndef EVENTD_CLI_H
#define EVENTD_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "storage/db.h"

/*
 * eventd user add|rotate|remove|purge NAME, eventd user list: pos[0..npos)
 * are the words after "user". purge removes the user and every record it
 * owns (after a move to another shard); remove keeps the records.
 */
int cli_user(struct db *db, int npos, const char **pos);
/*
 * eventd export --user NAME: writes the user and every record it owns to
 * stdout in the log's own format (docs/STORAGE.md: the file header, then
 * one frame per record, the user first, events last), for eventd import.
 */
int cli_export(struct db *db, const char *name);
/*
 * eventd import: reads an export from stdin and adds its records with
 * their ids (ids carry their node, record.h, so they stay unique across
 * shards). All or nothing: refused when the input is damaged, the user
 * exists, or any id is taken here.
 */
int cli_import(struct db *db);
/* eventd compact: rewrites the log to its live records. */
int cli_compact(struct db *db, const struct config *cfg);
/* eventd backup FILE: a copy of dir's log, a server running or not (store_copy_log). */
int cli_backup(const char *dir, const char *out);
/* eventd admin token NAME: a new admin API token (replacing one of that name),
 * printed once; eventd admin revoke NAME: the token stops working. */
int cli_admin_token(struct db *db, const char *verb, const char *name);

/*
 * eventd user limits NAME [--max-records N|default] [--max-bytes N|default]:
 * sets a user's own quota limits (0: no limit; default: the server's,
 * --max-records-per-user and --max-bytes-per-user) and prints the limits
 * in effect and the usage. A NULL value keeps that limit.
 */
int cli_user_limits(struct db *db, const struct config *cfg, const char *name,
                    const char *max_records, const char *max_bytes);
/*
 * A --max-records / --max-bytes value as the user record stores it
 * (record.h: limit + 1, 0 for "default"). Returns 0, or -1 after printing
 * why on stderr.
 */
int cli_parse_limit(const char *flag, const char *v, uint64_t *stored);
/* Prints a user's usage and the limits in effect (0: none), saying which are its own. */
void cli_print_quota(const char *name, uint64_t records, uint64_t max_records, bool own_records,
                     uint64_t bytes, uint64_t max_bytes, bool own_bytes);

/* ---- on a running server, through DATA/admin.sock (cli_remote.c) ---- */

/* A server answers on dir's admin socket. */
bool cli_server_running(const char *dir);
int cli_user_remote(const char *dir, int npos, const char **pos);
int cli_admin_token_remote(const char *dir, const char *verb, const char *name);
int cli_user_limits_remote(const char *dir, const char *name, const char *max_records,
                           const char *max_bytes);
/*
 * On a first start with no users, creates user "demo". Its key goes to
 * stdout when that is a terminal, else to DATA/demo-user.key (mode 0600),
 * so it never lands in a container's log. bound is the "HOST:PORT" served.
 */
void cli_demo_user(struct db *db, const struct config *cfg, const char *bound);

#endif
