/*
 * handlers: one function per endpoint, glue between the parsed request,
 * authentication, the body decoder, the index and the response. Supplies
 * the server_app callbacks.
 */
#ifndef EVENTD_HANDLERS_H
#define EVENTD_HANDLERS_H

#include "app.h"
#include "server.h"

/* Fills out with the callbacks that serve the API of app a. */
void handlers_init(struct app *a, struct server_app *out);

#endif
