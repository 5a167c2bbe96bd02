/* catch.c - see catch.h. */
#define _GNU_SOURCE
#include "intarget/catch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "common/dump.h"
#include "common/procfs.h"
#include "intarget/debug.h"
#include "intarget/eval.h"
#include "log.h"
#include "store/records.h"

#define CATCH_TIMEOUT_MS 10000
#define EVENT_READ_MS 3000 /* a whole event, once its first byte came */

extern const char catch_py[]; /* catch.py, embedded at build time */

/* One caught target: the stub's end of the channel and what reads the target at a signal. */
struct channel {
    int fd;
    pid_t pid;
    uid_t uid;
    int64_t target_id;
    struct dump *dump; /* opened ahead (native stacks too when allowed); NULL: read afresh */
    /* after a fatal signal: the core file the kernel will write, if one, and the row */
    char core_path[PATH_MAX];
    int64_t crash_id, signal_s;
};

struct catcher {
    char *db_path;
    pthread_t thread;
    int wake_fd; /* eventfd: a channel came, or stop */
    pthread_mutex_t lock;
    struct channel incoming[16]; /* handed over by workers, taken by the thread */
    size_t n_incoming;
    bool stop;
    /* the thread's own: */
    struct channel *chans;
    size_t n_chans;
    atomic_uint_fast64_t exceptions, signals, lost, channels;
};

static void channel_close(struct channel *c)
{
    if (c->fd >= 0)
        close(c->fd);
    dump_free(c->dump);
    *c = (struct channel){.fd = -1};
}

/* ---- reading an event (the catch thread) ---- */

static int recv_within(int fd, void *buf, size_t len, int64_t deadline_ms)
{
    for (size_t got = 0; got < len;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int64_t left = deadline_ms - mono_ms();
        ssize_t n;

        if (left <= 0)
            return -ETIMEDOUT;
        if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
            return -errno;
        n = recv(fd, (char *)buf + got, len - got, MSG_DONTWAIT);
        if (n == 0)
            return -ECONNRESET;
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        got += n > 0 ? (size_t)n : 0;
    }
    return 0;
}

