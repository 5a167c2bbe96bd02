/*
 * flame_speedscope.c - a profile in speedscope's JSON file format, a "sampled" profile
 * (https://www.speedscope.app/file-format-schema.json; flame.h).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flame.h"

/* The index of frame @f in @frames (added when new); @index maps its label -> index. */
static json_int_t frame_index(json_t *frames, json_t *index, const struct flame_frame *f)
{
    char *key = flame_label(f);
    json_t *known = key ? json_object_get(index, key) : NULL;
    json_int_t i = known ? json_integer_value(known) : (json_int_t)json_array_size(frames);

    if (key && !known) {
        json_array_append_new(frames, json_pack("{s:s, s:s, s:i}", "name", f->func, "file", f->file,
                                                "line", f->line));
        json_object_set_new(index, key, json_integer(i));
    }
    free(key);
    return i;
}

char *flame_speedscope(const struct flame_profile *p, const char *title, size_t *ret_len)
{
    json_t *frames = json_array(), *index = json_object(), *samples = json_array();
    json_t *weights = json_array(), *doc;
    char *text;

    for (size_t i = 0; i < p->n_stacks; i++) {
        const struct flame_stack *st = &p->stacks[i];
        json_t *stack = json_array();

        for (size_t k = 0; k < st->n_frames; k++)
            json_array_append_new(stack, json_integer(frame_index(frames, index, &st->frames[k])));
        json_array_append_new(samples, stack);
        json_array_append_new(weights, json_integer(st->count));
    }
    json_decref(index);
    doc = json_pack("{s:s, s:s, s:s, s:s, s:{s:o}, s:[{s:s, s:s, s:s, s:i, s:I, s:o, s:o}]}",
                    "$schema", "https://www.speedscope.app/file-format-schema.json", "version",
                    "0.0.1", "name", title, "exporter", "probed", "shared", "frames", frames,
                    "profiles", "type", "sampled", "name", title, "unit", "none", "startValue", 0,
                    "endValue", (json_int_t)p->total, "samples", samples, "weights", weights);
    text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    *ret_len = text ? strlen(text) : 0;
    return text;
}
