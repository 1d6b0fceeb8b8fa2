/*
 * The one place the core calls an engine's slots (SQLite's os.c for its
 * VFS): the table is checked here once, before the first slot runs; a slot
 * added in a later SRV_ENGINE_VERSION is called only when the table is new
 * enough; and tests inject faults here (srv__engine_inject_fault).
 */
#include "srv_core.h"

int srv__engine_check(srv_server *srv)
{
    const srv_engine *e = srv->engine;
    if (e->version < 1 || e->version > SRV_ENGINE_VERSION || e->name == NULL) {
        srv__server_set_error(srv, "engine table has version %d; this libsrv supports 1 to %d",
                              e->version, SRV_ENGINE_VERSION);
        return SRV_EENGINE;
    }
    /* Version 1's slots are all required. */
    if (!e->start || !e->respond || !e->quiesce || !e->stop || !e->destroy) {
        srv__server_set_error(srv, "engine \"%s\" leaves a version-%d slot empty", e->name,
                              e->version);
        return SRV_EENGINE;
    }
    /* Version 2: stream_kick, required with SRV_ENGINE_CAP_STREAM. */
    if ((e->caps & SRV_ENGINE_CAP_STREAM) && (e->version < 2 || !e->stream_kick)) {
        srv__server_set_error(srv, "engine \"%s\" claims streaming without a stream_kick slot",
                              e->name);
        return SRV_EENGINE;
    }
    /* Version 3: body_kick, required with SRV_ENGINE_CAP_STREAM_BODY. */
    if ((e->caps & SRV_ENGINE_CAP_STREAM_BODY) && (e->version < 3 || !e->body_kick)) {
        srv__server_set_error(srv,
                              "engine \"%s\" claims streamed bodies without a body_kick slot",
                              e->name);
        return SRV_EENGINE;
    }
    return 0;
}

void srv__engine_inject_fault(srv_server *srv, int (*fault)(const char *slot, void *arg),
                              void *arg)
{
    srv->fault = fault;
    srv->fault_arg = arg;
}

/* A test's fault for `slot`: non-zero makes the call fail as the engine
 * would have (for slots that can fail). */
static int srv__engine_fault(srv_server *srv, const char *slot)
{
    return srv->fault != NULL ? srv->fault(slot, srv->fault_arg) : 0;
}

int srv__engine_start(srv_server *srv)
{
    int rc = srv__engine_fault(srv, "start");
    if (rc != 0) {
        srv__server_set_error(srv, "engine %s: injected start failure", srv->engine->name);
        return rc < 0 ? rc : SRV_EENGINE;
    }
    return srv->engine->start(srv, &srv->engine_state);
}

void srv__engine_respond(srv_server *srv, srv_request *req)
{
    srv->engine->respond(srv->engine_state, req);
}

void srv__engine_stream_kick(srv_server *srv, srv_request *req)
{
    srv->engine->stream_kick(srv->engine_state, req);
}

void srv__engine_body_kick(srv_server *srv, srv_request *req)
{
    srv->engine->body_kick(srv->engine_state, req);
}

void srv__engine_quiesce(srv_server *srv)
{
    srv->engine->quiesce(srv->engine_state);
}

void srv__engine_stop(srv_server *srv)
{
    srv->engine->stop(srv->engine_state);
}

void srv__engine_destroy(srv_server *srv)
{
    srv->engine->destroy(srv->engine_state);
}
