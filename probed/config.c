/* config.c - see config.h. */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "common/units.h"

enum kind { K_PATH, K_NAME, K_RATE, K_DURATION, K_SIZE, K_ADDRESS, K_CHOICE, K_URL, K_LABEL };

struct key_def {
    const char *name;
    enum kind kind;
    bool live;
    const char *def;
    int64_t min, max; /* numbers: accepted range, in the parsed unit (0 always allowed for
                         durations and sizes whose doc says 0 means off) */
    bool zero_ok;
    const char *doc;
};

#define NS 1000000000LL

static const struct key_def keys[CFG_N] = {
    [CFG_SOCKET] = {"socket", K_PATH, false, "/run/probed/probed.sock", 0, 0, false,
                    "the API socket probectl talks to"},
    [CFG_DATABASE] = {"database", K_PATH, false, "/var/lib/probed/probed.db", 0, 0, false,
                      "the SQLite database of timelines"},
    [CFG_GROUP] = {"group", K_NAME, false, "probed", 0, 0, false,
                   "group owning the socket: its members may use probectl"},
    [CFG_STUB] = {"stub", K_PATH, false, "", 0, 0, true,
                  "the library eval loads into targets (empty: next to probed, else the"
                  " installed one)"},
    [CFG_SAMPLE_RATE] = {"sample_rate", K_RATE, true, "100", 1, CONFIG_RATE_MAX_HZ, false,
                         "samples per second of an attach that does not ask for a rate; targets"
                         " attached at the default rate follow a change"},
    [CFG_RETENTION] = {"retention", K_DURATION, true, "7d", NS, 3650 * 86400 * NS, true,
                       "samples and memory rows older than this are deleted (0: keep)"},
    [CFG_MAX_DB_SIZE] = {"max_db_size", K_SIZE, true, "1G", 1 << 16, 1LL << 50, true,
                         "the oldest samples are deleted above this size (0: no limit)"},
    [CFG_QUERY_TIMEOUT] = {"query_timeout", K_DURATION, true, "10s", NS / 1000, 3600 * NS, false,
                           "queries running longer are interrupted"},
    [CFG_METRICS_ADDRESS] = {"metrics_address", K_ADDRESS, true, "127.0.0.1:9464", 0, 0, false,
                             "host:port serving Prometheus /metrics (off: not served)"},
    [CFG_MEMORY_INTERVAL] = {"memory_interval", K_DURATION, true, "1s", NS / 10, 3600 * NS, true,
                             "how often each target's RSS/PSS/USS and thread CPU are"
                             " recorded (0: not recorded)"},
    [CFG_ALLOCATION_INTERVAL] = {"allocation_interval", K_DURATION, true, "30s", NS, 3600 * NS,
                                 true,
                                 "how often a snapshot of where memory went is taken while"
                                 " allocation tracking is on (0: on request only)"},
    [CFG_METRICS_CMDLINE] = {"metrics_cmdline", K_CHOICE, true, "script", 0, 0, false,
                             "what the cmd label of /metrics shows: script (the program and its"
                             " script or module, never its arguments) or full (the whole"
                             " command line: any local user can read it)"},
    [CFG_WRITE_BACKLOG] = {"write_backlog", K_SIZE, true, "64M", 1 << 16, 1LL << 34, true,
                           "samples the database would not take (a full disk) are kept up to"
                           " this much memory and written when it takes them again; past it"
                           " they are lost and counted (0: none kept)"},
    [CFG_NVML] = {"nvml", K_PATH, false, "", 0, 0, true,
                  "NVIDIA's libnvidia-ml.so.1, which GPU readings come from (empty: the loader's"
                  " path, then the driver's usual folders; off: GPUs are not read)"},
    [CFG_PROBED_THREADS] = {"probed_threads", K_CHOICE, true, "hide", 0, 0, false,
                            "probed's own threads and code in a target (the stub's, loaded for"
                            " eval, the torch trace ...) in samples: hide (the job's truth) or"
                            " show (stored as the job's are, the threads named probed-stub and"
                            " the code's file <probed...>)"},
    [CFG_PYROSCOPE_URL] = {"pyroscope_url", K_URL, true, "", 0, 0, true,
                           "a Pyroscope server (http or https): each target's profile is pushed"
                           " to its /ingest every pyroscope_interval (empty: not pushed)"},
    [CFG_PYROSCOPE_INTERVAL] = {"pyroscope_interval", K_DURATION, true, "15s", NS, 3600 * NS, false,
                                "how often profiles are pushed to pyroscope_url"},
    [CFG_PYROSCOPE_APP] = {"pyroscope_app", K_LABEL, true, "python", 0, 0, false,
                           "the application name of the pushed profiles (APP.cpu{job=...,"
                           "host=...,pid=...,rank=...})"},
    [CFG_NCCL_CALLS] = {"nccl_calls", K_CHOICE, true, "off", 0, 0, false,
                        "each target's calls into NCCL (collectives, sends, receives), recorded"
                        " in comm_calls through uprobes on its libnccl, whoever issues them:"
                        " on, or off (no probe but on processes attached --nccl; each costs a"
                        " call about 10 us on this test VM: bench/nccl.py)"},
};

