/* jsontext.c - see jsontext.h. */
#include "common/jsontext.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jsontext_real(double v, char *buf, size_t len)
{
    /* a normal value whose shortest form has 15 digits or fewer is that form at %.15g (the
       nearest 15-digit decimal, its trailing zeros dropped); the others need 16 or 17. A
       subnormal one has fewer digits of its own, so its search starts at 1 (5e-324) */
    for (int digits = fabs(v) < DBL_MIN ? 1 : 15; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
}

char *jsontext_dumps(const json_t *doc, size_t flags)
{
    char *text = json_dumps(doc, flags), *out, *o;
    bool in_string = false;

    /* a real is never longer rewritten (jansson writes 17 digits), and ".0" is added only to
       what jansson wrote with a '.' or an exponent, which the shortest form may have dropped:
       "2.0" -> "2" + ".0", the same length */
    if (!text || !(out = malloc(strlen(text) + 1))) {
        free(text);
        return NULL;
    }
    o = out;
    for (const char *p = text; *p;) {
        if (in_string || *p == '"') {
            if (in_string && *p == '\\' && p[1])
                *o++ = *p++;
            else if (*p == '"')
                in_string = !in_string;
            *o++ = *p++;
        } else if (*p == '-' || isdigit((unsigned char)*p)) {
            const char *start = p;
            bool real = false;
            char buf[40];

            for (; *p && strchr("+-0123456789.eE", *p); p++)
                real |= *p == '.' || *p == 'e' || *p == 'E';
            if (!real) {
                memcpy(o, start, (size_t)(p - start));
                o += p - start;
                continue;
            }
            jsontext_real(strtod(start, NULL), buf, sizeof(buf));
            if (!strpbrk(buf, ".eEn")) /* still a real: 2.0, not 2 */
                strcat(buf, ".0");
            if (strlen(buf) > (size_t)(p - start)) { /* not shorter: as jansson wrote it */
                memcpy(o, start, (size_t)(p - start));
                o += p - start;
            } else {
                memcpy(o, buf, strlen(buf));
                o += strlen(buf);
            }
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    free(text);
    return out;
}
