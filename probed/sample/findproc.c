/* findproc.c - see findproc.h. */
#define _GNU_SOURCE
#include "sample/findproc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "common/procfs.h"

#define ANCESTORS_MAX 64
#define ENVIRON_MAX (256 * 1024) /* a rank's environment is tens of KiB; read no more */

/* The parent of @pid from /proc/PID/stat (after the command's closing parenthesis), or 0. */
static pid_t parent_of(pid_t pid)
{
    char buf[512], *p;
    int ppid = 0;

    if (procfs_read(pid, "stat", buf, sizeof(buf)) <= 0 || !(p = strrchr(buf, ')')))
        return 0;
    return sscanf(p + 1, " %*c %d", &ppid) == 1 ? (pid_t)ppid : 0;
}

bool findproc_env_names_job(const char *env, size_t len, const char *job)
{
    static const char *const names[] = {"SLURM_JOB_ID=", "SLURM_JOB_NAME=", "TORCHELASTIC_RUN_ID="};
    size_t jl = strlen(job);

    for (size_t i = 0; i < len; i += strnlen(env + i, len - i) + 1) {
        const char *v = env + i;
        size_t vl = strnlen(v, len - i);

        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            size_t nl = strlen(names[k]);
            if (vl == nl + jl && strncmp(v, names[k], nl) == 0 && memcmp(v + nl, job, jl) == 0)
                return true;
        }
    }
    return false;
}

static bool job_matches(pid_t pid, const char *job)
{
    char *env = malloc(ENVIRON_MAX);
    ssize_t n;
    bool yes;

    if (!env)
        return false;
    n = procfs_read(pid, "environ", env, ENVIRON_MAX);
    yes = n > 0 && findproc_env_names_job(env, (size_t)n, job);
    free(env);
    return yes;
}

size_t findproc(struct proc_query *q, pid_t *out, size_t cap)
{
    pid_t skip[ANCESTORS_MAX + 1];
    size_t n_skip = 0, n = 0;
    DIR *d = opendir("/proc");
    struct dirent *de;

    skip[n_skip++] = getpid();
    for (pid_t p = q->asker; p > 1 && n_skip < ANCESTORS_MAX + 1; p = parent_of(p))
        skip[n_skip++] = p;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        char *end, path[64], cmd[4096];
        long v = strtol(de->d_name, &end, 10);
        pid_t pid = (pid_t)v;
        struct stat st;
        bool skipped = false;

        if (*end || v <= 0)
            continue;
        if (q->until_ns && mono_ns() > q->until_ns) {
            q->cut = true;
            break;
        }
        for (size_t i = 0; i < n_skip; i++)
            skipped |= skip[i] == pid;
        snprintf(path, sizeof(path), "/proc/%d", (int)pid);
        if (skipped || stat(path, &st) < 0 || (!q->all_users && st.st_uid != q->uid))
            continue;
        if (q->cmdline) {
            procfs_cmdline(pid, cmd, sizeof(cmd));
            if (!*cmd || regexec(q->cmdline, cmd, 0, NULL, 0) != 0)
                continue;
        }
        if (q->job && !job_matches(pid, q->job))
            continue;
        if (n < cap)
            out[n] = pid;
        n++;
    }
    closedir(d);
    /* readdir's order is the kernel's; callers and users read pids in order */
    for (size_t i = 1; i < (n < cap ? n : cap); i++)
        for (size_t k = i; k > 0 && out[k - 1] > out[k]; k--) {
            pid_t t = out[k];
            out[k] = out[k - 1];
            out[k - 1] = t;
        }
    return n;
}