static void ack(const struct channel *c, uint32_t seq)
{
    if (send(c->fd, &seq, sizeof(seq), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(seq))
        log_msg(LOG_WARN, "pid %d: the catch's ack could not be sent: %s", (int)c->pid,
                strerror(errno));
}

static void store(struct catcher *ct, const struct crash_record *rec, int64_t *ret_id)
{
    struct errbuf err;

    if (records_crash(ct->db_path, rec, ret_id, &err) < 0) {
        atomic_fetch_add(&ct->lost, 1);
        log_msg(LOG_ERR, "pid %d: %s", (int)rec->pid, err.msg);
        return;
    }
    atomic_fetch_add(rec->signal ? &ct->signals : &ct->exceptions, 1);
    log_msg(LOG_INFO, "pid %d: %s", (int)rec->pid, rec->message);
}

/* An uncaught exception: catch.py's JSON, checked, acked, stored. */
static int on_exception(struct catcher *ct, const struct channel *c,
                        const struct stub_catch_event *ev, const char *payload)
{
    json_error_t jerr;
    json_t *doc = json_loadb(payload, ev->len, 0, &jerr);
    const char *type = json_string_value(json_object_get(doc, "type"));
    const char *msg = json_string_value(json_object_get(doc, "message"));
    const char *thread = json_string_value(json_object_get(doc, "thread"));
    char message[512], *detail;
    struct crash_record rec = {.target_id = c->target_id,
                               .ts_ns = real_ns(),
                               .pid = c->pid,
                               .tid = ev->tid,
                               .kind = "exception"};

    ack(c, ev->seq); /* the thread goes on (into the hook before ours) as we write */
    if (!json_is_object(doc) || !type) {
        json_decref(doc);
        return -EPROTO;
    }
    snprintf(message, sizeof(message), "uncaught %.100s: %.300s (%s thread \"%.60s\")%s", type,
             msg ? msg : "", json_is_true(json_object_get(doc, "main")) ? "the main" : "in",
             thread ? thread : "?",
             json_is_true(json_object_get(doc, "postmortem"))
                 ? "; it waits in a post-mortem debugger: probectl debug"
                 : "");
    detail = json_dumps(doc, JSON_COMPACT);
    rec.message = message;
    rec.detail = detail;
    store(ct, &rec, NULL);
    free(detail);
    json_decref(doc);
    return 0;
}

/* The failing thread's stack starts in the stub's handler (poll, send_event, on_fatal) and the
 * kernel's signal trampoline: those frames go, so that it starts where the signal hit. */
static void trim_handler(json_t *stacks, pid_t tid)
{
    json_t *t, *frames, *f;
    size_t i, k, cut = 0;

    json_array_foreach(json_object_get(stacks, "threads"), i, t)
    {
        if (json_integer_value(json_object_get(t, "tid")) != tid)
            continue;
        frames = json_object_get(t, "frames");
        json_array_foreach(frames, k, f)
        {
            const char *fn = json_string_value(json_object_get(f, "function"));
            const char *object = json_string_value(json_object_get(f, "object"));
            if (fn && strcmp(fn, "on_fatal") == 0 && object && strstr(object, "/stub-")) {
                cut = k + 1;
                break;
            }
        }
        f = json_array_get(frames, cut);
        if (cut && f && !json_is_string(json_object_get(f, "file")) &&
            (!json_is_string(json_object_get(f, "function")) ||
             strcmp(json_string_value(json_object_get(f, "function")), "__restore_rt") == 0))
            cut++; /* the trampoline (__restore_rt, unnamed in a stripped libc) */
        while (cut-- > 0)
            json_array_remove(frames, 0);
    }
}

/* Whether @pid sees the files we see (its mount namespace is ours). */
static bool same_mount_ns(pid_t pid)
{
    char path[64];
    struct stat ours, theirs;

    snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
    return stat("/proc/self/ns/mnt", &ours) == 0 && stat(path, &theirs) == 0 &&
           ours.st_ino == theirs.st_ino && ours.st_dev == theirs.st_dev;
}

/*
 * Where the kernel will write the core of @c, if it writes one: core_pattern with what is
 * known of the process now (it waits in the handler), relative to its working directory;
 * "" when the pattern pipes cores to a program (systemd-coredump: coredumpctl has it) or
 * names what cannot be known ahead (%t, the time of the dump). Read on the host side: a
 * process in another mount namespace gets none.
 */
static void expect_core(struct channel *c)
{
    char pattern[256] = "", cwd[PATH_MAX], link[64], comm[32] = "", out[PATH_MAX];
    int uses_pid = 0;
    size_t o = 0;
    ssize_t n;
    FILE *f;

    c->core_path[0] = '\0';
    if ((f = fopen("/proc/sys/kernel/core_pattern", "re"))) {
        if (!fgets(pattern, sizeof(pattern), f))
            pattern[0] = '\0';
        fclose(f);
    }
    if ((f = fopen("/proc/sys/kernel/core_uses_pid", "re"))) {
        if (fscanf(f, "%d", &uses_pid) != 1)
            uses_pid = 0;
        fclose(f);
    }
    pattern[strcspn(pattern, "\n")] = '\0';
    snprintf(link, sizeof(link), "/proc/%d/cwd", (int)c->pid);
    n = readlink(link, cwd, sizeof(cwd) - 1);
    if (!pattern[0] || pattern[0] == '|' || n <= 0 || !same_mount_ns(c->pid))
        return;
    cwd[n] = '\0';
    if (procfs_read(c->pid, "comm", comm, sizeof(comm)) <= 0)
        comm[0] = '\0';
    comm[strcspn(comm, "\n")] = '\0';
    if (pattern[0] != '/')
        o = (size_t)snprintf(out, sizeof(out), "%s/", cwd);
    for (const char *p = pattern; *p && o < sizeof(out) - 32; p++) {
        if (*p != '%') {
            out[o++] = *p;
            continue;
        }
        switch (*++p) {
        case 'p':
        case 'P':
            o += (size_t)snprintf(out + o, sizeof(out) - o, "%d", (int)c->pid);
            break;
        case 'e':
            o += (size_t)snprintf(out + o, sizeof(out) - o, "%s", comm);
            break;
        case 'u':
            o += (size_t)snprintf(out + o, sizeof(out) - o, "%u", (unsigned)c->uid);
            break;
        case '%':
            out[o++] = '%';
            break;
        default: /* the time, the host name, the signal: not guessed */
            return;
        }
    }
    out[o] = '\0';
    if (uses_pid && !strstr(pattern, "%p"))
        snprintf(out + o, sizeof(out) - o, ".%d", (int)c->pid);
    snprintf(c->core_path, sizeof(c->core_path), "%s", out);
}

/* The channel closed after a fatal signal: the process has exited, and the kernel has written
 * its core (before closing its files). The row names it when it is there: a regular file of
 * the process's owner, written since the signal. */
static void find_core(struct catcher *ct, const struct channel *c)
{
    /* the path lies in the user's directories, which they can change at any instant: opened
     * once with no link followed anywhere on it (a directory swapped for a link to one of
     * root's is refused), then only the opened object is looked at */
    struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    struct stat st;
    struct errbuf err;
    int fd = -1;

    if (c->crash_id && c->core_path[0])
        fd = (int)syscall(SYS_openat2, AT_FDCWD, c->core_path, &how, sizeof(how));
    if (fd < 0)
        return;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != c->uid ||
        st.st_mtime < c->signal_s - 1) {
        close(fd);
        return;
    }
    close(fd);
    if (records_crash_core(ct->db_path, c->crash_id, c->core_path, &err) < 0)
        log_msg(LOG_WARN, "pid %d: %s", (int)c->pid, err.msg);
    else
        log_msg(LOG_INFO, "pid %d: its core is %s", (int)c->pid, c->core_path);
}

