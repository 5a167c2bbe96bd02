/* test_config.c - probed's settings: checks, the file format, reloads and what they keep. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "unit.h"

int test_config_checks_values(void);
int test_config_file_and_reload(void);

int test_config_checks_values(void)
{
    struct errbuf err;
    int64_t v;

    CHECK(config_check(CFG_SAMPLE_RATE, "250", &v, &err) == 0 && v == 250);
    CHECK(config_check(CFG_SAMPLE_RATE, "0", &v, &err) < 0);
    CHECK_STR(err.msg, "sample_rate: 0 Hz is outside 1..100000");
    CHECK(config_check(CFG_SAMPLE_RATE, "100001", &v, &err) < 0);
    CHECK(config_check(CFG_SAMPLE_RATE, "12x", &v, &err) < 0);
    CHECK(config_check(CFG_RETENTION, "0", &v, &err) == 0 && v == 0);
    CHECK(config_check(CFG_RETENTION, "2d", &v, &err) == 0 && v == 172800e9);
    CHECK(config_check(CFG_RETENTION, "inf", &v, &err) < 0);
    CHECK(config_check(CFG_RETENTION, "1e300", &v, &err) < 0);
    CHECK(config_check(CFG_QUERY_TIMEOUT, "0", &v, &err) < 0); /* 0 is not "off" */
    CHECK(config_check(CFG_QUERY_TIMEOUT, "250ms", &v, &err) == 0 && v == 250e6);
    CHECK(config_check(CFG_MAX_DB_SIZE, "2G", &v, &err) == 0 && v == 2LL << 30);
    CHECK(config_check(CFG_MAX_DB_SIZE, "1K", &v, &err) < 0);
    CHECK(config_check(CFG_MEMORY_INTERVAL, "50ms", &v, &err) < 0);
    CHECK(config_check(CFG_MEMORY_INTERVAL, "0", &v, &err) == 0 && v == 0);
    CHECK(config_check(CFG_METRICS_ADDRESS, "off", &v, &err) == 0);
    CHECK(config_check(CFG_METRICS_ADDRESS, "[::1]:9464", &v, &err) == 0);
    CHECK(config_check(CFG_METRICS_ADDRESS, "0.0.0.0:0", &v, &err) < 0);
    CHECK(config_check(CFG_METRICS_ADDRESS, ":9464", &v, &err) < 0);
    CHECK(config_check(CFG_SOCKET, "relative.sock", &v, &err) < 0);
    CHECK(config_check(CFG_STUB, "", &v, &err) == 0);
    CHECK(config_check(CFG_GROUP, "a b", &v, &err) < 0);
    CHECK(config_check(CFG_GROUP, "ok\x01", &v, &err) < 0);
    CHECK(config_key_of("probed.sample_rate") == CFG_SAMPLE_RATE);
    CHECK(config_key_of("nope") == -1);
    return 0;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

int test_config_file_and_reload(void)
{
    char path[] = "/tmp/probed-unit-conf-XXXXXX", rn[256], text[CONFIG_VALUE_MAX];
    struct errbuf err;
    struct config c;
    int fd = mkstemp(path);

    CHECK(fd >= 0);
    close(fd);
    config_init(&c);
    CHECK(config_num(&c, CFG_SAMPLE_RATE) == 100);
    CHECK(write_file(path, "# comment\n\n  sample_rate = 40 # Hz\nstub = \"\"\n"
                           "socket=/run/x.sock\nretention = 1d\n") == 0);
    CHECK(config_load(&c, path, true, false, rn, sizeof(rn), &err) == 0);
    CHECK(config_num(&c, CFG_SAMPLE_RATE) == 40);
    config_text(&c, CFG_SOCKET, text, sizeof(text));
    CHECK_STR(text, "/run/x.sock");
    /* the command line pins a key: a reload leaves it */
    CHECK(config_set(&c, CFG_RETENTION, "2h", false, true, &err) == 0);
    /* a live change of a restart-only key is refused, and changes nothing */
    CHECK(config_set(&c, CFG_SOCKET, "/run/y.sock", true, false, &err) < 0);
    CHECK(strstr(err.msg, "changes only with a restart") != NULL);

    /* reload: live keys follow, restart keys are named, keys gone from the file go back to
     * their default, pinned keys stay */
    CHECK(write_file(path, "sample_rate = 70\nsocket = /run/z.sock\nretention = 3d\n") == 0);
    CHECK(config_load(&c, path, false, true, rn, sizeof(rn), &err) == 0);
    CHECK(config_num(&c, CFG_SAMPLE_RATE) == 70);
    CHECK(config_num(&c, CFG_RETENTION) == 7200e9);
    config_text(&c, CFG_SOCKET, text, sizeof(text));
    CHECK_STR(text, "/run/x.sock");
    CHECK_STR(rn, "socket");

    /* one bad line: nothing changes, and the error names the file and line */
    CHECK(write_file(path, "sample_rate = 90\nquery_timeout = soon\n") == 0);
    CHECK(config_load(&c, path, false, true, rn, sizeof(rn), &err) < 0);
    CHECK(strstr(err.msg, ":2: query_timeout: 'soon' is not a duration") != NULL);
    CHECK(config_num(&c, CFG_SAMPLE_RATE) == 70);
    CHECK(write_file(path, "sample_rate\n") == 0);
    CHECK(config_load(&c, path, false, true, rn, sizeof(rn), &err) < 0);
    CHECK(strstr(err.msg, ":1: expected key = value") != NULL);
    CHECK(write_file(path, "colour = blue\n") == 0);
    CHECK(config_load(&c, path, false, true, rn, sizeof(rn), &err) < 0);
    CHECK(strstr(err.msg, ":1: unknown key 'colour'") != NULL);

    unlink(path);
    /* a missing file: fine unless it was asked for */
    CHECK(config_load(&c, path, false, false, rn, sizeof(rn), &err) == 0);
    CHECK(config_load(&c, path, true, false, rn, sizeof(rn), &err) < 0);
    config_destroy(&c);
    return 0;
}
