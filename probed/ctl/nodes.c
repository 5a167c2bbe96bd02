/* nodes.c - see nodes.h. */
#define _GNU_SOURCE
#include "ctl/nodes.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 255

bool nodes_host_name_ok(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n > NAME_MAX_LEN || name[0] == '-' || name[0] == '.')
        return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(".-_:@", *p))
            return false;
    return true;
}

static int add_name(struct nodes *out, const char *name, char *err, size_t err_len)
{
    char **grown;

    if (!nodes_host_name_ok(name)) {
        snprintf(err, err_len,
                 "'%.300s' is not a host name (letters, digits, '.', '-', '_', ':', '@'; not"
                 " starting with '-')",
                 name);
        return -EINVAL;
    }

    for (size_t i = 0; i < out->n; i++)
        if (strcmp(out->names[i], name) == 0)
            return 0;
    if (out->n == NODES_MAX) {
        snprintf(err, err_len, "more than %d nodes", NODES_MAX);
        return -E2BIG;
    }
    grown = realloc(out->names, (out->n + 1) * sizeof(*grown));
    if (!grown || !(grown[out->n] = strdup(name))) {
        if (grown)
            out->names = grown;
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    out->names = grown;
    out->n++;
    return 0;
}

/* Expands one item (no top-level comma): @done is the name so far, @rest what follows. */
static int expand_item(const char *done, const char *rest, struct nodes *out, char *err,
                       size_t err_len)
{
    const char *open = strchr(rest, '['), *close;
    char name[NAME_MAX_LEN + 1];

    if (!open) {
        if (snprintf(name, sizeof(name), "%s%s", done, rest) >= (int)sizeof(name)) {
            snprintf(err, err_len, "a node name is over %d bytes", NAME_MAX_LEN);
            return -EINVAL;
        }
        if (strchr(name, ']') || !*name) {
            snprintf(err, err_len, "'%s': not a node name", name);
            return -EINVAL;
        }
        return add_name(out, name, err, err_len);
    }
    close = strchr(open, ']');
    if (!close || close == open + 1) {
        snprintf(err, err_len, "'%s': a '[' without its range and ']'", rest);
        return -EINVAL;
    }
    /* each comma-separated range inside the brackets */
    for (const char *r = open + 1; r < close;) {
        const char *comma = memchr(r, ',', (size_t)(close - r)), *end = comma ? comma : close;
        const char *dash = memchr(r, '-', (size_t)(end - r));
        char *stop;
        unsigned long lo, hi;
        int width = (int)((dash ? dash : end) - r);

        if (!isdigit((unsigned char)*r)) {
            snprintf(err, err_len, "'%.*s': not a range of numbers", (int)(close - open + 1), open);
            return -EINVAL;
        }
        lo = strtoul(r, &stop, 10);
        hi = dash ? strtoul(dash + 1, &stop, 10) : lo;
        if (stop != end || hi < lo || (dash && !isdigit((unsigned char)dash[1]))) {
            snprintf(err, err_len, "'%.*s': not a range of numbers", (int)(close - open + 1), open);
            return -EINVAL;
        }
        if (hi - lo >= NODES_MAX) {
            snprintf(err, err_len, "more than %d nodes", NODES_MAX);
            return -E2BIG;
        }
        for (unsigned long v = lo; v <= hi; v++) {
            char next[NAME_MAX_LEN + 1];
            int r2;
            if (snprintf(next, sizeof(next), "%s%.*s%0*lu", done, (int)(open - rest), rest, width,
                         v) >= (int)sizeof(next)) {
                snprintf(err, err_len, "a node name is over %d bytes", NAME_MAX_LEN);
                return -EINVAL;
            }
            if ((r2 = expand_item(next, close + 1, out, err, err_len)) < 0)
                return r2;
        }
        r = comma ? comma + 1 : close;
    }
    return 0;
}

int nodes_expand(const char *list, struct nodes *out, char *err, size_t err_len)
{
    const char *p = list;

    while (*p) {
        char item[1024];
        size_t len = 0;
        int depth = 0, r;

        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        for (; *p && (depth || (*p != ',' && !isspace((unsigned char)*p))); p++) {
            depth += *p == '[' ? 1 : *p == ']' ? -1 : 0;
            if (depth < 0 || depth > 1 || len + 1 >= sizeof(item)) {
                snprintf(err, err_len, "'%s': not a list of nodes", list);
                return -EINVAL;
            }
            item[len++] = *p;
        }
        if (depth) {
            snprintf(err, err_len, "'%s': a '[' is not closed", list);
            return -EINVAL;
        }
        item[len] = '\0';
        if (len && (r = expand_item("", item, out, err, err_len)) < 0)
            return r;
    }
    return 0;
}

static int read_hostfile(const char *path, struct nodes *out, char *err, size_t err_len)
{
    FILE *f = fopen(path, "re");
    char line[1024];
    int r = 0;

    if (!f) {
        r = -errno;
        snprintf(err, err_len, "the hostfile %s: %s", path, strerror(errno));
        return r;
    }
    while (r == 0 && fgets(line, sizeof(line), f)) {
        char *hash = strchr(line, '#'), *word;
        if (hash)
            *hash = '\0';
        word = strtok(line, " \t\r\n");
        if (word)
            r = nodes_expand(word, out, err, err_len);
    }
    fclose(f);
    return r;
}

int nodes_resolve(const char *hosts, const char *hostfile, struct nodes *out, char *err,
                  size_t err_len)
{
    const char *slurm = getenv("SLURM_JOB_NODELIST");
    int r;

    *out = (struct nodes){0};
    if (hosts) {
        out->source = "--hosts";
        r = nodes_expand(hosts, out, err, err_len);
    } else if (hostfile) {
        out->source = "--hostfile";
        r = read_hostfile(hostfile, out, err, err_len);
    } else if (slurm && *slurm) {
        out->source = "SLURM_JOB_NODELIST";
        r = nodes_expand(slurm, out, err, err_len);
    } else {
        snprintf(err, err_len, "no nodes: give --hosts, --hostfile, or run inside a Slurm job");
        return -ENOENT;
    }
    if (r == 0 && out->n == 0) {
        snprintf(err, err_len, "%s names no node", out->source);
        r = -EINVAL;
    }
    if (r < 0)
        nodes_free(out);
    return r;
}

void nodes_free(struct nodes *nodes)
{
    for (size_t i = 0; i < nodes->n; i++)
        free(nodes->names[i]);
    free(nodes->names);
    nodes->names = NULL;
    nodes->n = 0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void ranks_format(int *ranks, size_t n, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    qsort(ranks, n, sizeof(*ranks), cmp_int);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int w;
        while (j + 1 < n && (ranks[j + 1] == ranks[j] || ranks[j + 1] == ranks[j] + 1))
            j++;
        w = ranks[j] == ranks[i]
                ? snprintf(buf + len, size - len, "%s%d", len ? "," : "", ranks[i])
                : snprintf(buf + len, size - len, "%s%d-%d", len ? "," : "", ranks[i], ranks[j]);
        if (w < 0 || (size_t)w >= size - len) {
            if (size >= 4)
                snprintf(buf + (len + 4 < size ? len : size - 4), 4, "...");
            return;
        }
        len += (size_t)w;
        i = j + 1;
    }
}
