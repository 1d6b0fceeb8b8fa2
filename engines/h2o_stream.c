/*
 * The h2o engine's streamed responses (libh2o-evloop 2.2.5), on the loop threads: a generator
 * whose proceed callback pulls the next piece from the core (srv__stream_pull), and a second
 * multithread receiver that brings the core's stream_kick (data, end or cut after a wait)
 * from any thread to the loop that owns the request: HTTP/2's, in DATA frames (HTTP/1's
 * streams are the core's, core/h1conn.c).
 */
#include "h2o_internal.h"

typedef struct eh2o_stream {
    h2o_generator_t gen;           /* first: h2o calls proceed and stop with &gen */
    h2o_multithread_message_t msg; /* the kick, at most one queued (kick_queued) */
    atomic_int kick_queued; /* msg is in the receiver's queue or about to be */
    eh2o_thread *thread;
    h2o_req_t *req;    /* NULL once h2o disposed it */
    srv_request *sreq; /* the engine's reference, released at the dispose */
    size_t lent;       /* bytes h2o holds from the last pull, sent at proceed */
    int sending;       /* h2o holds a piece: wait for proceed */
    int finished;      /* FINAL or ERROR sent, or h2o stopped the generator */
    int detached;      /* srv__stream_detach was called */
    atomic_int refs;   /* the dispose hook's, a kick in flight, a pump running */
} eh2o_stream;

static void eh2o_stream_unref(eh2o_stream *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        s->thread->streams--; /* every unref but a kick's send runs on the loop */
        free(s);
    }
}

/* h2o_send (DATA frames); the first one starts the response. May dispose req. */
static void eh2o_stream_send(eh2o_stream *s, h2o_iovec_t *buf, size_t n, h2o_send_state_t st,
                             int first)
{
    h2o_req_t *req = s->req;
    if (first)
        h2o_start_response(req, &s->gen);
    h2o_send(req, buf, n, st);
}

/* On the loop: send what the core has, unless h2o still holds a piece. */
static void eh2o_stream_pump(eh2o_stream *s, int first)
{
    if (s->req == NULL || s->finished || s->sending)
        return;
    const void *d = NULL;
    size_t len = 0;
    int k = srv__stream_pull(s->sreq, &d, &len);
    if (k == SRV__STREAM_WAIT) {
        if (first) { /* the head goes out now; the body when the application writes */
            s->sending = 1; /* until proceed: h2o_send once at a time */
            s->lent = 0;
            atomic_fetch_add(&s->refs, 1);
            eh2o_stream_send(s, NULL, 0, H2O_SEND_STATE_IN_PROGRESS, 1);
            eh2o_stream_unref(s);
        }
        return;
    }
    atomic_fetch_add(&s->refs, 1); /* h2o_send may dispose the request */
    if (k == SRV__STREAM_DATA) {
        s->sending = 1;
        s->lent = len;
        h2o_iovec_t buf = h2o_iovec_init(d, len);
        eh2o_stream_send(s, &buf, 1, H2O_SEND_STATE_IN_PROGRESS, first);
    } else {
        /* END: the body is complete; CUT: h2o resets the stream. */
        s->finished = 1;
        s->detached = 1;
        srv__stream_detach(s->sreq);
        h2o_send_state_t st = k == SRV__STREAM_END ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_ERROR;
        eh2o_stream_send(s, NULL, 0, st, first);
    }
    eh2o_stream_unref(s);
}

static void eh2o_stream_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    (void)req;
    eh2o_stream *s = (eh2o_stream *)gen;
    if (s->sending) {
        s->sending = 0;
        if (s->lent > 0)
            srv__stream_sent(s->sreq, s->lent);
        s->lent = 0;
    }
    eh2o_stream_pump(s, 0);
}

/* h2o gives up on the response (the client went away): the dispose follows. */
static void eh2o_stream_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    (void)req;
    ((eh2o_stream *)gen)->finished = 1;
}

static void eh2o_stream_on_dispose(void *p)
{
    eh2o_stream *s = *(eh2o_stream **)p;
    s->req = NULL;
    s->finished = 1;
    if (!s->detached) { /* after it, no kick comes */
        s->detached = 1;
        srv__stream_detach(s->sreq);
    }
    srv__request_release(s->sreq);
    s->sreq = NULL;
    eh2o_stream_unref(s);
}

/* The receiver of kicks, on the loop. */
static void eh2o_stream_on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        eh2o_stream *s = H2O_STRUCT_FROM_MEMBER(eh2o_stream, msg.link, messages->next);
        h2o_linklist_unlink(&s->msg.link);
        /* Unlinked before the flag drops: a kick from now on may queue msg again, and the
         * pull below takes whatever came before it. */
        atomic_store(&s->kick_queued, 0);
        eh2o_stream_pump(s, 0);
        eh2o_stream_unref(s);
    }
}

/* stream_kick slot: any thread, the request's lock held. */
void eh2o_stream_kick(void *state, srv_request *sreq)
{
    (void)state;
    if (srv__h1conn_stream_kick(sreq)) /* HTTP/1: the core's connection */
        return;
    eh2o_stream *s = srv__request_engine_data(sreq);
    /* The core arms one kick per WAIT, but the loop may pull again (a proceed) and wait
     * anew before it has taken the first kick's message off its queue: a second kick then
     * finds msg still queued (h2o asserts on sending a linked message). The queued one
     * pumps, and its pull takes what this kick announces. */
    if (atomic_exchange(&s->kick_queued, 1) != 0)
        return;
    atomic_fetch_add(&s->refs, 1);
    h2o_multithread_send_message(&s->thread->stream_receiver, &s->msg);
}

int eh2o_stream_start(eh2o_thread *t, h2o_req_t *req, srv_request *sreq)
{
    eh2o_stream *s = calloc(1, sizeof *s);
    eh2o_stream **hook = s != NULL ? h2o_mem_alloc_shared(&req->pool, sizeof *hook,
                                                          eh2o_stream_on_dispose)
                                   : NULL;
    if (hook == NULL) {
        free(s);
        return -1;
    }
    s->gen.proceed = eh2o_stream_proceed;
    s->gen.stop = eh2o_stream_stop;
    s->thread = t;
    s->req = req;
    s->sreq = sreq;
    atomic_init(&s->refs, 1); /* the dispose hook's */
    *hook = s;
    t->streams++;
    /* Kicks find the stream through the request from now on (the first pull, below, is
     * what allows one). */
    srv__request_set_engine_data(sreq, s);
    int64_t len = srv__response_stream_length(sreq);
    req->res.content_length = len >= 0 ? (size_t)len : SIZE_MAX;
    eh2o_stream_pump(s, 1);
    return 0;
}

void eh2o_stream_thread_init(eh2o_thread *t)
{
    h2o_multithread_register_receiver(t->ctx.queue, &t->stream_receiver, eh2o_stream_on_messages);
}

void eh2o_stream_thread_dispose(eh2o_thread *t)
{
    h2o_multithread_unregister_receiver(t->ctx.queue, &t->stream_receiver);
}
