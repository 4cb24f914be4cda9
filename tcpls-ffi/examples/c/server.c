/* tcpls-server: a TCPLS server in C over libtcpls.
 *
 *   tcpls-server --cert FILE --key FILE --listen IP:PORT [--listen IP:PORT]... [--mode echo|perf]
 *                [--abandon-path-at SIZE] [--sessions N]
 *
 * echo: every stream's bytes are sent back, then FIN (for `tcpls connect` and tcpls-client).
 * perf: answers `tcpls perf` (the request/report protocol of tcpls-cli/src/perf_proto.rs):
 *       uploads are verified byte for byte against the pattern and reported, downloads are the
 *       pattern. Several --listen addresses serve the same sessions (a client's extra paths join
 *       through any of them). --abandon-path-at drops a session's newest path once SIZE bytes of
 *       it moved, to test failover from this side. Prints "listening on IP:PORT" per address
 *       (port 0 picks one) and serves until killed, or N sessions (--sessions). */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "pattern.h"
#include "perf_proto.h"
#include "tcpls.h"

#define MAX_LISTEN 8
#define CHUNK (256 * 1024)

enum mode { ECHO, PERF };

static enum mode mode = ECHO;
static uint64_t abandon_at = 0;

struct session_ctx {
    tcpls_session *session;
    atomic_uint_fast64_t moved; /* payload bytes, for --abandon-path-at */
    atomic_int abandoned;
    atomic_int streams_running;
    pthread_mutex_t lock;
};

struct stream_ctx {
    struct session_ctx *s;
    tcpls_stream *stream;
};

/* Counts moved bytes; past --abandon-path-at, drops the session's newest usable path once. */
static void count_moved(struct session_ctx *s, uint64_t n) {
    uint64_t total = atomic_fetch_add(&s->moved, n) + n;
    if (!abandon_at || total < abandon_at || atomic_exchange(&s->abandoned, 1)) {
        return;
    }
    tcpls_conn_stats stats[16];
    int64_t count = tcpls_session_connections(s->session, stats, 16);
    uint32_t newest = 0;
    int usable = 0;
    for (int64_t i = 0; i < count && i < 16; i++) {
        if (stats[i].usable) {
            usable++;
            if (stats[i].id > newest) newest = stats[i].id;
        }
    }
    if (usable < 2) {
        fprintf(stderr, "not abandoning a path: the session has %d usable\n", usable);
        return;
    }
    int rc = tcpls_session_abandon_path(s->session, newest);
    fprintf(stderr, "abandoned path %u after %" PRIu64 " bytes: %s\n", newest, total, rc == 0 ? "ok" : tcpls_last_error());
}

static void echo(struct stream_ctx *c) {
    static _Thread_local uint8_t buf[CHUNK];
    for (;;) {
        int64_t n = tcpls_stream_read(c->stream, buf, sizeof buf, -1);
        if (n <= 0) {
            if (n < 0) fprintf(stderr, "echo: read: %s\n", tcpls_last_error());
            break;
        }
        count_moved(c->s, (uint64_t)n);
        if (write_all(c->stream, buf, (size_t)n) < 0) {
            fprintf(stderr, "echo: write: %s\n", tcpls_last_error());
            return;
        }
    }
    tcpls_stream_shutdown(c->stream);
}

static void perf(struct stream_ctx *c) {
    static _Thread_local uint8_t buf[CHUNK];
    uint8_t req[PERF_REQUEST_LEN];
    int direction;
    uint32_t seed;
    uint64_t bytes;
    if (read_exact(c->stream, req, sizeof req) != 0 || perf_request_decode(req, &direction, &seed, &bytes) != 0) {
        fprintf(stderr, "perf: not a perf request\n");
        tcpls_stream_reset(c->stream, 0x70455251); /* NOT_A_PERF_REQUEST, as `tcpls serve` */
        return;
    }
    if (direction == PERF_UPLOAD) {
        /* Verified in the library's buffer, without a copy. */
        struct pattern_verifier v = {seed, 0, 1};
        for (;;) {
            int64_t n = tcpls_stream_read_with(c->stream, pattern_verify_chunk, &v, -1);
            if (n < 0) {
                fprintf(stderr, "perf: read: %s\n", tcpls_last_error());
                return;
            }
            if (n == 0) break;
            count_moved(c->s, (uint64_t)n);
        }
        if (!v.ok) {
            fprintf(stderr, "perf: stream seed %u: wrong bytes\n", seed);
        }
        uint64_t off = v.offset;
        int ok = v.ok;
        uint8_t report[PERF_REPORT_LEN];
        perf_report_encode(report, off, ok);
        write_all(c->stream, report, sizeof report);
        tcpls_stream_shutdown(c->stream);
        return;
    }
    uint64_t off = 0;
    while (off < bytes) {
        size_t n;
        uint64_t left = bytes - off;
        const uint8_t *p = pattern_chunk(seed, off, left < CHUNK ? (size_t)left : CHUNK, &n);
        if (write_all(c->stream, p, n) < 0) {
            fprintf(stderr, "perf: write: %s\n", tcpls_last_error());
            return;
        }
        off += n;
        count_moved(c->s, n);
    }
    tcpls_stream_shutdown(c->stream);
    /* The client keeps its side open while it reads, and finishes it at the end. */
    while (tcpls_stream_read(c->stream, buf, sizeof buf, -1) > 0) {
    }
}

