/* test_desync.c - the first collective a job's ranks disagree on (ctl/desync.h): another size,
 * dtype, op or root at one number is a desync; all_to_all's own splits, a call that raised and a
 * rank's row seen twice are not; ranks that never reached the number are named. */
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>

#include "ctl/desync.h"
#include "unit.h"

/* DESYNC_SQL's rows: [pid, group, seq, op, bytes, dtype, root] */
static const char *const CALLS[4] = {
    "[[100, \"0\", 10, \"all_reduce\", 4096, \"float32\", null],"
    " [100, \"0\", 11, \"broadcast\", 64, \"int64\", 0],"
    " [100, \"0\", 12, \"all_reduce\", 4096, \"float32\", null],"
    " [100, \"0\", 13, \"all_reduce\", 4096, \"float32\", null],"
    " [100, \"0\", 14, \"barrier\", 0, null, null],"
    " [100, \"1\", 5, \"all_gather\", 256, \"float32\", null],"
    " [100, \"2\", 1, \"all_to_all_single\", 100, \"float32\", null],"
    " [100, \"2\", 2, \"all_reduce (failed)\", 8, \"float32\", null],"
    " [100, \"3\", 7, \"broadcast\", 8, \"float32\", 0]]",
    "[[101, \"0\", 10, \"all_reduce\", 4096, \"float32\", null],"
    " [101, \"0\", 11, \"broadcast\", 64, \"int64\", 0],"
    " [101, \"0\", 12, \"all_reduce\", 4096, \"float32\", null],"
    " [101, \"0\", 12, \"all_reduce\", 4096, \"float32\", null],"
    " [101, \"0\", 13, \"all_reduce\", 4096, \"float32\", null],"
    " [101, \"1\", 5, \"all_gather\", 256, \"bfloat16\", null],"
    " [101, \"2\", 1, \"all_to_all_single\", 200, \"float32\", null],"
    " [101, \"2\", 2, \"all_reduce\", 8, \"float32\", null],"
    " [101, \"3\", 7, \"broadcast\", 8, \"float32\", 1]]",
    "[[102, \"0\", 10, \"all_reduce\", 4096, \"float32\", null],"
    " [102, \"0\", 11, \"broadcast\", 64, \"int64\", 0],"
    " [102, \"0\", 12, \"all_reduce\", 4096, \"float32\", null],"
    " [102, \"0\", 13, \"all_reduce\", 2048, \"float32\", null],"
    " [102, \"0\", 14, \"all_reduce\", 4096, \"float32\", null]]",
    "[[103, \"0\", 10, \"all_reduce\", 4096, \"float32\", null],"
    " [103, \"0\", 11, \"broadcast\", 64, \"int64\", 0],"
    " [103, \"0\", 12, \"all_reduce\", 4096, \"float32\", null]]",
};

/* Whether @got (freed) is the JSON @want; says what it was when not. */
static bool is_json(json_t *got, const char *want)
{
    json_t *w = json_loads(want, 0, NULL);
    bool same = w && json_equal(got, w);

    if (!same) {
        char *s = json_dumps(got, JSON_COMPACT);
        fprintf(stderr, "got %s\n", s);
        free(s);
    }
    json_decref(w);
    json_decref(got);
    return same;
}

int test_desync_first_disagreement(void)
{
    struct desync_rank ranks[4];
    bool ok;

    for (int i = 0; i < 4; i++) {
        ranks[i] = (struct desync_rank){
            .rank = i == 3 ? -1 : i, .pid = 100 + i, .calls = json_loads(CALLS[i], 0, NULL)};
        CHECK(ranks[i].calls);
    }
    ok = is_json(desync_find(ranks, 4),
                 "[{\"group\": \"0\", \"seq\": 13, \"not_reached\": \"103\", \"calls\": ["
                 "  {\"ranks\": \"0-1\", \"count\": 2, \"op\": \"all_reduce\", \"bytes\": 4096,"
                 "   \"dtype\": \"float32\", \"root\": null},"
                 "  {\"ranks\": \"2\", \"count\": 1, \"op\": \"all_reduce\", \"bytes\": 2048,"
                 "   \"dtype\": \"float32\", \"root\": null}]},"
                 " {\"group\": \"1\", \"seq\": 5, \"not_reached\": \"\", \"calls\": ["
                 "  {\"ranks\": \"0\", \"count\": 1, \"op\": \"all_gather\", \"bytes\": 256,"
                 "   \"dtype\": \"float32\", \"root\": null},"
                 "  {\"ranks\": \"1\", \"count\": 1, \"op\": \"all_gather\", \"bytes\": 256,"
                 "   \"dtype\": \"bfloat16\", \"root\": null}]},"
                 " {\"group\": \"3\", \"seq\": 7, \"not_reached\": \"\", \"calls\": ["
                 "  {\"ranks\": \"0\", \"count\": 1, \"op\": \"broadcast\", \"bytes\": 8,"
                 "   \"dtype\": \"float32\", \"root\": 0},"
                 "  {\"ranks\": \"1\", \"count\": 1, \"op\": \"broadcast\", \"bytes\": 8,"
                 "   \"dtype\": \"float32\", \"root\": 1}]}]");
    ok &= is_json(desync_find(ranks, 1), "[]"); /* nothing to compare: no desync */
    for (int i = 0; i < 4; i++)
        json_decref(ranks[i].calls);
    CHECK(ok);
    return 0;
}

/* The NCCL communicators whose ranks' latest numbers differ: who is ahead, who behind. */
int test_desync_nccl_counts(void)
{
    static const char *const calls[3] = {
        "[[100, \"nccl:aa\", 5, \"all_gather\", 8, \"float32\", null],"
        " [100, \"nccl:aa\", 7, \"reduce_scatter (failed)\", 8, \"float32\", null],"
        " [100, \"nccl:aa\", 6, \"all_gather\", 8, \"float32\", null],"
        " [100, \"nccl:bb\", 3, \"all_reduce\", 8, \"float32\", null],"
        " [100, \"0\", 40, \"all_reduce\", 8, \"float32\", null]]",
        "[[101, \"nccl:aa\", 5, \"all_gather\", 8, \"float32\", null],"
        " [101, \"nccl:aa\", 6, \"all_gather\", 8, \"float32\", null],"
        " [101, \"nccl:bb\", 3, \"all_reduce\", 8, \"float32\", null],"
        " [101, \"0\", 39, \"all_reduce\", 8, \"float32\", null]]",
        "[[102, \"nccl:aa\", 7, \"reduce_scatter\", 8, \"float32\", null]]",
    };
    struct desync_rank ranks[3];
    bool ok;

    for (int i = 0; i < 3; i++) {
        ranks[i] = (struct desync_rank){
            .rank = i == 2 ? -1 : i, .pid = 100 + i, .calls = json_loads(calls[i], 0, NULL)};
        CHECK(ranks[i].calls);
    }
    ok = is_json(desync_counts(ranks, 3),
                 "[{\"group\": \"nccl:aa\", \"seq\": 7, \"op\": \"reduce_scatter\","
                 "  \"ahead\": \"0,102\", \"behind\": [{\"rank\": 1, \"pid\": 101,"
                 "  \"seq\": 6, \"op\": \"all_gather\"}]}]");
    for (int i = 0; i < 3; i++)
        json_decref(ranks[i].calls);
    CHECK(ok);
    return 0;
}
