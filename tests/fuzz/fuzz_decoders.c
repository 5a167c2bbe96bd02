/*
 * fuzz_decoders.c - libFuzzer target for everything that parses bytes taken from a target:
 * the three line-table formats, the version-string scanner, and the repr() renderers; and
 * (a first byte of 0xf0 and up) what issue 32 found taken unchecked from users and targets:
 * text that is not UTF-8 (its cleaned copy must be valid, and bounded), command-line patterns
 * (a pattern taken must compile within the fuzzer's memory and time limits) and node lists
 * (every name taken must be a host name, never an option of ssh); and (0xe8 to 0xef) the
 * search of a stripped interpreter's .eh_frame for its eval loop's cold part (evalcold.h):
 * the rest split in two, the unwind table and the code, a part found lying outside the hot
 * one.
 * The first byte picks the decoder; the rest is its input.
 */
#include <regex.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/pattern.h"
#include "ctl/nodes.h"
#include "elfimg.h"
#include "evalcold.h"
#include "pyframes.h"
#include "linetable.h"
#include "objrepr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[256];
    int32_t first, addr;

    if (size < 9)
        return 0;
    memcpy(&first, data + 1, 4);
    memcpy(&addr, data + 5, 4);
    if (data[0] >= 0xe8 && data[0] < 0xf0) {
        size_t half = (size - 9) / 2;
        uint64_t code_addr = 0x400000, start = 0, end = 0;
        uint64_t hot = code_addr + (uint32_t)first % (half + 1),
                 hot_end = hot + (uint32_t)addr % 4096;
        if (evalcold_scan(data + 9, half, 0x1000, data + 9 + half, size - 9 - half, code_addr, hot,
                          hot_end, &start, &end) == 0 &&
            (end <= start || (start < hot_end && hot < end)))
            abort();
        return 0;
    }
    if (data[0] >= 0xf0) {
        char *text = malloc(size - 9 + 1), clean[64];
        if (!text)
            return 0;
        memcpy(text, data + 9, size - 9);
        text[size - 9] = '\0';
        if (data[0] % 3 == 0) { /* text from a target */
            size_t n = pyf_utf8_clean(clean, 1 + data[1] % sizeof(clean), text, size - 9);
            if (n >= sizeof(clean) || !pyf_utf8_valid(clean, n) || clean[n] != '\0')
                abort();
        } else if (data[0] % 3 == 1) { /* a user's pattern */
            regex_t re;
            char why[256];
            if (pattern_compile(&re, text, why, sizeof(why)) == 0)
                regfree(&re);
        } else { /* a node list */
            struct nodes nodes = {0};
            char why[256];
            if (nodes_expand(text, &nodes, why, sizeof(why)) == 0)
                for (size_t i = 0; i < nodes.n; i++)
                    if (!nodes_host_name_ok(nodes.names[i]) || nodes.names[i][0] == '-')
                        abort();
            nodes_free(&nodes);
        }
        free(text);
        return 0;
    }
    switch (data[0] % 6) {
    case 0:
    case 1:
    case 2:
        linetable_line((enum pyf_line_format)(data[0] % 3 + 1), data + 9, size - 9, first, addr);
        break;
    case 3:
        elfimg_scan_version(data + 9, size - 9, 3, (int)(data[1] % 20) - 1, out, sizeof(out));
        break;
    case 4: {
        unsigned kind = 1u << (data[1] % 3);
        objrepr_str(data + 9, (size - 9) / kind, kind, (size_t)(uint32_t)addr, out,
                    sizeof(out) - data[2] % 200);
        objrepr_bytes(data + 9, size - 9, size, out, 1 + data[3] % 255);
        break;
    }
    default: {
        uint32_t digits[64];
        double v;
        size_t n = (size - 9) / 4 < 64 ? (size - 9) / 4 : 64;
        memcpy(digits, data + 9, n * 4);
        objrepr_long(digits, n, 1 + data[1] % 30, data[2] & 1, out, 1 + data[3] % 255);
        memcpy(&v, data + 1, sizeof(v));
        objrepr_float(v, out, 1 + data[4] % 64);
        break;
    }
    }
    return 0;
}
