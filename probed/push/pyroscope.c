/* pyroscope.c - see pyroscope.h. */
#define _GNU_SOURCE
#include "push/pyroscope.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "query/flame.h"
#include "query/pprof.h"
#include "query/query.h"

#define NS 1000000000LL

/* The slot of target @id (a new one from @from_s when unseen); NULL when full. */
static struct push_slot *slot_of(struct pusher *p, int64_t id, int64_t from_s)
{
    for (size_t i = 0; i < p->n_slots; i++)
        if (p->slots[i].target_id == id)
            return &p->slots[i];
    if (p->n_slots >= TARGETS_MAX)
        return NULL;
    p->slots[p->n_slots] = (struct push_slot){.target_id = id, .from_s = from_s};
    return &p->slots[p->n_slots++];
}

static void forget_slot(struct pusher *p, struct push_slot *s)
{
    *s = p->slots[--p->n_slots];
}

static void set_error(struct pusher *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(struct pusher *p, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&p->bg.lock);
    va_start(ap, fmt);
    vsnprintf(p->last_error, sizeof(p->last_error), fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&p->bg.lock);
}

/* The script a command line runs ("train.py" of "python3 -u train.py"), else its program. */
static void job_of(const char *cmdline, char *out, size_t len)
{
    char words[2][256] = {"", ""};
    const char *w, *base;
    int n = sscanf(cmdline, "%255s %255s", words[0], words[1]);
    bool python =
        n >= 1 && strstr((base = strrchr(words[0], '/')) ? base + 1 : words[0], "python") != NULL;

    w = python && n == 2 && words[1][0] != '-' ? words[1] : words[0];
    base = strrchr(w, '/');
    snprintf(out, len, "%.*s", (int)(len - 1), base ? base + 1 : w);
    /* a label value: what Pyroscope's name syntax takes ({k=v,...}) */
    for (char *c = out; *c; c++)
        if (*c == ',' || *c == '{' || *c == '}' || *c == '=' || *c == '"')
            *c = '_';
    if (!*out)
        snprintf(out, len, "python");
}

/* The samples of @info's process in [@from_s, @until_s) as pprof; NULL with *@n 0 when none. */
static uint8_t *profile_of(struct pusher *p, const struct target_info *info, int64_t from_s,
                           int64_t until_s, size_t *len, int64_t *n)
{
    struct flame_request req = {.pid = info->pid,
                                .filter = {.since_ns = from_s * NS, .until_ns = until_s * NS},
                                .by_thread = true};
    struct query_scope scope = {.root = true};
    struct query_limits lim = {.time_ms = 10000, .max_rows = 1000000};
    struct pprof_meta meta = {.pid = info->pid, .rank = info->rank};
    struct flame_profile *prof = NULL;
    char *sql = flame_sql(&req), binary[256];
    struct errbuf err = {0};
    json_t *body = NULL;
    uint8_t *out = NULL;

    *n = 0;
    snprintf(binary, sizeof(binary), "%.*s", (int)strcspn(info->cmdline, " "), info->cmdline);
    meta.binary = binary;
    if (!sql || query_run(p->db_path, &scope, &lim, sql, &body, &err) < 0) {
        set_error(p, "reading pid %d's samples: %s", (int)info->pid,
                  sql ? err.msg : "out of memory");
        goto out;
    }
    if (json_array_size(json_object_get(body, "rows")) == 0 ||
        flame_profile_from_rows(json_object_get(body, "rows"), &prof) < 0)
        goto out;
    *n = prof->total;
    out = pprof_of(prof, NS / (info->rate_hz ? info->rate_hz : 100), from_s * NS, &meta, len);
out:
    flame_profile_free(prof);
    json_decref(body);
    free(sql);
    return out;
}

/* POSTs one window's profile; 0 on a 2xx answer, else -1 (said in last_error). */
static int post(struct pusher *p, CURL *curl, const char *url, const char *name, int64_t from_s,
                int64_t until_s, uint32_t rate_hz, const uint8_t *pb, size_t len)
{
    char *escaped = curl_easy_escape(curl, name, 0), *full = NULL;
    curl_mime *mime = curl_mime_init(curl);
    curl_mimepart *part = mime ? curl_mime_addpart(mime) : NULL;
    long status = 0;
    CURLcode rc;
    int r = -1;

    if (!escaped || !part ||
        asprintf(&full,
                 "%s%singest?name=%s&from=%lld&until=%lld&format=pprof&sampleRate=%u"
                 "&spyName=probed",
                 url, url[strlen(url) - 1] == '/' ? "" : "/", escaped, (long long)from_s,
                 (long long)until_s, rate_hz ? rate_hz : 100) < 0) {
        full = NULL;
        set_error(p, "out of memory");
        goto out;
    }
    curl_mime_name(part, "profile");
    curl_mime_filename(part, "profile.pprof");
    curl_mime_type(part, "application/octet-stream");
    curl_mime_data(part, (const char *)pb, len);
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, full);
    curl_easy_setopt(curl, CURLOPT_MIMEPOST, mime);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)PUSH_TIMEOUT_S);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "probed/" PROBED_VERSION);
    rc = curl_easy_perform(curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK)
        set_error(p, "POST %s/ingest: %s", url, curl_easy_strerror(rc));
    else if (status < 200 || status > 299)
        set_error(p, "POST %s/ingest: HTTP %ld", url, status);
    else
        r = 0;
out:
    curl_mime_free(mime);
    curl_free(escaped);
    free(full);
    return r;
}

