/* pprof.c - see pprof.h. */
#define _GNU_SOURCE
#include "query/pprof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "query/flame.h"
#include "profile.pb-c.h"

/* The tables being built; index maps a key to its id (or string index). */
struct builder {
    json_t *index;
    char **strings;
    size_t n_strings, cap_strings;
    Perftools__Profiles__Function **functions;
    size_t n_functions, cap_functions;
    Perftools__Profiles__Location **locations;
    size_t n_locations, cap_locations;
    bool oom;
};

static bool grow(void **arr, size_t *cap, size_t n, size_t size)
{
    void *p;

    if (n < *cap)
        return true;
    p = realloc(*arr, (*cap ? 2 * *cap : 64) * size);
    if (!p)
        return false;
    *arr = p;
    *cap = *cap ? 2 * *cap : 64;
    return true;
}

/* A value from the index under @key ("s:..." strings, "f:..." functions, "l:..." locations). */
static json_int_t lookup(struct builder *b, const char *kind, const char *key)
{
    char *k = NULL;
    json_t *v;

    if (asprintf(&k, "%s%s", kind, key) < 0)
        return -1;
    v = json_object_get(b->index, k);
    free(k);
    return v ? json_integer_value(v) : -1;
}

static void remember(struct builder *b, const char *kind, const char *key, json_int_t value)
{
    char *k = NULL;

    if (asprintf(&k, "%s%s", kind, key) < 0) {
        b->oom = true;
        return;
    }
    json_object_set_new(b->index, k, json_integer(value));
    free(k);
}

static int64_t string_index(struct builder *b, const char *s)
{
    json_int_t i = lookup(b, "s:", s);

    if (i >= 0)
        return i;
    if (!grow((void **)&b->strings, &b->cap_strings, b->n_strings, sizeof(char *)) ||
        !(b->strings[b->n_strings] = strdup(s))) {
        b->oom = true;
        return 0;
    }
    remember(b, "s:", s, (json_int_t)b->n_strings);
    return (int64_t)b->n_strings++;
}

static uint64_t function_id(struct builder *b, const char *func, const char *file,
                            int64_t start_line)
{
    char *key = NULL;
    json_int_t id;
    Perftools__Profiles__Function *f;

    if (asprintf(&key, "%s\t%s", func, file) < 0) {
        b->oom = true;
        return 0;
    }
    id = lookup(b, "f:", key);
    if (id < 0 &&
        grow((void **)&b->functions, &b->cap_functions, b->n_functions, sizeof(*b->functions)) &&
        (f = calloc(1, sizeof(*f))) != NULL) {
        perftools__profiles__function__init(f);
        f->id = b->n_functions + 1; /* ids start at 1: 0 means none */
        f->name = f->system_name = string_index(b, func);
        f->filename = string_index(b, file);
        f->start_line = start_line; /* the def's line: pprof shows lines relative to it */
        b->functions[b->n_functions++] = f;
        id = (json_int_t)f->id;
        remember(b, "f:", key, id);
    } else if (id < 0) {
        b->oom = true;
        id = 0;
    }
    free(key);
    return (uint64_t)id;
}

static Perftools__Profiles__Location *new_location(uint64_t id, uint64_t function_id,
                                                   int64_t lineno)
{
    Perftools__Profiles__Location *loc = malloc(sizeof(*loc));
    Perftools__Profiles__Line *line = malloc(sizeof(*line));
    Perftools__Profiles__Line **lines = calloc(1, sizeof(*lines));

    if (!loc || !line || !lines) {
        free(loc);
        free(line);
        free(lines);
        return NULL;
    }
    perftools__profiles__location__init(loc);
    perftools__profiles__line__init(line);
    line->function_id = function_id;
    line->line = lineno;
    lines[0] = line;
    loc->id = id;
    loc->mapping_id = 1; /* the one mapping: the process's program */
    loc->n_line = 1;
    loc->line = lines;
    return loc;
}

