/* tcpls-client: a TCPLS client in C over libtcpls.
 *
 *   tcpls-client [--ca FILE | --insecure] [--server-name NAME] [--path [LOCAL@]HOST:PORT]...
 *                [--streams N] [--bytes SIZE] [--mode echo|upload|download] [--round-robin]
 *                [--abandon-path-at SIZE] [--json] HOST:PORT
 *
 * Opens N streams and moves SIZE bytes in all (split between the streams) of the deterministic
 * pattern of `tcpls perf`, checking every byte:
 *   echo      against `tcpls serve --mode echo`: sends, reads the echo back and verifies it;
 *   upload    against `tcpls serve` (perf mode): sends; the server verifies and reports;
 *   download  against `tcpls serve` (perf mode): the server sends; this client verifies.
 * --path adds a TCP connection (joined to the session); --round-robin spreads data over all
 * connections; --abandon-path-at drops the last added path once SIZE bytes moved (the session
 * fails over to the others). Exit status 0 only if every byte was verified. */
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

#define MAX_STREAMS 256
#define MAX_PATHS 8
#define CHUNK (256 * 1024)

enum mode { ECHO, UPLOAD, DOWNLOAD };

struct job {
    tcpls_stream *stream;
    uint32_t seed;
    uint64_t bytes;
    enum mode mode;
    int ok;
    char error[512];
};

static atomic_uint_fast64_t moved; /* payload bytes sent or received so far, for --abandon-path-at */

static void fail_job(struct job *j, const char *what, int64_t code) {
    snprintf(j->error, sizeof j->error, "stream %u: %s failed (%s): %s", j->seed, what, tcpls_error_name(code),
             tcpls_last_error());
    j->ok = 0;
}

/* Sends the stream's pattern, then FIN. */
static void *send_pattern(void *arg) {
    struct job *j = arg;
    uint64_t off = 0;
    while (off < j->bytes) {
        size_t n;
        uint64_t left = j->bytes - off;
        const uint8_t *p = pattern_chunk(j->seed, off, left < CHUNK ? (size_t)left : CHUNK, &n);
        int64_t rc = write_all(j->stream, p, n);
        if (rc < 0) {
            fail_job(j, "write", rc);
            return NULL;
        }
        off += n;
        if (j->mode == UPLOAD) {
            atomic_fetch_add(&moved, n);
        }
    }
    int rc = tcpls_stream_shutdown(j->stream);
    if (rc < 0) {
        fail_job(j, "shutdown", rc);
    }
    return NULL;
}

/* Reads the stream to its end, verifying the pattern in the library's buffer (no copy);
 * returns the byte count or -1. */
static int64_t receive_pattern(struct job *j) {
    struct pattern_verifier v = {j->seed, 0, 1};
    for (;;) {
        int64_t n = tcpls_stream_read_with(j->stream, pattern_verify_chunk, &v, IO_TIMEOUT_MS);
        if (n < 0) {
            fail_job(j, "read", n);
            return -1;
        }
        if (!v.ok) {
            snprintf(j->error, sizeof j->error, "stream %u: wrong bytes before offset %" PRIu64, j->seed, v.offset);
            j->ok = 0;
            return -1;
        }
        if (n == 0) {
            return (int64_t)v.offset;
        }
        atomic_fetch_add(&moved, (uint64_t)n);
    }
}

