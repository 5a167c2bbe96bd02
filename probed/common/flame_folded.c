/*
 * flame_folded.c - a profile as folded stacks: "root;...;leaf count" per line (flame.h).
 *
 * The format splits frames on ';' and lines on newlines, so a name holding either (a script
 * under a directory named "a;b") would become other frames: in a label, ';' is written as
 * U+FF1B (a full-width semicolon, which reads the same) and a newline as a space.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "common/flame.h"

static void put_label(FILE *out, const char *label)
{
    for (const char *c = label; *c; c++) {
        if (*c == ';')
            fputs("\xef\xbc\x9b", out); /* U+FF1B */
        else if (*c == '\n' || *c == '\r')
            fputc(' ', out);
        else
            fputc(*c, out);
    }
}

char *flame_folded(const struct flame_profile *p, size_t *ret_len)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    bool oom = false;

    if (!out)
        return NULL;
    for (size_t i = 0; i < p->n_stacks && !oom; i++) {
        const struct flame_stack *st = &p->stacks[i];

        for (size_t k = 0; k < st->n_frames && !oom; k++) {
            char *label = flame_label(&st->frames[k]);

            oom = !label;
            if (label) {
                if (k)
                    fputc(';', out);
                put_label(out, label);
            }
            free(label);
        }
        fprintf(out, " %lld\n", (long long)st->count);
    }
    if (fclose(out) != 0 || oom) {
        free(buf);
        return NULL;
    }
    *ret_len = len;
    return buf;
}