/* The Location of frame @f: one per distinct frame (its label and kind). */
static uint64_t location_id(struct builder *b, const struct flame_frame *f)
{
    char *label = flame_label(f), *key = NULL;
    Perftools__Profiles__Location *loc = NULL;
    json_int_t id;

    if (!label || asprintf(&key, "%c%s", f->native ? 'n' : 'p', label) < 0) {
        free(label);
        b->oom = true;
        return 0;
    }
    free(label);
    id = lookup(b, "l:", key);
    if (id < 0 &&
        grow((void **)&b->locations, &b->cap_locations, b->n_locations, sizeof(*b->locations)))
        loc = new_location(b->n_locations + 1, function_id(b, f->func, f->file, f->first_line),
                           f->line);
    if (loc) {
        b->locations[b->n_locations++] = loc;
        id = (json_int_t)loc->id;
        remember(b, "l:", key, id);
    } else if (id < 0) {
        b->oom = true;
        id = 0;
    }
    free(key);
    return (uint64_t)id;
}

/* A label of a Sample: a text (@str) or a number (@num when @str is NULL). */
static Perftools__Profiles__Label *new_label(struct builder *b, const char *key, const char *str,
                                             int64_t num)
{
    Perftools__Profiles__Label *l = malloc(sizeof(*l));

    if (!l) {
        b->oom = true;
        return NULL;
    }
    perftools__profiles__label__init(l);
    l->key = string_index(b, key);
    if (str)
        l->str = string_index(b, str);
    else
        l->num = num;
    return l;
}

/* One Sample: the stack's frames, innermost first as pprof wants. A root "label" frame of a
 * thread (flame_request.by_thread: its file the thread's name, its line the tid) is no frame
 * but the sample's labels thread and thread_id; pid and rank label every sample. */
static Perftools__Profiles__Sample *sample_of(struct builder *b, const struct flame_stack *st,
                                              int64_t period_ns, const struct pprof_meta *meta)
{
    Perftools__Profiles__Sample *s = calloc(1, sizeof(*s));
    const struct flame_frame *thread =
        st->n_frames && st->frames[0].label && st->frames[0].line > 0 ? &st->frames[0] : NULL;
    size_t skip = thread ? 1 : 0, n = st->n_frames - skip;

    if (!s)
        return NULL;
    perftools__profiles__sample__init(s);
    s->location_id = calloc(n ? n : 1, sizeof(*s->location_id));
    s->value = calloc(2, sizeof(*s->value));
    s->label = calloc(4, sizeof(*s->label));
    if (!s->location_id || !s->value || !s->label) {
        b->oom = true;
        return s;
    }
    for (size_t k = 0; k < n; k++)
        s->location_id[n - 1 - k] = location_id(b, &st->frames[skip + k]);
    s->n_location_id = n;
    s->n_value = 2;
    s->value[0] = st->count;
    s->value[1] = st->count * period_ns;
    if (meta && meta->pid > 0)
        s->label[s->n_label++] = new_label(b, "pid", NULL, meta->pid);
    if (meta && meta->rank >= 0)
        s->label[s->n_label++] = new_label(b, "rank", NULL, meta->rank);
    if (thread) {
        s->label[s->n_label++] = new_label(b, "thread", thread->file, 0);
        s->label[s->n_label++] = new_label(b, "thread_id", NULL, thread->line);
    }
    for (size_t k = 0; k < s->n_label; k++)
        b->oom |= s->label[k] == NULL;
    return s;
}

/* gzip (RFC 1952) of @in: what pprof tools expect of a .pb.gz. */
static uint8_t *gzip(const uint8_t *in, size_t len, size_t *ret_len)
{
    z_stream z = {0};
    uLong bound;
    uint8_t *out;

    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    bound = deflateBound(&z, (uLong)len) + 32;
    out = malloc(bound);
    if (out) {
        z.next_in = (Bytef *)(uintptr_t)in;
        z.avail_in = (uInt)len;
        z.next_out = out;
        z.avail_out = (uInt)bound;
        if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
            free(out);
            out = NULL;
        }
    }
    *ret_len = z.total_out;
    deflateEnd(&z);
    return out;
}

