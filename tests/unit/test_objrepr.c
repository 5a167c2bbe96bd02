/* Unit tests: objrepr.c against what CPython's repr() prints. */
#include <math.h>
#include <stdint.h>

#include "objrepr.h"
#include "unit.h"

int test_float_repr(void);
int test_long_repr(void);
int test_str_repr(void);
int test_bytes_repr(void);

int test_float_repr(void)
{
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {0.0, "0.0"},
        {-0.0, "-0.0"},
        {1.0, "1.0"},
        {3.14159, "3.14159"},
        {0.1, "0.1"},
        {1e15, "1000000000000000.0"},
        {1e16, "1e+16"},
        {1.5e-5, "1.5e-05"},
        {0.0001, "0.0001"},
        {123.456, "123.456"},
        {1e100, "1e+100"},
        {2.0 / 3, "0.6666666666666666"},
        {-2.5e-300, "-2.5e-300"},
        {1234567890123456789.0, "1.2345678901234568e+18"},
        {INFINITY, "inf"},
        {-INFINITY, "-inf"},
        {NAN, "nan"},
    };
    char buf[64];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        objrepr_float(cases[i].v, buf, sizeof(buf));
        CHECK_STR(buf, cases[i].want);
    }
    return 0;
}

int test_long_repr(void)
{
    /* 2**100 = digits (30-bit) [0, 0, 0, 1 << 10] */
    uint32_t big[] = {0, 0, 0, 1u << 10};
    uint32_t small[] = {42};
    uint32_t zero[] = {0};
    /* 2**30 - 1 + (2**30 - 1) * 2**30 = 2**60 - 1 */
    uint32_t max60[] = {(1u << 30) - 1, (1u << 30) - 1};
    char buf[128];

    objrepr_long(big, 4, 30, false, buf, sizeof(buf));
    CHECK_STR(buf, "1267650600228229401496703205376");
    objrepr_long(big, 4, 30, true, buf, sizeof(buf));
    CHECK_STR(buf, "-1267650600228229401496703205376");
    objrepr_long(small, 1, 30, true, buf, sizeof(buf));
    CHECK_STR(buf, "-42");
    objrepr_long(zero, 1, 30, false, buf, sizeof(buf));
    CHECK_STR(buf, "0");
    objrepr_long(max60, 2, 30, false, buf, sizeof(buf));
    CHECK_STR(buf, "1152921504606846975");
    objrepr_long(big, 4, 30, false, buf, 8); /* cut to the buffer, still terminated */
    CHECK_STR(buf, "1267650");
    return 0;
}

int test_str_repr(void)
{
    char buf[128];
    const uint8_t latin1[] = {'h', 0xe9, 'l', 'l', 'o'};
    const uint16_t ucs2[] = {'a', 0x2713, 'b'};
    const uint32_t ucs4[] = {0x1f389, '\n', 0xd800};

    objrepr_str("abc", 3, 1, 3, buf, sizeof(buf));
    CHECK_STR(buf, "'abc'");
    objrepr_str("it's", 4, 1, 4, buf, sizeof(buf));
    CHECK_STR(buf, "\"it's\"");
    objrepr_str("a'b\"c\\", 6, 1, 6, buf, sizeof(buf));
    CHECK_STR(buf, "'a\\'b\"c\\\\'");
    objrepr_str(latin1, 5, 1, 5, buf, sizeof(buf));
    CHECK_STR(buf, "'h\xc3\xa9llo'");
    objrepr_str(ucs2, 3, 2, 3, buf, sizeof(buf));
    CHECK_STR(buf, "'a\xe2\x9c\x93"
                   "b'");
    objrepr_str(ucs4, 3, 4, 3, buf, sizeof(buf));
    CHECK_STR(buf, "'\xf0\x9f\x8e\x89\\n\\ud800'");
    objrepr_str("abcdef", 3, 1, 6, buf, sizeof(buf));
    CHECK_STR(buf, "'abc'...");
    objrepr_str("\x01\x7f", 2, 1, 2, buf, sizeof(buf));
    CHECK_STR(buf, "'\\x01\\x7f'");
    return 0;
}

int test_bytes_repr(void)
{
    char buf[128];

    objrepr_bytes((const uint8_t *)"\x00"
                                   "abc\xff",
                  5, 5, buf, sizeof(buf));
    CHECK_STR(buf, "b'\\x00abc\\xff'");
    objrepr_bytes((const uint8_t *)"it's", 4, 4, buf, sizeof(buf));
    CHECK_STR(buf, "b\"it's\"");
    objrepr_bytes((const uint8_t *)"abcdef", 2, 6, buf, sizeof(buf));
    CHECK_STR(buf, "b'ab'...");
    return 0;
}