void config_init(struct config *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
    for (int k = 0; k < CFG_N; k++) {
        int64_t v = 0;
        config_check((enum config_key)k, keys[k].def, &v, NULL);
        snprintf(c->text[k], sizeof(c->text[k]), "%s", keys[k].def);
        atomic_store(&c->num[k], v);
    }
}

void config_destroy(struct config *c)
{
    pthread_mutex_destroy(&c->lock);
}

int config_key_of(const char *name)
{
    if (strncmp(name, "probed.", 7) == 0)
        name += 7;
    for (int k = 0; k < CFG_N; k++)
        if (strcmp(name, keys[k].name) == 0)
            return k;
    return -1;
}

const char *config_key_name(enum config_key k)
{
    return keys[k].name;
}

bool config_key_live(enum config_key k)
{
    return keys[k].live;
}

/* "host:port", "[v6]:port": syntax only; binding it is the listener's job. */
static int check_address(const char *v, struct errbuf *err)
{
    const char *colon = strrchr(v, ':');
    char *end;
    long port;

    if (strcmp(v, "off") == 0)
        return 0;
    if (!colon || colon == v)
        return errbuf_set(err, -EINVAL,
                          "metrics_address: '%s' is not host:port (e.g. 127.0.0.1:9464) or off", v);
    port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 1 || port > 65535)
        return errbuf_set(err, -EINVAL, "metrics_address: port '%s' is not 1..65535", colon + 1);
    return 0;
}

static int check_number(const struct key_def *d, const char *v, int64_t *num, struct errbuf *err)
{
    static const char *const example[] = {[K_RATE] = "an integer number of Hz, e.g. 100",
                                          [K_DURATION] = "a duration, e.g. 500ms, 30s, 5m, 7d",
                                          [K_SIZE] = "a size, e.g. 512M, 2G"};
    char *end;
    int64_t n;

    if (d->kind == K_RATE) {
        long long r = strtoll(v, &end, 10);
        n = *end || end == v ? -1 : r;
    } else {
        n = d->kind == K_DURATION ? units_duration_ns(v) : units_size_bytes(v);
    }
    if (n < 0)
        return errbuf_set(err, -EINVAL, "%s: '%s' is not %s", d->name, v, example[d->kind]);
    if (n == 0 && d->zero_ok) {
        *num = 0;
        return 0;
    }
    if (n < d->min || n > d->max) {
        if (d->kind == K_RATE)
            return errbuf_set(err, -EINVAL, "%s: %s Hz is outside 1.." CONFIG_RATE_MAX_TEXT,
                              d->name, v);
        return errbuf_set(err, -EINVAL, "%s: '%s' is %s (0 %s)", d->name, v,
                          n < d->min ? "too small" : "too large",
                          d->zero_ok ? "turns it off" : "is not allowed");
    }
    *num = n;
    return 0;
}

