/* follow.c - see follow.h. */
#define _GNU_SOURCE
#include "follow.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

/* Appends the direct children of every thread of @pid; returns the new count. */
static size_t children_of(pid_t pid, pid_t *out, size_t n, size_t cap)
{
    char path[64];
    struct dirent *d;
    DIR *dir;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    dir = opendir(path);
    if (!dir)
        return n;
    while (n < cap && (d = readdir(dir)) != NULL) {
        char file[320];
        FILE *f;
        int child;

        if (d->d_name[0] < '0' || d->d_name[0] > '9')
            continue;
        snprintf(file, sizeof(file), "/proc/%d/task/%s/children", (int)pid, d->d_name);
        f = fopen(file, "re");
        if (!f)
            continue;
        while (n < cap && fscanf(f, "%d", &child) == 1)
            out[n++] = child;
        fclose(f);
    }
    closedir(dir);
    return n;
}

size_t follow_descendants(pid_t pid, pid_t *out, size_t cap)
{
    size_t n = children_of(pid, out, 0, cap), level_start = 0;

    /* Breadth first: each level's children are appended after it. */
    for (int depth = 1; depth < FOLLOW_DEPTH && level_start < n; depth++) {
        size_t level_end = n;
        for (size_t i = level_start; i < level_end; i++)
            n = children_of(out[i], out, n, cap);
        level_start = level_end;
    }
    return n;
}