/* A fatal signal: every thread's stacks read while the failing one waits, then acked. */
static void on_signal(struct catcher *ct, struct channel *c, const struct stub_catch_event *ev)
{
    int64_t t0 = mono_ns();
    struct pyf_err e = {0};
    json_t *stacks = NULL, *detail;
    const char *abbrev = sigabbrev_np(ev->signo);
    char message[512], where[96], *text;
    int r = -EINVAL;

    if (c->dump && (r = dump_capture(c->dump, &e)) == 0)
        r = dump_render(c->dump, CATCH_LOCALS_DEPTH, &stacks, &e);
    if (r < 0) /* no dump opened, or native stacks refused (a debugger holds the target) */
        r = dump_json(c->pid, CATCH_LOCALS_DEPTH, false, &stacks, &e);
    expect_core(c);
    c->signal_s = real_ns() / 1000000000;
    ack(c, ev->seq);
    if (r == 0)
        trim_handler(stacks, ev->tid);
    detail =
        json_pack("{s:i, s:s, s:i, s:i, s:f}", "signal", ev->signo, "name", abbrev ? abbrev : "?",
                  "code", ev->code, "tid", ev->tid, "read_ms", (double)(mono_ns() - t0) / 1e6);
    if (detail) {
        char addr[24];
        snprintf(addr, sizeof(addr), "0x%llx", (unsigned long long)ev->addr);
        if (ev->code > 0)
            json_object_set_new(detail, "addr", json_string(addr));
        json_object_set_new(detail, r == 0 ? "stacks" : "error",
                            r == 0 ? stacks : json_string(e.msg));
        stacks = NULL;
    }
    json_decref(stacks);
    if (ev->code > 0) /* raised by the kernel at an instruction: si_addr means something */
        snprintf(where, sizeof(where), "code %d, address 0x%llx", ev->code,
                 (unsigned long long)ev->addr);
    else
        snprintf(where, sizeof(where), "sent by the process itself or a kill (code %d)", ev->code);
    snprintf(message, sizeof(message), "fatal signal %d (SIG%s) in thread %d, %s; %s", ev->signo,
             abbrev ? abbrev : "?", (int)ev->tid, where,
             r == 0 ? "every thread's stacks read as it failed" : "its stacks could not be read");
    text = detail ? json_dumps(detail, JSON_COMPACT) : NULL;
    store(ct,
          &(struct crash_record){.target_id = c->target_id,
                                 .ts_ns = real_ns(),
                                 .pid = c->pid,
                                 .tid = ev->tid,
                                 .kind = "fatal-signal",
                                 .signal = ev->signo,
                                 .message = message,
                                 .detail = text},
          &c->crash_id);
    free(text);
    json_decref(detail);
}

