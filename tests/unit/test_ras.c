/* test_ras.c - NCCL's RAS document as the daemon keeps it (gpu/ras.h): NCCL's named fields
 * only, each checked for type and size; a document that is not NCCL's, or past the bounds, is
 * refused with where and why, and nothing of it kept. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/ras.h"
#include "unit.h"

/* What NCCL 2.28.9 writes (src/ras/client_support.cc), one communicator of 2 ranks, with a
 * field NCCL never writes ("injected") and ones probed does not keep. */
static const char DOC[] =
    "{\"nccl_version\": \"2.28.9+cuda12.9\", \"cuda_runtime_version\": 12090,"
    " \"cuda_driver_version\": 12080, \"timestamp\": \"2026-11-30 06:30:00\","
    " \"communicators_count\": 1, \"injected\": [1, 2],"
    " \"communicators\": [{\"hash\": \"0x77\", \"secondary_hash\": \"0x1:0x2\", \"size\": 3,"
    "  \"ranks_count\": 2, \"missing_ranks_count\": 1,"
    "  \"ranks\": [{\"rank\": 0, \"host\": \"10.0.0.1\", \"pid\": 10, \"cuda_dev\": 0,"
    "    \"nvml_dev\": 0, \"status\": {\"init_state\": 0, \"async_error\": 0,"
    "    \"finalize_called\": false, \"destroy_flag\": false, \"abort_flag\": true},"
    "    \"collective_counts\": {\"AllReduce\": 5, \"Send\": 2}, \"injected\": \"x\"},"
    "   {\"rank\": 1, \"host\": \"10.0.0.2\", \"pid\": 11, \"cuda_dev\": 1, \"nvml_dev\": 1,"
    "    \"status\": {\"init_state\": 0, \"async_error\": 6, \"finalize_called\": false,"
    "    \"destroy_flag\": false, \"abort_flag\": false},"
    "    \"collective_counts\": {\"AllReduce\": 4, \"Send\": 0}}],"
    "  \"missing_ranks\": [{\"rank\": 2, \"host\": \"10.0.0.3\", \"pid\": 12, \"cuda_dev\": 0,"
    "    \"nvml_dev\": 0, \"status\": {\"unresponsive\": false, \"considered_dead\": true}}]}],"
    " \"ras\": {\"collection_time_sec\": 0.5, \"timeouts_count\": 0}}";

static const char KEPT[] =
    "{\"communicators\": [{\"hash\": \"0x77\", \"missing\": [{\"cuda_dev\": 0, \"dead\": true,"
    " \"host\": \"10.0.0.3\", \"pid\": 12, \"rank\": 2, \"unresponsive\": false}],"
    " \"ranks\": [{\"aborted\": true, \"async_error\": 0, \"counts\": {\"AllReduce\": 5,"
    " \"Send\": 2}, \"cuda_dev\": 0, \"destroyed\": false, \"finalized\": false, \"host\":"
    " \"10.0.0.1\", \"init_state\": 0, \"pid\": 10, \"rank\": 0}, {\"aborted\": false,"
    " \"async_error\": 6, \"counts\": {\"AllReduce\": 4, \"Send\": 0}, \"cuda_dev\": 1,"
    " \"destroyed\": false, \"finalized\": false, \"host\": \"10.0.0.2\", \"init_state\": 0,"
    " \"pid\": 11, \"rank\": 1}], \"size\": 3}], \"collection_s\": 0.5, \"nccl_version\":"
    " \"2.28.9+cuda12.9\", \"timeouts\": 0}";

static json_t *doc(void)
{
    return json_loads(DOC, 0, NULL);
}

static json_t *rank0(json_t *d)
{
    return json_array_get(
        json_object_get(json_array_get(json_object_get(d, "communicators"), 0), "ranks"), 0);
}