int config_check(enum config_key k, const char *value, int64_t *num, struct errbuf *err)
{
    const struct key_def *d = &keys[k];

    *num = 0;
    if (strlen(value) >= CONFIG_VALUE_MAX)
        return errbuf_set(err, -EINVAL, "%s: value longer than %d bytes", d->name,
                          CONFIG_VALUE_MAX - 1);
    for (const char *p = value; *p; p++)
        if ((unsigned char)*p < 0x20)
            return errbuf_set(err, -EINVAL, "%s: control character in the value", d->name);
    switch (d->kind) {
    case K_PATH:
        if ((!*value && d->zero_ok) || (k == CFG_NVML && strcmp(value, "off") == 0))
            return 0;
        if (value[0] != '/')
            return errbuf_set(err, -EINVAL, "%s: '%s' is not an absolute path", d->name, value);
        return 0;
    case K_NAME:
        if (!*value || strchr(value, ' ') || strchr(value, '/'))
            return errbuf_set(err, -EINVAL, "%s: '%s' is not a group name", d->name, value);
        return 0;
    case K_ADDRESS:
        return check_address(value, err);
    case K_URL: /* only http(s), and nothing a request line or a label could be split by */
        if (!*value)
            return 0;
        if ((strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0) ||
            strpbrk(value, " \"<>\\^`{|}") || strchr(value, '?') || strchr(value, '#'))
            return errbuf_set(err, -EINVAL,
                              "%s: '%s' is not an http:// or https:// URL (no query, no spaces)",
                              d->name, value);
        /* every user of probectl reads the settings: no password in them */
        if (memchr(strstr(value, "//") + 2, '@', strcspn(strstr(value, "//") + 2, "/")))
            return errbuf_set(err, -EINVAL,
                              "%s: no user:password@ in the URL (every probectl user reads the"
                              " settings)",
                              d->name);
        return 0;
    case K_LABEL:
        if (!*value || strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "0123456789._-") != strlen(value))
            return errbuf_set(err, -EINVAL, "%s: '%s' is not a name of letters, digits, . _ -",
                              d->name, value);
        return 0;
    case K_CHOICE: { /* two words: the first is 0, the second 1 */
        const char *one = k == CFG_PROBED_THREADS ? "hide" : k == CFG_NCCL_CALLS ? "off" : "script";
        const char *two = k == CFG_PROBED_THREADS ? "show" : k == CFG_NCCL_CALLS ? "on" : "full";
        if (strcmp(value, one) != 0 && strcmp(value, two) != 0)
            return errbuf_set(err, -EINVAL, "%s: '%s' is not %s or %s", d->name, value, one, two);
        *num = strcmp(value, two) == 0;
        return 0;
    }
    default:
        return check_number(d, value, num, err);
    }
}

int config_set(struct config *c, enum config_key k, const char *value, bool live, bool pin,
               struct errbuf *err)
{
    int64_t num;
    int r;

    if (live && !keys[k].live)
        return errbuf_set(err, -EINVAL,
                          "%s: changes only with a restart (set it in %s and restart probed)",
                          keys[k].name, CONFIG_DEFAULT_PATH);
    r = config_check(k, value, &num, err);
    if (r < 0)
        return r;
    pthread_mutex_lock(&c->lock);
    snprintf(c->text[k], sizeof(c->text[k]), "%s", value);
    atomic_store(&c->num[k], num);
    if (pin)
        c->pinned[k] = true;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* "  key = value  # comment" -> key, value (trimmed, in place). 0: blank; -1: malformed. */
static int split_line(char *line, char **key, char **value)
{
    char *eq, *end;

    line[strcspn(line, "#\r\n")] = '\0';
    while (*line == ' ' || *line == '\t')
        line++;
    if (!*line)
        return 0;
    eq = strchr(line, '=');
    if (!eq)
        return -1;
    *eq = '\0';
    *key = line;
    *value = eq + 1;
    for (end = eq; end > line && (end[-1] == ' ' || end[-1] == '\t');)
        *--end = '\0';
    while (**value == ' ' || **value == '\t')
        (*value)++;
    end = *value + strlen(*value);
    while (end > *value && (end[-1] == ' ' || end[-1] == '\t'))
        *--end = '\0';
    /* "quoted values" are allowed, for an empty one */
    if (end - *value >= 2 && (*value)[0] == '"' && end[-1] == '"') {
        end[-1] = '\0';
        (*value)++;
    }
    return 1;
}

/* Reads and checks every line of @f into @vals (NULL: not in the file). */
static int read_file(FILE *f, const char *path, char vals[CFG_N][CONFIG_VALUE_MAX], bool *seen,
                     struct errbuf *err)
{
    char line[1024], *key, *value;
    struct errbuf why;
    int lineno = 0;