/* Reads and handles one event; <0: the channel is to be closed. */
static int on_readable(struct catcher *ct, struct channel *c)
{
    struct stub_catch_event ev;
    char *payload = NULL;
    int r = recv_within(c->fd, &ev, sizeof(ev), mono_ms() + EVENT_READ_MS);

    if (r == -ECONNRESET) { /* the stub closed it: `catch off`, or the process ended */
        find_core(ct, c);
        return r;
    }
    if (r == 0 && (ev.magic != STUB_MAGIC || ev.len > STUB_CATCH_PAYLOAD_MAX ||
                   (ev.kind != STUB_CATCH_EXCEPTION && ev.kind != STUB_CATCH_SIGNAL)))
        r = -EPROTO;
    if (r == 0 && (payload = malloc((size_t)ev.len + 1)) == NULL)
        r = -ENOMEM;
    if (r == 0)
        r = recv_within(c->fd, payload, ev.len, mono_ms() + EVENT_READ_MS);
    if (r == 0 && ev.kind == STUB_CATCH_EXCEPTION)
        r = on_exception(ct, c, &ev, payload);
    else if (r == 0)
        on_signal(ct, c, &ev);
    free(payload);
    if (r < 0) {
        atomic_fetch_add(&ct->lost, 1);
        log_msg(LOG_WARN, "pid %d: the catch's channel closed: %s", (int)c->pid,
                r == -EPROTO ? "it sent what is not an event" : strerror(-r));
    }
    return r;
}

/* ---- the thread ---- */

static void take_incoming(struct catcher *ct)
{
    pthread_mutex_lock(&ct->lock);
    for (size_t i = 0; i < ct->n_incoming; i++) {
        struct channel *in = &ct->incoming[i];
        size_t k = 0;
        while (k < ct->n_chans && ct->chans[k].pid != in->pid)
            k++;
        if (k < ct->n_chans)
            channel_close(&ct->chans[k]); /* caught again: the new channel replaces it */
        else
            ct->n_chans++;
        ct->chans[k] = *in;
    }
    ct->n_incoming = 0;
    pthread_mutex_unlock(&ct->lock);
    atomic_store(&ct->channels, ct->n_chans);
}

static void *run(void *arg)
{
    struct catcher *ct = arg;
    struct pollfd *p = calloc(CATCH_CHANNELS_MAX + 1, sizeof(*p));

    while (p) {
        uint64_t n;
        bool stop;

        pthread_mutex_lock(&ct->lock);
        stop = ct->stop;
        pthread_mutex_unlock(&ct->lock);
        if (stop)
            break;
        take_incoming(ct);
        p[0] = (struct pollfd){.fd = ct->wake_fd, .events = POLLIN};
        for (size_t i = 0; i < ct->n_chans; i++)
            p[i + 1] = (struct pollfd){.fd = ct->chans[i].fd, .events = POLLIN};
        if (poll(p, ct->n_chans + 1, -1) < 0)
            continue;
        if ((p[0].revents & POLLIN) && read(ct->wake_fd, &n, sizeof(n)) < 0)
            continue;
        for (size_t i = ct->n_chans; i-- > 0;) {
            if (!p[i + 1].revents || on_readable(ct, &ct->chans[i]) == 0)
                continue;
            channel_close(&ct->chans[i]);
            ct->chans[i] = ct->chans[--ct->n_chans];
        }
        atomic_store(&ct->channels, ct->n_chans);
    }
    free(p);
    return NULL;
}

