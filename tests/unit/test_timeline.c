/* test_timeline.c - common/flame.h's timeline: speedscope's per-thread profiles and the Chrome
 * trace's complete events from stack and sample rows, against events worked out by hand. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/flame.h"
#include "unit.h"

int test_timeline_renders_threads_in_time_order(void);

/* The "X" events of @trace named @name on thread @tid: their [ts, dur] (us) in @out. */
static size_t spans(json_t *trace, int tid, const char *name, double out[][2], size_t max)
{
    json_t *e;
    size_t i, n = 0;

    json_array_foreach(json_object_get(trace, "traceEvents"), i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0 ||
            json_integer_value(json_object_get(e, "tid")) != tid ||
            strcmp(json_string_value(json_object_get(e, "name")), name) != 0 || n >= max)
            continue;
        out[n][0] = json_number_value(json_object_get(e, "ts"));
        out[n][1] = json_number_value(json_object_get(e, "dur"));
        n++;
    }
    return n;
}

int test_timeline_renders_threads_in_time_order(void)
{
    /* stacks 7: main > work (w.py:3), 8: main > idle (w.py:9); period 10 ms */
    json_t *stacks =
        json_pack("[[i, s], [i, s]]", 7,
                  "[[\"python\", \"main\", \"w.py\", 1], [\"python\", \"work\", \"w.py\", 3]]", 8,
                  "[[\"python\", \"main\", \"w.py\", 1], [\"python\", \"idle\", \"w.py\", 9]]");
    /* thread 11: work, work, idle, then a gap of 8 periods, idle; thread 12: work */
    json_t *samples = json_pack(
        "[[i, i, s, I, i], [i, i, s, I, i], [i, i, s, I, i], [i, i, s, I, i], [i, i, s, I, i]]", 5,
        11, "MainThread", (json_int_t)1000000000, 7, 5, 11, "MainThread", (json_int_t)1010000000, 7,
        5, 11, "MainThread", (json_int_t)1020000000, 8, 5, 11, "MainThread", (json_int_t)1100000000,
        8, 5, 12, "", (json_int_t)1005000000, 7);
    struct flame_timeline *t = NULL;
    json_t *doc, *p;
    double s[4][2];
    size_t len;
    char *text;

    CHECK(stacks && samples);
    CHECK(flame_timeline_from_rows(stacks, samples, 10000000, &t) == 0);
    /* speedscope: a profile per thread, each sample a period, from the first sample of all */
    text = flame_timeline_speedscope(t, "w", &len);
    CHECK(text && (doc = json_loads(text, 0, NULL)));
    free(text);
    CHECK_STR(json_string_value(json_object_get(doc, "version")), "0.0.1");
    CHECK(json_array_size(json_object_get(doc, "profiles")) == 2);
    p = json_array_get(json_object_get(doc, "profiles"), 0);
    CHECK_STR(json_string_value(json_object_get(p, "name")), "MainThread (pid 5, tid 11)");
    CHECK_STR(json_string_value(json_object_get(p, "unit")), "nanoseconds");
    CHECK(json_integer_value(json_object_get(p, "startValue")) == 0);
    CHECK(json_integer_value(json_object_get(p, "endValue")) == 110000000);
    CHECK(json_array_size(json_object_get(p, "samples")) == 4);
    CHECK(json_integer_value(json_array_get(json_object_get(p, "weights"), 3)) == 10000000);
    p = json_array_get(json_object_get(doc, "profiles"), 1);
    CHECK_STR(json_string_value(json_object_get(p, "name")), "thread (pid 5, tid 12)");
    CHECK(json_integer_value(json_object_get(p, "startValue")) == 5000000);
    json_decref(doc);
    /* the Chrome trace: main runs 0-30 ms (closed a period after the last sample before the
     * gap) and 100-110 ms; work 0-20 ms, idle 20-30 ms and 100-110 ms */
    text = flame_timeline_chrome(t, &len);
    CHECK(text && (doc = json_loads(text, 0, NULL)));
    free(text);
    CHECK(spans(doc, 11, "main", s, 4) == 2);
    CHECK(s[0][0] == 0 && s[0][1] == 30000 && s[1][0] == 100000 && s[1][1] == 10000);
    CHECK(spans(doc, 11, "work", s, 4) == 1 && s[0][0] == 0 && s[0][1] == 20000);
    CHECK(spans(doc, 11, "idle", s, 4) == 2 && s[0][0] == 20000 && s[0][1] == 10000);
    CHECK(spans(doc, 12, "work", s, 4) == 1 && s[0][0] == 5000 && s[0][1] == 10000);
    CHECK(json_integer_value(json_object_get(json_object_get(doc, "otherData"), "start_unix_ns")) ==
          1000000000);
    json_decref(doc);
    flame_timeline_free(t);
    /* a row that is not one */
    json_array_append_new(samples, json_pack("[i, i]", 5, 11));
    CHECK(flame_timeline_from_rows(stacks, samples, 10000000, &t) == -EINVAL);
    json_decref(stacks);
    json_decref(samples);
    return 0;
}
