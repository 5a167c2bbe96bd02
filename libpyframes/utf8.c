/*
 * utf8.c - text a target gives (a thread's name, a command line, a mapped file's path, a
 * symbol's name) made valid UTF-8 where it enters: any bytes are allowed there, and JSON is
 * not (jansson refuses the string, and a reply lost a column or every thread).
 */
#include "pyframes.h"

#include <stdlib.h>
#include <string.h>

/* The length of the valid UTF-8 sequence at @s (at most @n bytes), or 0: overlong forms,
 * surrogates and code points past U+10FFFF are not valid. */
static size_t sequence(const unsigned char *s, size_t n)
{
    size_t len;
    unsigned c;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, c = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, c = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, c = s[0] & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) ||
        (len == 4 && (c < 0x10000 || c > 0x10ffff)))
        return 0;
    return len;
}

bool pyf_utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = sequence((const unsigned char *)s + i, n - i)))
            return false;
    return true;
}

size_t pyf_utf8_clean(char *out, size_t cap, const char *in, size_t n)
{
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    size_t o = 0;

    if (cap == 0)
        return 0;
    for (size_t i = 0, k; i < n; i += k) {
        const char *piece = in + i;
        size_t len = k = sequence((const unsigned char *)in + i, n - i);
        if (!k) { /* one byte of an invalid sequence */
            k = 1;
            piece = replacement;
            len = sizeof(replacement) - 1;
        }
        if (o + len > cap - 1)
            break; /* cut at a character's end */
        memcpy(out + o, piece, len);
        o += len;
    }
    out[o] = '\0';
    return o;
}

void pyf_utf8_scrub(char *buf, size_t cap)
{
    size_t n = strnlen(buf, cap);
    char small[512], *copy;

    if (pyf_utf8_valid(buf, n))
        return;
    copy = n < sizeof(small) ? small : malloc(n + 1);
    if (!copy) { /* no memory: '?' for each byte past ASCII, in place */
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)buf[i] < 0x80 ? buf[i] : '?';
        return;
    }
    memcpy(copy, buf, n);
    pyf_utf8_clean(buf, cap, copy, n);
    if (copy != small)
        free(copy);
}