int catcher_start(const char *db_path, struct catcher **ret, struct errbuf *err)
{
    struct catcher *ct = calloc(1, sizeof(*ct));
    int r = 0;

    if (!ct || !(ct->db_path = strdup(db_path)) ||
        !(ct->chans = calloc(CATCH_CHANNELS_MAX, sizeof(*ct->chans)))) {
        if (ct)
            free(ct->db_path);
        free(ct);
        return errbuf_set(err, -ENOMEM, "the catch thread: out of memory");
    }
    pthread_mutex_init(&ct->lock, NULL);
    ct->wake_fd = eventfd(0, EFD_CLOEXEC);
    if (ct->wake_fd < 0 || (r = pthread_create(&ct->thread, NULL, run, ct)) != 0) {
        r = ct->wake_fd < 0 ? -errno : -r;
        if (ct->wake_fd >= 0)
            close(ct->wake_fd);
        free(ct->chans);
        free(ct->db_path);
        free(ct);
        return errbuf_set(err, r, "starting the catch thread: %s", strerror(-r));
    }
    *ret = ct;
    return 0;
}

static void wake(struct catcher *ct)
{
    uint64_t one = 1;

    if (write(ct->wake_fd, &one, sizeof(one)) < 0)
        log_errno(LOG_WARN, -errno, "waking the catch thread");
}

void catcher_stop(struct catcher *ct)
{
    if (!ct)
        return;
    pthread_mutex_lock(&ct->lock);
    ct->stop = true;
    pthread_mutex_unlock(&ct->lock);
    wake(ct);
    pthread_join(ct->thread, NULL);
    take_incoming(ct);
    for (size_t i = 0; i < ct->n_chans; i++)
        channel_close(&ct->chans[i]);
    close(ct->wake_fd);
    pthread_mutex_destroy(&ct->lock);
    free(ct->chans);
    free(ct->db_path);
    free(ct);
}

void catcher__counts(struct catcher *ct, struct catch_counts *ret)
{
    *ret = (struct catch_counts){.exceptions = atomic_load(&ct->exceptions),
                                 .signals = atomic_load(&ct->signals),
                                 .lost = atomic_load(&ct->lost),
                                 .channels = atomic_load(&ct->channels)};
}

/* Hands @c over to the thread (which then owns it); -EMFILE when too many are caught, -EAGAIN
 * when too many wait to be taken. */
static int catcher__add(struct catcher *ct, struct channel *c, struct errbuf *err)
{
    int r = 0;

    pthread_mutex_lock(&ct->lock);
    if (atomic_load(&ct->channels) + ct->n_incoming >= CATCH_CHANNELS_MAX)
        r = errbuf_set(err, -EMFILE, "pid %d: %d processes are caught already (the limit)",
                       (int)c->pid, CATCH_CHANNELS_MAX);
    else if (ct->n_incoming >= sizeof(ct->incoming) / sizeof(ct->incoming[0]))
        r = errbuf_set(err, -EAGAIN, "pid %d: too many catches at once; try again", (int)c->pid);
    else
        ct->incoming[ct->n_incoming++] = *c;
    pthread_mutex_unlock(&ct->lock);
    if (r == 0)
        wake(ct);
    return r;
}

/* ---- on and off (a worker) ---- */

/* The Python run in the target: loads catch.py as the module _probed_catch when it is
 * missing, then prints what its command() returns. */
static char *script(const struct catch_request *rq)
{
    char *code = NULL, *hex = eval_hex(catch_py);

    if (!hex)
        return NULL;
    if (asprintf(&code,
                 "import sys as _sys\n"
                 "_mod = _sys.modules.get('_probed_catch')\n"
                 "if _mod is None and %d:\n"
                 "    import types as _types\n"
                 "    _mod = _types.ModuleType('_probed_catch')\n"
                 "    exec(compile(bytes.fromhex('%s').decode(), '<probed catch>', 'exec'),"
                 " _mod.__dict__)\n"
                 "    _sys.modules['_probed_catch'] = _mod\n"
                 "print(_mod.command({'action': '%s', 'signals': %s, 'postmortem': %s}) if _mod"
                 " is not None else '{\"on\": false, \"signals\": 0, \"channel\": false}')\n",
                 rq->on, rq->on ? hex : "", rq->on ? "on" : "off", rq->signals ? "True" : "False",
                 rq->postmortem ? "True" : "False") < 0)
        code = NULL;
    free(hex);
    return code;
}

