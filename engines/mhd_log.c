/* The mhd engine: what libmicrohttpd's messages tell (its only report of
 * what it wrote or lost on its own). MHD_OPTION_EXTERNAL_LOGGER: each loop
 * thread counts the error answers MHD announces (emhd_worker), a query MHD
 * could not hold is marked for the watchdog, and a failed start keeps MHD's
 * reason. */
#include "mhd_int.h"

#include <stdio.h>
#include <string.h>

/*
 * One per MHD polling thread. emhd_closing must know whether MHD wrote
 * anything on an idle connection (its own answer to a bad request line)
 * before closing it, and nothing public reports MHD's writes. But MHD
 * writes on a connection without a response of ours only through its
 * error answer, which it announces first, on the connection's own thread,
 * with one message ("Error processing request (HTTP response code is
 * ...", transmit_error_response_len, 0.9.75 and 1.0.x alike; its other
 * messages come with closes that write nothing). So each thread counts
 * those announcements: a connection whose thread announced none since it
 * went idle had nothing written. One for another connection of the same
 * thread makes the answer doubtful, and then none is written (a close,
 * never two answers). Without MHD's messages nothing can be told.
 */
#define EMHD_ANSWER_MSG "Error processing request"

/* MHD announced no answer on ec's thread since its count was `mark`: it wrote
 * nothing of its own on ec since then (emhd_worker). Any thread. */
bool emhd_quiet_since(const emhd_conn *ec, unsigned long long mark)
{
    return ec->worker != NULL && atomic_load(&ec->worker->msgs) == mark;
}

/* The calling thread's emhd_worker, NULL if it is none of MHD's (or MHD
 * has more threads than slots). With `add`, claim a slot for it. */
