/* procmaps.c - /proc/PID/maps parsing; see procmaps.h. */
#define _GNU_SOURCE
#include "procmaps.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DELETED_SUFFIX " (deleted)"

static int parse_line(char *line, struct procmap *m)
{
    uint64_t start, end, offset, inode;
    char perms[8];
    int path_at = 0;
    char *path;
    size_t len;

    if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*x:%*x %" SCNu64 " %n", &start, &end,
               perms, &offset, &inode, &path_at) < 5)
        return -EINVAL;
    path = path_at > 0 ? line + path_at : "";
    len = strcspn(path, "\n");
    path[len] = '\0';
    if (len > strlen(DELETED_SUFFIX) &&
        strcmp(path + len - strlen(DELETED_SUFFIX), DELETED_SUFFIX) == 0)
        path[len - strlen(DELETED_SUFFIX)] = '\0';
    m->path = strdup(path);
    if (!m->path)
        return -ENOMEM;
    m->start = start;
    m->end = end;
    m->offset = offset;
    m->inode = inode;
    snprintf(m->perms, sizeof(m->perms), "%.4s", perms);
    return 0;
}

int procmaps_read(pid_t pid, struct procmaps *ret_maps)
{
    struct procmaps pm = {0};
    size_t cap = 0;
    char fname[64], *line = NULL;
    size_t line_cap = 0;
    FILE *f;
    int r = 0;

    snprintf(fname, sizeof(fname), "/proc/%d/maps", (int)pid);
    f = fopen(fname, "re");
    if (!f)
        return -errno;
    while (getline(&line, &line_cap, f) > 0) {
        if (pm.n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            struct procmap *nm = realloc(pm.maps, ncap * sizeof(*nm));
            if (!nm) {
                r = -ENOMEM;
                break;
            }
            pm.maps = nm;
            cap = ncap;
        }
        r = parse_line(line, &pm.maps[pm.n]);
        if (r < 0)
            break;
        pm.n++;
    }
    if (r == 0 && ferror(f))
        r = -EIO;
    free(line);
    fclose(f);
    if (r == 0 && pm.n == 0)
        r = -ESRCH; /* a zombie or a kernel thread: nothing mapped */
    if (r < 0) {
        procmaps_free(&pm);
        return r;
    }
    *ret_maps = pm;
    return 0;
}

void procmaps_free(struct procmaps *pm)
{
    if (!pm)
        return;
    for (size_t i = 0; i < pm->n; i++)
        free(pm->maps[i].path);
    free(pm->maps);
    pm->maps = NULL;
    pm->n = 0;
}

uint64_t procmaps__addr_of_offset(const struct procmaps *pm, const char *path, uint64_t file_offset)
{
    for (size_t i = 0; i < pm->n; i++) {
        const struct procmap *m = &pm->maps[i];
        if (strcmp(m->path, path) != 0)
            continue;
        if (file_offset >= m->offset && file_offset < m->offset + (m->end - m->start))
            return m->start + (file_offset - m->offset);
    }
    return 0;
}

bool procmaps_schedstat(const char *text, uint64_t ret[3])
{
    const char *p = text;

    for (int i = 0; i < 3; i++) {
        char *end;
        while (*p == ' ')
            p++;
        if (*p < '0' || *p > '9')
            return false;
        errno = 0;
        ret[i] = strtoull(p, &end, 10);
        if (errno)
            return false;
        p = end;
    }
    return true;
}