static void remember(const char *db_path, const struct catch_request *rq)
{
    struct errbuf err;

    if (records_catching(db_path, rq->target_id, rq->on, rq->signals, &err) < 0)
        log_msg(LOG_WARN, "recording the catch of target %lld: %s", (long long)rq->target_id,
                err.msg);
}

/* Opens the channel and hands it to the catch thread. */
static int open_channel(struct stubctl *sc, struct catcher *ct, const struct catch_request *rq,
                        struct errbuf *err)
{
    struct channel c = {.fd = -1, .pid = rq->pid, .target_id = rq->target_id};
    char proc[32];
    struct stat st;
    struct stub_call call = {.kind = STUB_CATCH_LISTEN,
                             .code = "",
                             .timeout_ms = CATCH_TIMEOUT_MS,
                             .may_inject = false,
                             .ret_fd = &c.fd};
    struct stub_result res;
    struct pyf_err e = {0};
    int r = stubctl__call(sc, &rq->grant, &call, &res, err);

    if (r == 0 && c.fd < 0)
        r = errbuf_set(err, -EPROTO, "pid %d: the stub did not open the catch's channel: %s",
                       (int)rq->pid,
                       res.timed_out ? "no reply"
                       : res.text    ? res.text
                                     : "?");
    free(res.text);
    if (r < 0)
        return r;
    /* opened now so that a signal's read is quick: native stacks where ptrace is allowed */
    if (dump_open(rq->pid, true, &c.dump, &e) == 0)
        dump_unwind_held(c.dump); /* the failing thread's handler runs on an alternate stack */
    else if (dump_open(rq->pid, false, &c.dump, &e) < 0) {
        log_msg(LOG_WARN, "pid %d: the catch reads stacks afresh at a signal: %s", (int)rq->pid,
                e.msg);
        c.dump = NULL;
    }
    snprintf(proc, sizeof(proc), "/proc/%d", (int)rq->pid);
    c.uid = stat(proc, &st) == 0 ? st.st_uid : (uid_t)-1; /* its cores are its owner's */
    r = catcher__add(ct, &c, err);
    if (r < 0)
        channel_close(&c);
    return r;
}

int catch_run(struct stubctl *sc, struct catcher *ct, const char *db_path,
              const struct catch_request *rq, json_t **ret_body, struct errbuf *err)
{
    struct eval_request ev = {
        .pid = rq->pid,
        .grant = rq->grant,
        .uid = rq->uid,
        .kind = STUB_RUN,
        .timeout_ms = CATCH_TIMEOUT_MS,
        .mode = "catch",
        .audit_code = !rq->on          ? "catch off"
                      : rq->postmortem ? (rq->signals ? "catch on --postmortem"
                                                      : "catch on --postmortem --no-signals")
                      : rq->signals    ? "catch on"
                                       : "catch on --no-signals"};
    json_t *body = NULL;
    char *code = NULL;
    int r = 0;

    if (rq->resume) {
        r = open_channel(sc, ct, rq, err);
        if (r == 0)
            *ret_body = json_pack("{s:b, s:b}", "on", true, "channel", true);
        return r;
    }
    if (rq->on && rq->postmortem) { /* the debugger the failing thread will wait in */
        struct debug_request load = {
            .pid = rq->pid, .grant = rq->grant, .uid = rq->uid, .action = DEBUG_LOAD};
        json_t *state = NULL;
        if ((r = debug_run(sc, db_path, &load, &state, err)) < 0)
            return r;
        json_decref(state);
    }
    if (!(code = script(rq)))
        return errbuf_set(err, -ENOMEM, "out of memory");
    ev.code = code;
    r = eval_json(sc, db_path, &ev, "the catch", &body, err);
    free(code);
    if (r == 0 && rq->on)
        r = open_channel(sc, ct, rq, err);
    if (r == 0 && rq->on)
        json_object_set_new(body, "channel", json_true());
    if (r == 0 || !rq->on)
        remember(db_path, rq);
    if (r < 0) {
        json_decref(body);
        return r;
    }
    *ret_body = body;
    return 0;
}