static void *serve_stream(void *arg) {
    struct stream_ctx *c = arg;
    if (mode == ECHO) echo(c); else perf(c);
    tcpls_stream_free(c->stream);
    atomic_fetch_sub(&c->s->streams_running, 1);
    free(c);
    return NULL;
}

static void *serve_session(void *arg) {
    struct session_ctx *s = arg;
    for (;;) {
        tcpls_stream *stream;
        int rc = tcpls_stream_accept(s->session, -1, &stream);
        if (rc < 0) {
            break; /* TCPLS_ERR_SESSION_ENDED: the client closed */
        }
        struct stream_ctx *c = malloc(sizeof *c);
        c->s = s;
        c->stream = stream;
        atomic_fetch_add(&s->streams_running, 1);
        pthread_t t;
        pthread_create(&t, NULL, serve_stream, c);
        pthread_detach(t);
    }
    while (atomic_load(&s->streams_running) > 0) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    tcpls_event ev;
    while (tcpls_next_event(s->session, &ev, 0) == 0) {
        if (ev.kind == TCPLS_EVENT_FAILOVER || ev.kind == TCPLS_EVENT_PATH_DOWN) {
            fprintf(stderr, "session event: %s on path %u %s\n", ev.kind == TCPLS_EVENT_FAILOVER ? "failover" : "path down",
                    ev.conn, ev.detail);
        }
    }
    fprintf(stderr, "session done: %" PRIu64 " payload bytes\n", (uint64_t)atomic_load(&s->moved));
    tcpls_session_close(s->session);
    tcpls_session_free(s->session);
    free(s);
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: tcpls-server --cert FILE --key FILE --listen IP:PORT [--listen IP:PORT]...\n"
                    "                    [--mode echo|perf] [--abandon-path-at SIZE] [--sessions N]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *cert = NULL, *key = NULL, *listen[MAX_LISTEN];
    int nlisten = 0, sessions = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--cert") && v) { cert = v; i++; }
        else if (!strcmp(a, "--key") && v) { key = v; i++; }
        else if (!strcmp(a, "--listen") && v && nlisten < MAX_LISTEN) { listen[nlisten++] = v; i++; }
        else if (!strcmp(a, "--abandon-path-at") && v) { abandon_at = parse_size(v); i++; }
        else if (!strcmp(a, "--sessions") && v) { sessions = atoi(v); i++; }
        else if (!strcmp(a, "--mode") && v) {
            mode = !strcmp(v, "perf") ? PERF : !strcmp(v, "echo") ? ECHO : (usage(), ECHO);
            i++;
        } else { usage(); }
    }
    if (!cert || !key || nlisten == 0) usage();
    tcpls_config *cfg = tcpls_config_new();
    if (!cfg) die("tcpls_config_new", TCPLS_ERR_INTERNAL);
    int rc = tcpls_config_set_certificate(cfg, cert, key);
    if (rc < 0) die("tcpls_config_set_certificate", rc);
    tcpls_listener *listener;
    if ((rc = tcpls_listen(cfg, listen[0], &listener)) < 0) die("tcpls_listen", rc);
    for (int i = 1; i < nlisten; i++) {
        if ((rc = tcpls_listener_add_address(listener, listen[i])) < 0) die("tcpls_listener_add_address", rc);
    }
    tcpls_config_free(cfg);
    for (int i = 0; i < nlisten; i++) {
        char addr[64];
        if (tcpls_listener_address(listener, (size_t)i, addr, sizeof addr) < 0) die("tcpls_listener_address", -1);
        fprintf(stderr, "listening on %s\n", addr);
    }
    pthread_t threads[1024];
    int nthreads = 0;
    while (sessions != 0) {
        tcpls_session *session;
        if ((rc = tcpls_accept(listener, -1, &session)) < 0) die("tcpls_accept", rc);
        struct session_ctx *s = calloc(1, sizeof *s);
        s->session = session;
        pthread_t t;
        pthread_create(&t, NULL, serve_session, s);
        if (sessions > 0 && nthreads < 1024) {
            threads[nthreads++] = t;
            sessions--;
        } else {
            pthread_detach(t);
        }
    }
    for (int i = 0; i < nthreads; i++) pthread_join(threads[i], NULL);
    tcpls_listener_free(listener);
    return 0;
}