/* @d (taken) is refused with a message holding @why. */
static int refused(json_t *d, const char *why)
{
    struct errbuf e = {{0}};
    json_t *out = NULL;
    int r = ras_normalise(d, &out, &e);

    json_decref(d);
    if (r != -EPROTO || out || !strstr(e.msg, why)) {
        fprintf(stderr, "r %d, message '%s', want '%s'\n", r, e.msg, why);
        json_decref(out);
        return 1;
    }
    return 0;
}

int test_ras_keeps_nccls_fields_only(void)
{
    struct errbuf e = {{0}};
    json_t *d = doc(), *out = NULL, *want = json_loads(KEPT, 0, NULL);
    char *got_s, *want_s;
    int ok;

    CHECK(d && want);
    CHECK(ras_normalise(d, &out, &e) == 0);
    got_s = json_dumps(out, JSON_SORT_KEYS | JSON_COMPACT);
    want_s = json_dumps(want, JSON_SORT_KEYS | JSON_COMPACT);
    ok = strcmp(got_s, want_s) == 0;
    if (!ok)
        fprintf(stderr, "got  %s\nwant %s\n", got_s, want_s);
    free(got_s);
    free(want_s);
    json_decref(d);
    json_decref(out);
    json_decref(want);
    CHECK(ok);
    return 0;
}

int test_ras_refuses_what_is_not_nccls(void)
{
    json_t *d, *many;
    char long_host[80];

    CHECK(refused(json_array(), "not a JSON object") == 0);
    CHECK(refused(json_pack("{s:s}", "communicators", "x"), "no \"communicators\" array") == 0);
    d = doc();
    json_object_set_new(rank0(d), "pid", json_string("10"));
    CHECK(refused(d, "communicator 0, rank entry 0: a field of another type") == 0);
    d = doc();
    json_object_del(rank0(d), "rank");
    CHECK(refused(d, "communicator 0, rank entry 0: no \"rank\"") == 0);
    memset(long_host, 'h', 65);
    long_host[65] = '\0';
    d = doc();
    json_object_set_new(rank0(d), "host", json_string(long_host));
    CHECK(refused(d, "rank entry 0: a field") == 0);
    d = doc();
    json_object_set_new(rank0(d), "host", json_string("10.0.0.1\x1b[2J"));
    CHECK(refused(d, "rank entry 0: a field") == 0);
    d = doc();
    json_object_set_new(json_object_get(rank0(d), "collective_counts"), "All Reduce",
                        json_integer(1));
    CHECK(refused(d, "rank entry 0: a field") == 0);
    d = doc();
    json_object_set_new(json_object_get(rank0(d), "collective_counts"), "AllReduce",
                        json_integer(-1));
    CHECK(refused(d, "rank entry 0: a field") == 0);
    d = doc();
    json_object_set_new(rank0(d), "status", json_integer(0));
    CHECK(refused(d, "\"status\" not an object") == 0);
    d = doc();
    json_object_set_new(json_array_get(json_object_get(d, "communicators"), 0), "size",
                        json_string("3"));
    CHECK(refused(d, "communicator 0: \"hash\" or \"size\" not NCCL's") == 0);
    d = doc(); /* past the communicators kept */
    many = json_array();
    for (int i = 0; i <= RAS_COMMS_MAX; i++)
        json_array_append_new(many, json_object());
    json_object_set_new(d, "communicators", many);
    CHECK(refused(d, "communicators, past 4096") == 0);
    d = doc(); /* past the ranks kept, in all communicators together */
    many = json_array();
    for (int c = 0; c < 2; c++) {
        json_t *ranks = json_array();
        for (int i = 0; i < RAS_RANKS_MAX / 2 + 1; i++)
            json_array_append_new(ranks, json_pack("{s:i}", "rank", i));
        json_array_append_new(many, json_pack("{s:s, s:i, s:o}", "hash", "0x1", "size",
                                              RAS_RANKS_MAX / 2 + 1, "ranks", ranks));
    }
    json_object_set_new(d, "communicators", many);
    CHECK(refused(d, "past 65536 ranks") == 0);
    return 0;
}
