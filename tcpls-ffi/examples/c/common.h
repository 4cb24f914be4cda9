/* Small helpers the example programs share: failing with the library's message, reading and
 * writing whole buffers, a monotonic clock. */
#ifndef TCPLS_EXAMPLE_COMMON_H
#define TCPLS_EXAMPLE_COMMON_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tcpls.h"

/* Every blocking call of the examples waits at most this long. */
#define IO_TIMEOUT_MS 30000

static inline void die(const char *what, int64_t code) {
    fprintf(stderr, "error: %s failed (%s): %s\n", what, tcpls_error_name(code), tcpls_last_error());
    exit(1);
}

static inline double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Writes all `len` bytes; 0 or the negative code. */
static inline int64_t write_all(tcpls_stream *s, const void *buf, size_t len) {
    const uint8_t *p = buf;
    while (len > 0) {
        int64_t n = tcpls_stream_write(s, p, len, IO_TIMEOUT_MS);
        if (n < 0) {
            return n;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads exactly `len` bytes; 0, 1 if the stream ended first, or the negative code. */
static inline int64_t read_exact(tcpls_stream *s, void *buf, size_t len) {
    uint8_t *p = buf;
    while (len > 0) {
        int64_t n = tcpls_stream_read(s, p, len, IO_TIMEOUT_MS);
        if (n < 0) {
            return n;
        }
        if (n == 0) {
            return 1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline uint64_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (uint64_t)v;
}

#endif
