/*
 * flame_json.c - a profile as JSON for programs (the web view, agents): every distinct frame
 * once, and each stack as indices into them, root first (flame.h).
 *
 *   {"title", "total", "frames": [{"name", "file", "line", "kind"}, ...],
 *    "stacks": [{"n": samples, "frames": [index, ...]}, ...]}
 *
 * kind is "python", "native", "task" (an asyncio task, name "<task NAME>") or "label". Unlike
 * folded text, a name holding ';' or " (" stays one frame.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flame.h"

static const char *kind_of(const struct flame_frame *f)
{
    return f->label ? "label" : f->task ? "task" : f->native ? "native" : "python";
}

/* The index of @f in @frames (appended when new); @index maps a frame's key -> index. */
static json_int_t frame_index(json_t *frames, json_t *index, const struct flame_frame *f)
{
    char *key = NULL;
    json_t *known;
    json_int_t i;

    /* the key holds every field whole, the function's length first: no name, whatever
     * characters it holds, can make two frames one */
    if (asprintf(&key, "%s:%d:%zu:%s%s", kind_of(f), f->line, strlen(f->func), f->func, f->file) <
        0)
        return -1;
    known = json_object_get(index, key);
    i = known ? json_integer_value(known) : (json_int_t)json_array_size(frames);
    if (!known && (json_array_append_new(frames, json_pack("{s:s, s:s, s:i, s:s}", "name", f->func,
                                                           "file", f->file, "line", f->line, "kind",
                                                           kind_of(f))) < 0 ||
                   json_object_set_new(index, key, json_integer(i)) < 0))
        i = -1;
    free(key);
    return i;
}

char *flame_json(const struct flame_profile *p, const char *title, size_t *ret_len)
{
    json_t *frames = json_array(), *index = json_object(), *stacks = json_array(), *doc = NULL;
    char *text = NULL;
    bool ok = frames && index && stacks;

    for (size_t i = 0; ok && i < p->n_stacks; i++) {
        const struct flame_stack *st = &p->stacks[i];
        json_t *ids = json_array();

        ok = ids != NULL;
        for (size_t k = 0; ok && k < st->n_frames; k++) {
            json_int_t at = frame_index(frames, index, &st->frames[k]);

            ok = at >= 0 && json_array_append_new(ids, json_integer(at)) == 0;
        }
        if (ok) {
            json_t *one = json_pack("{s:I, s:O}", "n", (json_int_t)st->count, "frames", ids);

            ok = json_array_append_new(stacks, one) == 0;
        }
        json_decref(ids);
    }
    if (ok)
        doc = json_pack("{s:s, s:I, s:O, s:O}", "title", title ? title : "", "total",
                        (json_int_t)p->total, "frames", frames, "stacks", stacks);
    text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    json_decref(frames);
    json_decref(index);
    json_decref(stacks);
    *ret_len = text ? strlen(text) : 0;
    return text;
}
