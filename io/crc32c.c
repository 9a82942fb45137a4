/* io/crc32c.c - CRC-32C: slicing-by-8 tables, and the SSE4.2 crc32 instruction when present. */
#include "io/crc32c.h"

#include <pthread.h>
#include <string.h>

static uint32_t g_table[8][256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        g_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            g_table[t][i] = (g_table[t - 1][i] >> 8) ^ g_table[0][g_table[t - 1][i] & 0xff];
}

uint32_t sl_crc32c_sw(uint32_t crc, const void *data, size_t n) {
    pthread_once(&g_once, init_tables);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = g_table[7][lo & 0xff] ^ g_table[6][(lo >> 8) & 0xff] ^ g_table[5][(lo >> 16) & 0xff] ^
            g_table[4][lo >> 24] ^ g_table[3][hi & 0xff] ^ g_table[2][(hi >> 8) & 0xff] ^
            g_table[1][(hi >> 16) & 0xff] ^ g_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SL_CRC_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t c = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

static int g_have_hw = -1;
static pthread_once_t g_hw_once = PTHREAD_ONCE_INIT;
static void detect_hw(void) {
    __builtin_cpu_init();
    g_have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
}
#endif

uint32_t sl_crc32c(uint32_t crc, const void *data, size_t n) {
#ifdef SL_CRC_HW
    pthread_once(&g_hw_once, detect_hw);
    if (g_have_hw) return crc_hw(crc, data, n);
#endif
    return sl_crc32c_sw(crc, data, n);
}