/* One pass: each target's window since its last push, pushed. */
static void push_all(struct pusher *p, CURL *curl, const char *url, const char *app)
{
    struct target_key *keys = malloc(TARGETS_MAX * sizeof(*keys));
    struct targets_filter all = {.all_users = true};
    int64_t stored_s = atomic_load(&p->writer->stored_to_ns) / NS;
    int64_t until_s = real_ns() / NS - PUSH_LAG_S;
    int64_t interval_s = config_num(p->config, CFG_PYROSCOPE_INTERVAL) / NS;
    char host[128] = "localhost";
    size_t n;

    if (until_s > stored_s) /* the writer is behind: its seconds are not whole yet */
        until_s = stored_s;
    if (!keys)
        return;
    gethostname(host, sizeof(host) - 1);
    n = targets__keys(p->reg, &all, keys, TARGETS_MAX);
    /* targets no longer listed: forgotten */
    for (size_t i = 0; i < p->n_slots;) {
        bool listed = false;

        for (size_t k = 0; k < n && !listed; k++)
            listed = keys[k].id == p->slots[i].target_id;
        if (listed)
            i++;
        else
            forget_slot(p, &p->slots[i]);
    }
    for (size_t k = 0; k < n; k++) {
        struct targets_filter one = {.all_users = true, .pid = keys[k].pid};
        struct push_slot *s = slot_of(p, keys[k].id, until_s - (interval_s > 0 ? interval_s : 1));
        struct target_info infos[4], *info = NULL;
        char job[128], name[512];
        int64_t samples = 0;
        uint8_t *pb;
        size_t len = 0;

        if (!s || s->from_s >= until_s)
            continue;
        if (keys[k].ended_ns && keys[k].ended_ns / NS < s->from_s)
            continue;                               /* ended, every second of it pushed */
        if (until_s - s->from_s > PUSH_BACKLOG_S) { /* a long outage: the oldest seconds go */
            atomic_fetch_add(&p->dropped_s, (uint_fast64_t)(until_s - PUSH_BACKLOG_S - s->from_s));
            s->from_s = until_s - PUSH_BACKLOG_S;
        }
        for (size_t c = 0, m = targets__copy(p->reg, &one, infos, 4); c < m && c < 4; c++)
            if (infos[c].id == keys[k].id)
                info = &infos[c];
        if (!info)
            continue;
        pb = profile_of(p, info, s->from_s, until_s, &len, &samples);
        if (!pb) {
            if (samples == 0) /* nothing sampled in the window: nothing to send */
                s->from_s = until_s;
            continue;
        }
        job_of(info->cmdline, job, sizeof(job));
        if (info->rank >= 0)
            snprintf(name, sizeof(name), "%s.cpu{job=%s,host=%s,pid=%d,rank=%d}", app, job, host,
                     (int)info->pid, info->rank);
        else
            snprintf(name, sizeof(name), "%s.cpu{job=%s,host=%s,pid=%d}", app, job, host,
                     (int)info->pid);
        if (post(p, curl, url, name, s->from_s, until_s, info->rate_hz, pb, len) == 0) {
            s->from_s = until_s;
            atomic_fetch_add(&p->pushes, 1);
            atomic_fetch_add(&p->samples, (uint_fast64_t)samples);
        } else { /* kept: the next pass sends this window with its own */
            atomic_fetch_add(&p->failures, 1);
        }
        free(pb);
    }
    free(keys);
}

static void *pusher_main(void *arg)
{
    struct pusher *p = arg;
    CURL *curl = curl_easy_init();
    char url[CONFIG_VALUE_MAX], app[CONFIG_VALUE_MAX];
    bool logged = false;

    for (;;) {
        int64_t interval = config_num(p->config, CFG_PYROSCOPE_INTERVAL);

        pthread_mutex_lock(&p->bg.lock);
        if (!p->bg.stopping)
            bgthread_wait_until(&p->bg, mono_ns() + (interval > 0 ? interval : NS));
        if (p->bg.stopping) {
            pthread_mutex_unlock(&p->bg.lock);
            break;
        }
        pthread_mutex_unlock(&p->bg.lock);
        config_text(p->config, CFG_PYROSCOPE_URL, url, sizeof(url));
        config_text(p->config, CFG_PYROSCOPE_APP, app, sizeof(app));
        if (!url[0]) {
            p->n_slots = 0; /* off: a later url starts from then */
            logged = false;
            continue;
        }
        if (!logged)
            log_msg(LOG_INFO, "pushing profiles to %s/ingest every %lld s", url,
                    (long long)(interval / NS));
        logged = true;
        if (curl)
            push_all(p, curl, url, app);
    }
    curl_easy_cleanup(curl);
    return NULL;
}

int pusher_start(struct pusher *p)
{
    /* from main, before the thread: libcurl's global set-up is not thread-safe */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return -ENOMEM;
    return bgthread_start(&p->bg, "probed-push", pusher_main, p);
}

void pusher_stop(struct pusher *p)
{
    if (!p->bg.started)
        return;
    bgthread_stop(&p->bg);
    curl_global_cleanup();
}

json_t *pusher_json(struct pusher *p)
{
    char url[CONFIG_VALUE_MAX], error[sizeof(p->last_error)];

    config_text(p->config, CFG_PYROSCOPE_URL, url, sizeof(url));
    pthread_mutex_lock(&p->bg.lock);
    memcpy(error, p->last_error, sizeof(error));
    pthread_mutex_unlock(&p->bg.lock);
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:s}", "url", url, "pushes",
                     (json_int_t)atomic_load(&p->pushes), "failures",
                     (json_int_t)atomic_load(&p->failures), "dropped_seconds",
                     (json_int_t)atomic_load(&p->dropped_s), "samples",
                     (json_int_t)atomic_load(&p->samples), "last_error", error);
}
