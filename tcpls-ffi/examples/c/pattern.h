/* The deterministic payload of `tcpls perf` (crate tcpls-pattern), in C: byte i of the stream
 * with seed s is TABLE[(i + s * STRIDE) % TABLE_LEN], the table made by xorshift64. A receiver
 * checks every byte, its value and its position, without the sender shipping a hash. */
#ifndef TCPLS_EXAMPLE_PATTERN_H
#define TCPLS_EXAMPLE_PATTERN_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define PATTERN_TABLE_LEN ((1u << 20) + 4099u)
#define PATTERN_STRIDE 104729ull

static uint8_t pattern_table[2 * PATTERN_TABLE_LEN];
static pthread_once_t pattern_once = PTHREAD_ONCE_INIT;

static inline void pattern_build(void) {
    uint64_t x = 0x243F6A8885A308D3ull;
    for (uint32_t i = 0; i < PATTERN_TABLE_LEN; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pattern_table[i] = (uint8_t)(x >> 24);
    }
    /* Stored twice, so any window of TABLE_LEN bytes is one contiguous slice. */
    memcpy(pattern_table + PATTERN_TABLE_LEN, pattern_table, PATTERN_TABLE_LEN);
}

/* The next at most `max` pattern bytes of stream `seed` from `offset`; *len says how many. */
static inline const uint8_t *pattern_chunk(uint64_t seed, uint64_t offset, size_t max, size_t *len) {
    pthread_once(&pattern_once, pattern_build);
    size_t start = (size_t)((offset + seed * PATTERN_STRIDE) % PATTERN_TABLE_LEN);
    *len = max < PATTERN_TABLE_LEN ? max : PATTERN_TABLE_LEN;
    return pattern_table + start;
}

/* Whether `data` is the pattern of stream `seed` at `offset`. */
static inline int pattern_verify(uint64_t seed, uint64_t offset, const uint8_t *data, size_t len) {
    size_t done = 0;
    while (done < len) {
        size_t n;
        const uint8_t *expect = pattern_chunk(seed, offset + done, len - done, &n);
        if (memcmp(data + done, expect, n) != 0) {
            return 0;
        }
        done += n;
    }
    return 1;
}

/* Checks a stream piece by piece: a tcpls_stream_read_with callback (zero-copy reads). */
struct pattern_verifier {
    uint64_t seed;
    uint64_t offset;
    int ok;
};

static inline size_t pattern_verify_chunk(void *userdata, const uint8_t *data, size_t len) {
    struct pattern_verifier *v = userdata;
    if (v->ok && !pattern_verify(v->seed, v->offset, data, len)) {
        v->ok = 0;
    }
    v->offset += len;
    return len;
}

#endif