    while (fgets(line, sizeof(line), f)) {
        int k, kind = split_line(line, &key, &value);
        int64_t num;

        lineno++;
        if (kind == 0)
            continue;
        if (kind < 0)
            return errbuf_set(err, -EINVAL, "%s:%d: expected key = value", path, lineno);
        k = config_key_of(key);
        if (k < 0)
            return errbuf_set(err, -EINVAL, "%s:%d: unknown key '%s'", path, lineno, key);
        if (config_check((enum config_key)k, value, &num, &why) < 0)
            return errbuf_set(err, -EINVAL, "%s:%d: %s", path, lineno, why.msg);
        snprintf(vals[k], CONFIG_VALUE_MAX, "%s", value);
        seen[k] = true;
    }
    if (ferror(f))
        return errbuf_set(err, -EIO, "reading %s: %s", path, strerror(errno));
    return 0;
}

int config_load(struct config *c, const char *path, bool must_exist, bool live,
                char *restart_needed, size_t rn_len, struct errbuf *err)
{
    char vals[CFG_N][CONFIG_VALUE_MAX];
    bool seen[CFG_N] = {0};
    FILE *f = fopen(path, "re");
    int r;

    if (restart_needed && rn_len)
        restart_needed[0] = '\0';
    if (!f) {
        if (errno == ENOENT && !must_exist)
            return 0;
        return errbuf_set(err, -errno, "opening %s: %s", path, strerror(errno));
    }
    r = read_file(f, path, vals, seen, err);
    fclose(f);
    if (r < 0)
        return r;
    /* A key taken out of the file goes back to its default on a reload. */
    for (int k = 0; k < CFG_N; k++) {
        char now[CONFIG_VALUE_MAX];
        const char *v = seen[k] ? vals[k] : keys[k].def;

        pthread_mutex_lock(&c->lock);
        snprintf(now, sizeof(now), "%s", c->text[k]);
        bool pinned = c->pinned[k];
        pthread_mutex_unlock(&c->lock);
        if (pinned || strcmp(now, v) == 0)
            continue;
        if (live && !keys[k].live) {
            if (restart_needed)
                snprintf(restart_needed + strlen(restart_needed), rn_len - strlen(restart_needed),
                         "%s%s", restart_needed[0] ? ", " : "", keys[k].name);
            continue;
        }
        config_set(c, (enum config_key)k, v, false, false, err); /* checked above */
    }
    pthread_mutex_lock(&c->lock);
    snprintf(c->path, sizeof(c->path), "%s", path);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int64_t config_num(struct config *c, enum config_key k)
{
    return atomic_load(&c->num[k]);
}

void config_text(struct config *c, enum config_key k, char *buf, size_t size)
{
    pthread_mutex_lock(&c->lock);
    snprintf(buf, size, "%s", c->text[k]);
    pthread_mutex_unlock(&c->lock);
}

json_t *config_json(struct config *c)
{
    json_t *list = json_array();

    pthread_mutex_lock(&c->lock);
    for (int k = 0; list && k < CFG_N; k++)
        json_array_append_new(list,
                              json_pack("{s:s, s:s, s:s, s:b, s:b, s:s}", "key", keys[k].name,
                                        "value", c->text[k], "default", keys[k].def, "live",
                                        keys[k].live, "pinned", c->pinned[k], "doc", keys[k].doc));
    pthread_mutex_unlock(&c->lock);
    return list;
}
