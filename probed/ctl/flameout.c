/* flameout.c - see flameout.h. */
#define _GNU_SOURCE
#include "ctl/flameout.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flame.h"

void flame_sums_init(struct flame_sums *s)
{
    s->counts = json_object();
}

void flame_sums_add(struct flame_sums *s, json_t *frames, const char *root, int64_t count)
{
    json_t *all = json_array(), *v;
    char *key;

    if (root)
        json_array_append_new(all, json_pack("[s, s, s, i]", "label", root, "", 0));
    json_array_extend(all, frames);
    key = json_dumps(all, JSON_COMPACT);
    json_decref(all);
    if (!key || !s->counts)
        goto out;
    v = json_object_get(s->counts, key);
    json_object_set_new(s->counts, key, json_integer(json_integer_value(v) + count));
out:
    free(key);
}

int flame_format_ok(const char *format)
{
    return strcmp(format, "svg") == 0 || strcmp(format, "folded") == 0 ||
           strcmp(format, "speedscope") == 0;
}

int flame_sums_write(const struct flame_sums *s, const char *format, const char *title,
                     const char *path, const char *cmd)
{
    json_t *rows = json_array(), *v;
    struct flame_profile *p = NULL;
    const char *frames;
    char *text = NULL;
    size_t len = 0;
    FILE *out = stdout;
    int r;

    if (!flame_format_ok(format)) {
        fprintf(stderr, "probectl %s: writes svg, folded or speedscope, not %s%s%s%s\n", cmd,
                format, path ? " (named from " : "", path ? path : "",
                path ? ": name it .svg, .folded or .json, or give --format)" : "");
        return -EINVAL;
    }
    json_object_foreach(s->counts, frames, v)
        json_array_append_new(rows, json_pack("[s, I]", frames, json_integer_value(v)));
    r = flame_profile_from_rows(rows, &p);
    json_decref(rows);
    if (r < 0) {
        fprintf(stderr, "probectl %s: the stacks do not make a profile: %s\n", cmd, strerror(-r));
        return r;
    }
    text = strcmp(format, "svg") == 0      ? flame_svg(p, title, &len)
           : strcmp(format, "folded") == 0 ? flame_folded(p, &len)
                                           : flame_speedscope(p, title, &len);
    flame_profile_free(p);
    if (!text) {
        fprintf(stderr, "probectl %s: out of memory drawing the flame graph\n", cmd);
        return -ENOMEM;
    }
    if (path && !(out = fopen(path, "we"))) {
        r = -errno;
        fprintf(stderr, "probectl %s: %s: %s\n", cmd, path, strerror(errno));
        free(text);
        return r;
    }
    if (fwrite(text, 1, len, out) != len)
        r = -EIO;
    if (out != stdout && fclose(out) != 0)
        r = -EIO;
    free(text);
    if (r < 0)
        fprintf(stderr, "probectl %s: writing %s failed\n", cmd, path ? path : "stdout");
    return r;
}

void flame_sums_free(struct flame_sums *s)
{
    json_decref(s->counts);
    s->counts = NULL;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);

    return n >= k && strcmp(s + n - k, suffix) == 0;
}

const char *flame_format_of(const char *path)
{
    static const struct {
        const char *suffix, *format;
    } by_suffix[] = {
        {".folded", "folded"},
        {".collapsed", "folded"},
        {".txt", "folded"},
        {".speedscope.json", "speedscope"},
        {".chrometrace.json", "chrometrace"},
        {".trace.json", "chrometrace"},
        {".perfetto.json", "chrometrace"},
        {".json", "speedscope"},
        {".pb.gz", "pprof"},
        {".pb", "pprof"},
        {".pprof", "pprof"},
    };

    for (size_t i = 0; path && i < sizeof(by_suffix) / sizeof(by_suffix[0]); i++)
        if (ends_with(path, by_suffix[i].suffix))
            return by_suffix[i].format;
    return "svg";
}