static void free_builder(struct builder *b, Perftools__Profiles__Sample **samples, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!samples[i])
            continue;
        free(samples[i]->location_id);
        free(samples[i]->value);
        for (size_t k = 0; k < samples[i]->n_label; k++)
            free(samples[i]->label[k]);
        free(samples[i]->label);
        free(samples[i]);
    }
    free(samples);
    for (size_t i = 0; i < b->n_locations; i++) {
        free(b->locations[i]->line[0]);
        free(b->locations[i]->line);
        free(b->locations[i]);
    }
    free(b->locations);
    for (size_t i = 0; i < b->n_functions; i++)
        free(b->functions[i]);
    free(b->functions);
    for (size_t i = 0; i < b->n_strings; i++)
        free(b->strings[i]);
    free(b->strings);
    json_decref(b->index);
}

uint8_t *pprof_of(const struct flame_profile *p, int64_t period_ns, int64_t time_ns,
                  const struct pprof_meta *meta, size_t *ret_len)
{
    Perftools__Profiles__Mapping mapping = PERFTOOLS__PROFILES__MAPPING__INIT, *mappings[1];
    struct builder b = {.index = json_object()};
    Perftools__Profiles__Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
    Perftools__Profiles__ValueType types[2], period_type, *type_ptrs[2] = {&types[0], &types[1]};
    size_t n_rows = p->n_stacks, packed_len;
    Perftools__Profiles__Sample **samples = calloc(n_rows ? n_rows : 1, sizeof(*samples));
    uint8_t *packed = NULL, *out = NULL;
    size_t i;

    if (!samples || !b.index) {
        free(samples);
        json_decref(b.index);
        return NULL;
    }
    string_index(&b, ""); /* string 0 is always "" */
    for (i = 0; i < 2; i++)
        perftools__profiles__value_type__init(&types[i]);
    perftools__profiles__value_type__init(&period_type);
    types[0].type = string_index(&b, "samples");
    types[0].unit = string_index(&b, "count");
    types[1].type = period_type.type = string_index(&b, "cpu");
    types[1].unit = period_type.unit = string_index(&b, "nanoseconds");
    for (i = 0; i < n_rows; i++)
        samples[i] = sample_of(&b, &p->stacks[i], period_ns, meta);
    /* the main binary (pprof tools name the profile by it), holding every location: the
     * frames are named already, so tools look nothing up in it */
    mapping.id = 1;
    mapping.filename = string_index(&b, meta && meta->binary ? meta->binary : "python");
    mapping.has_functions = mapping.has_filenames = mapping.has_line_numbers = true;
    mappings[0] = &mapping;
    prof.n_mapping = 1;
    prof.mapping = mappings;
    prof.n_sample_type = 2;
    prof.sample_type = type_ptrs;
    prof.n_sample = n_rows;
    prof.sample = samples;
    prof.n_location = b.n_locations;
    prof.location = b.locations;
    prof.n_function = b.n_functions;
    prof.function = b.functions;
    prof.n_string_table = b.n_strings;
    prof.string_table = b.strings;
    prof.period_type = &period_type;
    prof.period = period_ns;
    prof.time_nanos = time_ns;
    prof.default_sample_type = types[1].type; /* a string index: "cpu" */
    for (i = 0; i < n_rows && !b.oom; i++)
        b.oom = samples[i] == NULL;
    if (!b.oom) {
        packed_len = perftools__profiles__profile__get_packed_size(&prof);
        packed = malloc(packed_len ? packed_len : 1);
        if (packed) {
            perftools__profiles__profile__pack(&prof, packed);
            out = gzip(packed, packed_len, ret_len);
        }
    }
    free(packed);
    free_builder(&b, samples, n_rows);
    return out;
}
