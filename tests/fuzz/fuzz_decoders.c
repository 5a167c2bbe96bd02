/*
 * fuzz_decoders.c - libFuzzer target for everything that parses bytes taken from a target:
 * the three line-table formats, the version-string scanner, and the repr() renderers.
 * The first byte picks the decoder; the rest is its input.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "elfimg.h"
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