static void *run_job(void *arg) {
    struct job *j = arg;
    j->ok = 1;
    if (j->mode == ECHO) {
        pthread_t writer;
        pthread_create(&writer, NULL, send_pattern, j);
        int64_t got = receive_pattern(j);
        pthread_join(writer, NULL);
        if (j->ok && (uint64_t)got != j->bytes) {
            snprintf(j->error, sizeof j->error, "stream %u: %" PRId64 " bytes echoed of %" PRIu64, j->seed, got, j->bytes);
            j->ok = 0;
        }
        return NULL;
    }
    uint8_t req[PERF_REQUEST_LEN];
    perf_request_encode(req, j->mode == UPLOAD ? PERF_UPLOAD : PERF_DOWNLOAD, j->seed, j->bytes);
    int64_t rc = write_all(j->stream, req, sizeof req);
    if (rc < 0) {
        fail_job(j, "write", rc);
        return NULL;
    }
    if (j->mode == UPLOAD) {
        send_pattern(j);
        if (!j->ok) {
            return NULL;
        }
        uint8_t report[PERF_REPORT_LEN];
        rc = read_exact(j->stream, report, sizeof report);
        if (rc != 0) {
            fail_job(j, "reading the server's report", rc < 0 ? rc : TCPLS_ERR_SESSION_ENDED);
            return NULL;
        }
        uint64_t received;
        int verified;
        perf_report_decode(report, &received, &verified);
        if (received != j->bytes || !verified) {
            snprintf(j->error, sizeof j->error, "stream %u: the server received %" PRIu64 " of %" PRIu64 " bytes, %s",
                     j->seed, received, j->bytes, verified ? "verified" : "NOT verified");
            j->ok = 0;
        }
        return NULL;
    }
    int64_t got = receive_pattern(j);
    if (j->ok && (uint64_t)got != j->bytes) {
        snprintf(j->error, sizeof j->error, "stream %u: %" PRId64 " bytes received of %" PRIu64, j->seed, got, j->bytes);
        j->ok = 0;
    }
    tcpls_stream_shutdown(j->stream);
    return NULL;
}

struct abandoner {
    tcpls_session *session;
    uint32_t conn;
    uint64_t at;
    atomic_int stop;
    uint64_t when;
    int done;
};

