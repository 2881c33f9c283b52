/*
 * cli: the subcommands that work on a data directory (user, compact) and
 * the demo user of a first start. Each prints its outcome for a person and
 * returns the process exit status.
 */
#ifndef EVENTD_CLI_H
#define EVENTD_CLI_H

#include <stdbool.h>

#include "config.h"
#include "db.h"

/* eventd user add|rotate|remove NAME, eventd user list: pos[0..npos) are the words after "user". */
int cli_user(struct db *db, int npos, const char **pos);
/* eventd compact: rewrites the log to its live records. */
int cli_compact(struct db *db, const struct config *cfg);
/* eventd admin token NAME: a new admin API token, printed once. */
int cli_admin_token(struct db *db, const char *name);

/* ---- on a running server, through DATA/admin.sock (cli_remote.c) ---- */

/* A server answers on dir's admin socket. */
bool cli_server_running(const char *dir);
int cli_user_remote(const char *dir, int npos, const char **pos);
int cli_admin_token_remote(const char *dir, const char *name);
/*
 * On a first start with no users, creates user "demo". Its key goes to
 * stdout when that is a terminal, else to DATA/demo-user.key (mode 0600),
 * so it never lands in a container's log. bound is the "HOST:PORT" served.
 */
void cli_demo_user(struct db *db, const struct config *cfg, const char *bound);

#endif