emhd_worker *emhd_worker_self(emhd_server *es, bool add)
{
    pthread_t self = pthread_self();
    unsigned n = atomic_load_explicit(&es->nworkers, memory_order_acquire);
    for (unsigned i = 0; i < n; i++)
        if (pthread_equal(es->workers[i].tid, self))
            return &es->workers[i];
    if (!add)
        return NULL;
    pthread_mutex_lock(&es->lock);
    n = atomic_load_explicit(&es->nworkers, memory_order_relaxed);
    emhd_worker *w = NULL;
    for (unsigned i = 0; i < n && w == NULL; i++) /* only this thread adds itself */
        if (pthread_equal(es->workers[i].tid, self))
            w = &es->workers[i];
    if (w == NULL && n < es->max_workers) {
        w = &es->workers[n];
        w->tid = self;
        atomic_init(&w->msgs, 0);
        atomic_store_explicit(&es->nworkers, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&es->lock);
    return w;
}

/* The connection goes idle (accepted, or its request completed with the
 * whole answer written): emhd_closing's "nothing written since" starts
 * here. MHD thread. */
void emhd_went_idle(emhd_conn *ec)
{
    ec->idle_msgs = ec->worker != NULL ? atomic_load(&ec->worker->msgs) : 0;
}

/* MHD logs routine events too (every error answer, every client that left
 * mid-response, the connection limit). Print only trouble on our side, at
 * most once a second; everything with SRV_MHD_LOG=1. While starting, keep
 * the last message: it explains a failed MHD_start_daemon. */
static bool emhd_log_is_trouble(const char *fmt)
{
    static const char *const trouble[] = {
        "Error accepting connection", "resource limit", "Failed to create",
        "Call to epoll", "Error allocating memory", "Failed to join",
        "Failed to signal", "Failed to start serving",
    };
    for (size_t i = 0; i < sizeof trouble / sizeof trouble[0]; i++)
        if (strstr(fmt, trouble[i]) != NULL)
            return true;
    return false;
}

/* Set on an MHD thread when MHD failed to build a response head ("failed
 * to create response header", nothing written): MHD then closes the
 * connection in the same call, and its request's completion
 * (emhd_notify_completed, which reads and clears this) follows at once:
 * every request MHD split has seen the URI callback, so MHD reports it. */
_Thread_local bool emhd_head_failed;

/* The request whose query MHD is splitting on this thread: set by the URI
 * callback, which MHD calls right before it splits the query, cleared by
 * the unescape call for the path, which MHD makes right after it (the
 * calls for each parameter come before), so a pool failure logged in
 * between is this request's; also cleared when the request goes and after
 * each MHD_run (a libmicrohttpd that gives up on the split makes no
 * unescape call). */
_Thread_local emhd_req *emhd_splitting;

/* How long MHD may take to answer a request whose query parameters its
 * pool could not hold before the engine answers 431 itself. */
#define EMHD_LIB_STUCK_MS 100

void emhd_log(void *cls, const char *fmt, va_list ap)
{
    static atomic_llong last_ms;
    emhd_server *es = cls;
    /* A close's reason comes as the argument of "%s\n" (connection_close_error). */
    const char *text = fmt;
    if (strcmp(fmt, "%s\n") == 0) {
        va_list aq;
        va_copy(aq, ap);
        text = va_arg(aq, const char *);
        va_end(aq);
    }
    if (text != NULL && strstr(text, "failed to create response header") != NULL)
        emhd_head_failed = true;
    /* The query's parameters filled MHD's pool: each takes a header record
     * from it. 0.9.75 queues its 431 and then loses it (it goes on reading
     * a head it has discarded), and the connection would wait for its
     * header deadline. The watchdog answers it soon unless MHD announced
     * an answer on that thread since (emhd_worker). The announcement of
     * the 431 it queues (and loses) comes in the same call, while the
     * query is still being split: that one is the failure's own.
     * 1.0.0 and later send their 431 (read in v1.0.1's
     * connection_add_header): nothing to watch there. */
    emhd_worker *w = emhd_worker_self(es, false);
    unsigned long long msgs = w != NULL ? atomic_load(&w->msgs) : 0;
    if (w != NULL && strstr(fmt, EMHD_ANSWER_MSG) != NULL)
        msgs = atomic_fetch_add(&w->msgs, 1) + 1;
    emhd_conn *sc = emhd_splitting != NULL ? emhd_splitting->ec : NULL;
    if (sc != NULL && atomic_load(&sc->lib_stuck))
        atomic_store(&sc->stuck_msgs, msgs);
    if (sc != NULL && es->lib < EMHD_LIB_1_0 && text != NULL &&
        strstr(text, "Not enough memory in pool to allocate header record") != NULL) {
        emhd_conn *ec = sc;
        if (ec->fd >= 0 && !atomic_load(&ec->lib_stuck)) {
            atomic_store(&ec->stuck_msgs, msgs);
            atomic_store(&ec->lib_stuck, true);
            /* Sooner than the head's deadline: not the policy's rule, a
             * libmicrohttpd's loss (emhd_watch). */
            pthread_mutex_lock(&ec->mu);
            ec->policy.deadline = srv__now_ms() + EMHD_LIB_STUCK_MS;
            pthread_mutex_unlock(&ec->mu);
        }
    }
    bool print = es->log_all;
    if (!print && atomic_load(&es->running) && emhd_log_is_trouble(fmt)) {
        long long now = emhd_now_ms(), last = atomic_load(&last_ms);
        print = now - last >= 1000 && atomic_compare_exchange_strong(&last_ms, &last, now);
    }
    if (print) {
        va_list aq;
        va_copy(aq, ap);
        fputs("libsrv mhd: ", stderr);
        vfprintf(stderr, fmt, aq);
        va_end(aq);
    }
    if (!atomic_load(&es->running)) {
        pthread_mutex_lock(&es->lock);
        vsnprintf(es->start_msg, sizeof es->start_msg, fmt, ap);
        size_t n = strlen(es->start_msg);
        while (n > 0 && (es->start_msg[n - 1] == '\n' || es->start_msg[n - 1] == '.'))
            es->start_msg[--n] = '\0';
        pthread_mutex_unlock(&es->lock);
    }
}
