/* test_nodes.c - probectl's node lists (Slurm's ranges) and rank ranges (ctl/nodes.h), and
 * the job names findproc reads from an environment (sample/findproc.h). */
#include <errno.h>
#include <stdlib.h>

#include "common/pattern.h"
#include "ctl/nodes.h"
#include "sample/findproc.h"
#include "unit.h"

static int expands_to(const char *list, const char *want)
{
    struct nodes n = {0};
    char err[256], got[1024] = "";
    size_t len = 0;
    int r = nodes_expand(list, &n, err, sizeof(err));

    if (r < 0) {
        fprintf(stderr, "'%s': %s\n", list, err);
        return 1;
    }
    for (size_t i = 0; i < n.n; i++)
        len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%s", i ? " " : "", n.names[i]);
    nodes_free(&n);
    CHECK_STR(got, want);
    return 0;
}

static int refused(const char *list, int want_errno, const char *says)
{
    struct nodes n = {0};
    char err[256] = "";
    int r = nodes_expand(list, &n, err, sizeof(err));

    nodes_free(&n);
    if (r != -want_errno || !strstr(err, says)) {
        fprintf(stderr, "'%s': got %d '%s', want -%d '%s'\n", list, r, err, want_errno, says);
        return 1;
    }
    return 0;
}

int test_nodes_slurm_ranges(void)
{
    int ranks[] = {7, 0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 3};
    static const char *const no_hosts[] = {"-oProxyCommand=touch${IFS}/tmp/x",
                                           "-oProxyCommand=id",
                                           "node1,-F/tmp/cfg",
                                           "a;id",
                                           "$(id)",
                                           "a'b"};
    int one[] = {5}, gaps[] = {9, 1, 3, 2};
    char buf[64];

    CHECK(expands_to("a,b", "a b") == 0);
    CHECK(expands_to("node[01-03,10]", "node01 node02 node03 node10") == 0);
    CHECK(expands_to("gpu[1-2]-rack[7,9],login",
                     "gpu1-rack7 gpu1-rack9 gpu2-rack7 gpu2-rack9 login") == 0);
    CHECK(expands_to("n[8-10] n9, n[008]", "n8 n9 n10 n008") == 0); /* duplicates dropped */
    CHECK(expands_to("", "") == 0);
    CHECK(refused("node[1-", EINVAL, "not closed") == 0);
    CHECK(refused("node[a-b]", EINVAL, "not a range of numbers") == 0);
    CHECK(refused("node[3-1]", EINVAL, "not a range of numbers") == 0);
    CHECK(refused("node[]", EINVAL, "without its range") == 0);
    CHECK(refused("n[0-99999]", E2BIG, "more than") == 0);
    CHECK(refused("a]b", EINVAL, "not a list of nodes") == 0);
    /* issue 32 E: a name that ssh would take for an option, or shell syntax, is no host */
    for (size_t i = 0; i < sizeof(no_hosts) / sizeof(no_hosts[0]); i++)
        CHECK(refused(no_hosts[i], EINVAL, "not a host name") == 0);
    CHECK(nodes_host_name_ok("root@node-1.example.com") && nodes_host_name_ok("::1") &&
          nodes_host_name_ok("10.0.0.7") && nodes_host_name_ok("gpu_7"));
    CHECK(!nodes_host_name_ok("-x") && !nodes_host_name_ok("") && !nodes_host_name_ok("a b") &&
          !nodes_host_name_ok("a\tb") && !nodes_host_name_ok("a/b"));

    ranks_format(ranks, sizeof(ranks) / sizeof(ranks[0]), buf, sizeof(buf));
    CHECK_STR(buf, "0-15");
    ranks_format(one, 1, buf, sizeof(buf));
    CHECK_STR(buf, "5");
    ranks_format(gaps, 4, buf, sizeof(buf));
    CHECK_STR(buf, "1-3,9");
    ranks_format(gaps, 0, buf, sizeof(buf));
    CHECK_STR(buf, "");
    return 0;
}

int test_findproc_job_names(void)
{
    static const char env[] = "PATH=/bin\0SLURM_JOB_ID=4242\0SLURM_JOB_NAME=train\0"
                              "TORCHELASTIC_RUN_ID=run-7\0X=SLURM_JOB_ID=99";

    CHECK(findproc_env_names_job(env, sizeof(env), "4242"));
    CHECK(findproc_env_names_job(env, sizeof(env), "train"));
    CHECK(findproc_env_names_job(env, sizeof(env), "run-7"));
    CHECK(!findproc_env_names_job(env, sizeof(env), "424"));
    CHECK(!findproc_env_names_job(env, sizeof(env), "99"));
    CHECK(!findproc_env_names_job(env, sizeof(env) - 5, "run-7x"));
    return 0;
}

/* Issue 32 D: 26 bytes took 1.2 GB and a second of the loop; 35 bytes 8 GB and 31 s. A pattern
 * is measured as glibc's regcomp unrolls it, and refused past the bound before it compiles. */
int test_patterns_bounded(void)
{
    static const char *const refused[] = {
        "((a{1,100}){1,100}){1,100}",
        "(((a{1,100}){1,100}){1,100}){1,100}",
        "a{1,32767}",
        "(ab{2,60}){2,60}",
        "x{,3000}",
        "(a)\\1",
        "(((((((((((a{2}){2}){2}){2}){2}){2}){2}){2}){2}){2}){2}){2}",
        "((a++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++)",
    };
    static const char *const taken[] = {
        "train\\.py",
        "node[0-9]{1,3}",
        "^python3? .*(train|eval)\\.py( |$)",
        "[[:digit:]]{4}",
        "(ab){3}x{2,5}",
        "a|b|c",
        "[]{}()]+",
        "{",
        "a{",
        "x{1,2",
    };
    char why[256];
    regex_t re;

    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        why[0] = '\0';
        if (pattern_check(refused[i], why, sizeof(why)) != -EINVAL || !why[0]) {
            fprintf(stderr, "taken: %s\n", refused[i]);
            return 1;
        }
    }
    for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
        if (pattern_check(taken[i], why, sizeof(why)) != 0) {
            fprintf(stderr, "refused: %s: %s\n", taken[i], why);
            return 1;
        }
    }
    CHECK(pattern_compile(&re, "node[0-9]{1,3}", why, sizeof(why)) == 0);
    CHECK(regexec(&re, "node042", 0, NULL, 0) == 0);
    regfree(&re);
    CHECK(pattern_compile(&re, "a(", why, sizeof(why)) == -EINVAL && strstr(why, "not a pattern"));
    return 0;
}
