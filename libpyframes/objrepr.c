/* objrepr.c - repr() of simple Python values; see objrepr.h. */
#include "objrepr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A bounded string builder: appends until full, then drops the rest. */
struct out {
    char *buf;
    size_t size, len;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->size == 0)
        return;
    if (n > o->size - 1 - o->len)
        n = o->size - 1 - o->len;
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

void objrepr_float(double v, char *buf, size_t size)
{
    char digits[40], *e;
    int prec, exp10;

    if (isnan(v)) {
        snprintf(buf, size, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v < 0 ? "-inf" : "inf");
        return;
    }
    /* The shortest %.*e that reads back as the same double gives repr()'s digits. */
    for (prec = 0; prec < 17; prec++) {
        snprintf(digits, sizeof(digits), "%.*e", prec, v);
        if (strtod(digits, NULL) == v)
            break;
    }
    snprintf(digits, sizeof(digits), "%.*e", prec, v);
    e = strchr(digits, 'e');
    exp10 = e ? atoi(e + 1) : 0;
    /* repr() switches to exponent notation outside 1e-4 <= |v| < 1e16. */
    if (exp10 < -4 || exp10 >= 16) {
        char mant[40];
        size_t mlen = e ? (size_t)(e - digits) : strlen(digits);
        snprintf(mant, sizeof(mant), "%.*s", (int)mlen, digits);
        snprintf(buf, size, "%se%c%02d", mant, exp10 < 0 ? '-' : '+', abs(exp10));
        return;
    }
    snprintf(buf, size, "%.*f", prec - exp10 > 0 ? prec - exp10 : 0, v);
    if (!strpbrk(buf, ".e") && strlen(buf) + 2 < size)
        strcat(buf, ".0");
}

void objrepr_long(const uint32_t *digits, size_t n, unsigned bits, bool negative, char *buf,
                  size_t size)
{
    /* Base 2^bits -> base 10^9 by repeated multiply-add, like CPython's long_to_decimal. */
    enum { MAX_CHUNKS = 2048 };
    uint32_t *chunks;
    size_t n_chunks = 0;
    struct out o = {buf, size, 0};
    char tmp[16];

    if (size)
        buf[0] = '\0';
    while (n > 0 && digits[n - 1] == 0)
        n--;
    if (n == 0) {
        puts_(&o, "0");
        return;
    }
    if (bits == 0 || bits > 30 || n * bits > MAX_CHUNKS * 29) {
        snprintf(buf, size, "<int of %zu bits>", n * (size_t)bits);
        return;
    }
    chunks = calloc(MAX_CHUNKS, sizeof(*chunks));
    if (!chunks) {
        snprintf(buf, size, "<int>");
        return;
    }
    for (size_t i = n; i-- > 0;) {
        uint64_t carry = digits[i] & ((1u << bits) - 1);
        for (size_t j = 0; j < n_chunks; j++) {
            uint64_t z = ((uint64_t)chunks[j] << bits) + carry;
            carry = z / 1000000000u;
            chunks[j] = (uint32_t)(z % 1000000000u);
        }
        while (carry && n_chunks < MAX_CHUNKS) {
            chunks[n_chunks++] = (uint32_t)(carry % 1000000000u);
            carry /= 1000000000u;
        }
    }
    if (n_chunks == 0) { /* digits with only bits above @bits set: a corrupt zero */
        puts_(&o, "0");
        free(chunks);
        return;
    }
    if (negative)
        puts_(&o, "-");
    snprintf(tmp, sizeof(tmp), "%u", chunks[n_chunks - 1]);
    puts_(&o, tmp);
    for (size_t j = n_chunks - 1; j-- > 0;) {
        snprintf(tmp, sizeof(tmp), "%09u", chunks[j]);
        puts_(&o, tmp);
    }
    free(chunks);
}

static void put_utf8(struct out *o, uint32_t cp)
{
    char s[4];
    size_t n;

    if (cp < 0x80) {
        s[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        s[0] = (char)(0xc0 | cp >> 6);
        s[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        s[0] = (char)(0xe0 | cp >> 12);
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        s[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        s[0] = (char)(0xf0 | cp >> 18);
        s[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        s[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        s[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    put(o, s, n);
}

/* One character as repr() shows it inside @quote quotes. */
static void put_char(struct out *o, uint32_t c, char quote, bool is_bytes)
{
    char esc[12];

    if (c == (uint32_t)quote || c == '\\') {
        esc[0] = '\\';
        esc[1] = (char)c;
        put(o, esc, 2);
    } else if (c == '\n' || c == '\r' || c == '\t') {
        puts_(o, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t");
    } else if (c < 0x20 || c == 0x7f || (is_bytes && c >= 0x80) ||
               (!is_bytes && c >= 0x80 && c < 0xa0)) {
        snprintf(esc, sizeof(esc), "\\x%02x", c);
        puts_(o, esc);
    } else if (!is_bytes && ((c >= 0xd800 && c < 0xe000) || c > 0x10ffff)) {
        snprintf(esc, sizeof(esc), c > 0xffff ? "\\U%08x" : "\\u%04x", c);
        puts_(o, esc);
    } else if (is_bytes) {
        esc[0] = (char)c;
        put(o, esc, 1);
    } else {
        put_utf8(o, c);
    }
}

static uint32_t code_point(const void *data, size_t i, unsigned kind)
{
    uint16_t u16;
    uint32_t u32;

    if (kind == 1)
        return ((const uint8_t *)data)[i];
    if (kind == 2) {
        memcpy(&u16, (const uint8_t *)data + i * 2, 2);
        return u16;
    }
    memcpy(&u32, (const uint8_t *)data + i * 4, 4);
    return u32;
}

/* repr() prefers single quotes, and uses double ones when the text has ' but no ". */
static char pick_quote(const void *data, size_t n, unsigned kind)
{
    bool single = false, dbl = false;

    for (size_t i = 0; i < n; i++) {
        uint32_t c = code_point(data, i, kind);
        single |= c == '\'';
        dbl |= c == '"';
    }
    return single && !dbl ? '"' : '\'';
}

void objrepr_str(const void *data, size_t n, unsigned kind, size_t total, char *buf, size_t size)
{
    struct out o = {buf, size, 0};
    char quote;

    if (size)
        buf[0] = '\0';
    if (kind != 1 && kind != 2 && kind != 4)
        kind = 1, n = 0;
    quote = pick_quote(data, n, kind);
    put(&o, &quote, 1);
    for (size_t i = 0; i < n; i++)
        put_char(&o, code_point(data, i, kind), quote, false);
    put(&o, &quote, 1);
    if (n < total)
        puts_(&o, "...");
}

void objrepr_bytes(const uint8_t *data, size_t n, size_t total, char *buf, size_t size)
{
    struct out o = {buf, size, 0};
    char quote = pick_quote(data, n, 1);

    if (size)
        buf[0] = '\0';
    puts_(&o, "b");
    put(&o, &quote, 1);
    for (size_t i = 0; i < n; i++)
        put_char(&o, data[i], quote, true);
    put(&o, &quote, 1);
    if (n < total)
        puts_(&o, "...");
}
