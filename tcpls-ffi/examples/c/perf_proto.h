/* The request/report protocol `tcpls perf` speaks on each stream with `tcpls serve`
 * (tcpls-cli/src/perf_proto.rs): a 32-byte request (magic TCPLSPF1, direction 1 = upload,
 * 2 = download, seed, bytes, milliseconds; big endian), and after an upload a 16-byte report
 * (bytes received, verified flag). */
#ifndef TCPLS_EXAMPLE_PERF_PROTO_H
#define TCPLS_EXAMPLE_PERF_PROTO_H

#include <stdint.h>
#include <string.h>

#define PERF_REQUEST_LEN 32
#define PERF_REPORT_LEN 16
#define PERF_UPLOAD 1
#define PERF_DOWNLOAD 2

static inline void put_be(uint8_t *b, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) {
        b[i] = (uint8_t)v;
        v >>= 8;
    }
}

static inline uint64_t get_be(const uint8_t *b, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = (v << 8) | b[i];
    }
    return v;
}

static inline void perf_request_encode(uint8_t out[PERF_REQUEST_LEN], int direction, uint32_t seed, uint64_t bytes) {
    memset(out, 0, PERF_REQUEST_LEN);
    memcpy(out, "TCPLSPF1", 8);
    out[8] = (uint8_t)direction;
    put_be(out + 12, seed, 4);
    put_be(out + 16, bytes, 8);
    put_be(out + 24, 0, 8);
}

/* 0 and the fields, or -1 if it is not a perf request. */
static inline int perf_request_decode(const uint8_t in[PERF_REQUEST_LEN], int *direction, uint32_t *seed, uint64_t *bytes) {
    if (memcmp(in, "TCPLSPF1", 8) != 0 || (in[8] != PERF_UPLOAD && in[8] != PERF_DOWNLOAD)) {
        return -1;
    }
    *direction = in[8];
    *seed = (uint32_t)get_be(in + 12, 4);
    *bytes = get_be(in + 16, 8);
    return 0;
}

static inline void perf_report_encode(uint8_t out[PERF_REPORT_LEN], uint64_t received, int verified) {
    memset(out, 0, PERF_REPORT_LEN);
    put_be(out, received, 8);
    out[8] = verified ? 1 : 0;
}

static inline void perf_report_decode(const uint8_t in[PERF_REPORT_LEN], uint64_t *received, int *verified) {
    *received = get_be(in, 8);
    *verified = in[8] == 1;
}

#endif