/* Drops path `conn` once `at` bytes moved: a path dying in the middle of the transfer. */
static void *abandon_later(void *arg) {
    struct abandoner *a = arg;
    while (!atomic_load(&a->stop)) {
        uint64_t now = atomic_load(&moved);
        if (now >= a->at) {
            int rc = tcpls_session_abandon_path(a->session, a->conn);
            if (rc < 0) {
                die("tcpls_session_abandon_path", rc);
            }
            a->when = now;
            a->done = 1;
            return NULL;
        }
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: tcpls-client [--ca FILE | --insecure] [--server-name NAME] [--path [LOCAL@]HOST:PORT]...\n"
                    "                    [--streams N] [--bytes SIZE] [--mode echo|upload|download] [--round-robin]\n"
                    "                    [--abandon-path-at SIZE] [--json] HOST:PORT\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *ca = NULL, *server_name = NULL, *addr = NULL;
    const char *paths[MAX_PATHS];
    int npaths = 0, insecure = 0, streams = 1, round_robin = 0, json = 0;
    uint64_t bytes = 1 << 20, abandon_at = 0;
    enum mode mode = ECHO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--ca") && v) { ca = v; i++; }
        else if (!strcmp(a, "--insecure")) { insecure = 1; }
        else if (!strcmp(a, "--server-name") && v) { server_name = v; i++; }
        else if (!strcmp(a, "--path") && v && npaths < MAX_PATHS) { paths[npaths++] = v; i++; }
        else if (!strcmp(a, "--streams") && v) { streams = atoi(v); i++; }
        else if (!strcmp(a, "--bytes") && v) { bytes = parse_size(v); i++; }
        else if (!strcmp(a, "--abandon-path-at") && v) { abandon_at = parse_size(v); i++; }
        else if (!strcmp(a, "--round-robin")) { round_robin = 1; }
        else if (!strcmp(a, "--json")) { json = 1; }
        else if (!strcmp(a, "--mode") && v) {
            mode = !strcmp(v, "upload") ? UPLOAD : !strcmp(v, "download") ? DOWNLOAD : !strcmp(v, "echo") ? ECHO : (usage(), ECHO);
            i++;
        } else if (a[0] != '-' && !addr) { addr = a; }
        else { usage(); }
    }
    if (!addr || streams < 1 || streams > MAX_STREAMS || (abandon_at && npaths == 0)) {
        usage();
    }

    tcpls_config *cfg = tcpls_config_new();
    if (!cfg) die("tcpls_config_new", TCPLS_ERR_INTERNAL);
    int rc;
    if (ca && (rc = tcpls_config_set_ca_file(cfg, ca)) < 0) die("tcpls_config_set_ca_file", rc);
    if ((rc = tcpls_config_set_insecure(cfg, insecure)) < 0) die("tcpls_config_set_insecure", rc);
    tcpls_session *session = NULL;
    if ((rc = tcpls_connect(cfg, addr, server_name, 10000, &session)) < 0) die("tcpls_connect", rc);
    tcpls_config_free(cfg);
    uint32_t last_path = 0;
    for (int i = 0; i < npaths; i++) {
        if ((rc = tcpls_session_add_path(session, paths[i], 10000, &last_path)) < 0) die("tcpls_session_add_path", rc);
    }
    if (round_robin && (rc = tcpls_session_set_scheduler(session, TCPLS_SCHEDULER_ROUND_ROBIN)) < 0) {
        die("tcpls_session_set_scheduler", rc);
    }

    static struct job jobs[MAX_STREAMS];
    pthread_t threads[MAX_STREAMS];
    double started = now_seconds();
    for (int i = 0; i < streams; i++) {
        jobs[i].seed = (uint32_t)i;
        jobs[i].mode = mode;
        jobs[i].bytes = bytes / (uint64_t)streams + (i == 0 ? bytes % (uint64_t)streams : 0);
        if ((rc = tcpls_stream_open(session, &jobs[i].stream)) < 0) die("tcpls_stream_open", rc);
        pthread_create(&threads[i], NULL, run_job, &jobs[i]);
    }
    struct abandoner ab = {session, last_path, abandon_at, 0, 0, 0};
    pthread_t abandon_thread;
    if (abandon_at) {
        pthread_create(&abandon_thread, NULL, abandon_later, &ab);
    }
    int failed = 0;
    for (int i = 0; i < streams; i++) {
        pthread_join(threads[i], NULL);
        if (!jobs[i].ok) {
            fprintf(stderr, "error: %s\n", jobs[i].error);
            failed = 1;
        }
        tcpls_stream_free(jobs[i].stream);
    }
    double elapsed = now_seconds() - started;
    if (abandon_at) {
        atomic_store(&ab.stop, 1);
        pthread_join(abandon_thread, NULL);
        if (!ab.done) {
            fprintf(stderr, "error: the transfer ended before --abandon-path-at was reached\n");
            failed = 1;
        } else {
            fprintf(stderr, "abandoned path %u after %" PRIu64 " bytes\n", ab.conn, ab.when);
        }
    }

    tcpls_conn_stats stats[MAX_PATHS + 2];
    int64_t nconn = tcpls_session_connections(session, stats, MAX_PATHS + 2);
    for (int64_t i = 0; i < nconn && i < MAX_PATHS + 2; i++) {
        fprintf(stderr, "path %u %s -> %s: %s, sent %" PRIu64 " B, received %" PRIu64 " B, rtt %u us, cwnd %u\n",
                stats[i].id, stats[i].local, stats[i].remote, stats[i].usable ? "up" : "down", stats[i].bytes_sent,
                stats[i].bytes_received, stats[i].rtt_us, stats[i].cwnd);
    }
    int failovers = 0, paths_down = 0;
    tcpls_event ev;
    while (tcpls_next_event(session, &ev, 0) == 0) {
        if (ev.kind == TCPLS_EVENT_FAILOVER) failovers++;
        if (ev.kind == TCPLS_EVENT_PATH_DOWN) paths_down++;
    }
    if ((rc = tcpls_session_close(session)) < 0) {
        fprintf(stderr, "warning: closing: %s\n", tcpls_last_error());
    }
    tcpls_session_free(session);
    if (failed) {
        return 1;
    }
    double gbps = (double)bytes * 8 / elapsed / 1e9;
    if (json) {
        printf("{\"bytes\": %" PRIu64 ", \"streams\": %d, \"seconds\": %.6f, \"gbit_per_s\": %.3f, \"verified\": true, "
               "\"paths_down\": %d, \"failovers\": %d}\n",
               bytes, streams, elapsed, gbps, paths_down, failovers);
    } else {
        printf("verified %" PRIu64 " bytes on %d streams in %.3f s: %.2f Gbit/s (paths down: %d, failovers: %d)\n", bytes,
               streams, elapsed, gbps, paths_down, failovers);
    }
    return 0;
}
