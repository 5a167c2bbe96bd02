/* exits.c - see exits.h. */
#define _GNU_SOURCE
#include "sample/exits.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "common/procfs.h"
#include "log.h"

#define PROC_PID_INIT_INO                                                                          \
    0xEFFFFFFCU /* the first pid namespace's inode (include/linux/proc_ns.h) */

/* An exit of a target, held until the kernel's lines about it are in. */
struct pending {
    int64_t target_id, ts_ns, due_ns; /* due: CLOCK_MONOTONIC */
    pid_t pid;
    int status; /* as waitpid() gives it */
};

/* A line of the kernel's log that names a process. */
struct kline {
    int64_t read_ns; /* CLOCK_MONOTONIC */
    pid_t pid;
    bool oom;
    char text[240];
};

struct exits {
    struct targets *reg;
    struct outbox *ob;
    int nl_fd, kmsg_fd, stop_fd;
    pthread_t thread;
    struct pending pending[EXITS_PENDING_MAX];
    size_t n_pending;
    struct kline klines[EXITS_KMSG_LINES];
    size_t next_kline;
    /* the targets whose end was recorded last: an attach ends once, however many times its
     * end is heard of (CI's sanitizer run counted one exit twice) */
    int64_t recorded[EXITS_RECORDED];
    size_t next_recorded;
    atomic_uint_fast64_t counts[EXIT_KINDS], lost;
};

const char *exit_kind_name(enum exit_kind kind)
{
    static const char *const names[EXIT_KINDS] = {"exit", "signal", "oom-kill"};
    return kind < EXIT_KINDS ? names[kind] : "?";
}

uint64_t exits__count(const struct exits *e, enum exit_kind kind)
{
    return e && kind < EXIT_KINDS ? atomic_load(&e->counts[kind]) : 0;
}

uint64_t exits__lost(const struct exits *e)
{
    return e ? atomic_load(&e->lost) : 0;
}

/* ---- the kernel's log ---- */

/* The number between the '[' and ']' that end just before @at in @text, or 0. */
static pid_t bracketed_pid_before(const char *text, const char *at)
{
    const char *close = at, *open;

    while (close > text && *close != ']')
        close--;
    for (open = close; open > text && *open != '['; open--)
        ;
    return *open == '[' && close > open + 1 ? (pid_t)atoi(open + 1) : 0;
}

pid_t exits_kmsg_pid(const char *text, bool *ret_oom)
{
    const char *p;

    *ret_oom = false;
    /* "Out of memory: Killed process 1234 (python3) total-vm:...", and the memory cgroup's */
    if ((p = strstr(text, "Killed process "))) {
        *ret_oom = true;
        return (pid_t)atoi(p + strlen("Killed process "));
    }
    /* "python3[1234]: segfault at 0 ip ...", "...[1234]: general protection fault ..." */
    if ((p = strstr(text, "]: segfault at ")) || (p = strstr(text, "]: general protection")))
        return bracketed_pid_before(text, p);
    /* "traps: python3[1234] trap divide error ip:..." */
    if (strncmp(text, "traps: ", 7) == 0 && (p = strchr(text, ']')))
        return bracketed_pid_before(text, p);
    return 0;
}

/* Reads what the kernel logged since the last call (one record per read()). */
static void read_kmsg(struct exits *e)
{
    char rec[2048];

    for (;;) {
        ssize_t n = read(e->kmsg_fd, rec, sizeof(rec) - 1);
        char *text, *end;
        struct kline *k;
        bool oom;
        pid_t pid;

        if (n < 0 && errno == EPIPE) /* records overwritten before we read them: go on */
            continue;
        if (n <= 0)
            return;
        rec[n] = '\0';
        text = strchr(rec, ';');
        if (!text)
            continue;
        text++;
        if ((end = strchr(text, '\n')))
            *end = '\0';
        if (!(pid = exits_kmsg_pid(text, &oom)))
            continue;
        k = &e->klines[e->next_kline++ % EXITS_KMSG_LINES];
        k->read_ns = mono_ns();
        k->pid = pid;
        k->oom = oom;
        snprintf(k->text, sizeof(k->text), "%s", text);
    }
}

/* ---- the process connector ---- */

/* Linux 6.6's listen request with an event filter (cn_proc.h's struct proc_input; Debian's
 * headers predate it): the kernel then sends us exits only, not every fork, exec and comm of
 * the machine. */
struct proc_listen_filtered {
    uint32_t mcast_op;   /* enum proc_cn_mcast_op */
    uint32_t event_type; /* enum proc_cn_event: PROC_EVENT_EXIT */
};

/* Sends the listen request of @len bytes at @op; -errno. */
static int listen_request(int fd, const void *op, size_t len)
{
    /* a netlink header, a connector message, its payload: laid out by hand (cn_msg ends in a
     * flexible array, so it cannot sit inside a struct) */
    char msg[NLMSG_SPACE(sizeof(struct cn_msg) + sizeof(struct proc_listen_filtered))]
        __attribute__((aligned(NLMSG_ALIGNTO))) = {0};
    struct nlmsghdr *nl = (struct nlmsghdr *)msg;
    struct cn_msg *cn = NLMSG_DATA(nl);

    nl->nlmsg_len = NLMSG_LENGTH(sizeof(struct cn_msg) + len);
    nl->nlmsg_type = NLMSG_DONE;
    cn->id.idx = CN_IDX_PROC;
    cn->id.val = CN_VAL_PROC;
    cn->len = (uint16_t)len;
    memcpy(cn->data, op, len);
    return send(fd, msg, nl->nlmsg_len, 0) < 0 ? -errno : 0;
}

/* Whether this kernel takes the filtered request (6.6 and later); older ones drop it. */
static bool kernel_filters_events(void)
{
    struct utsname u;
    int major = 0, minor = 0;

    return uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
           (major > 6 || (major == 6 && minor >= 6));
}

static int connector_open(void)
{
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = CN_IDX_PROC};
    struct proc_listen_filtered filtered = {PROC_CN_MCAST_LISTEN, PROC_EVENT_EXIT};
    enum proc_cn_mcast_op plain = PROC_CN_MCAST_LISTEN;
    int fd = socket(PF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_CONNECTOR);
    int size = 8 << 20, r; /* a burst of exits while the thread is late */

    if (fd < 0)
        return -errno;
    /* past net.core.rmem_max (CAP_NET_ADMIN, which the connector needs anyway) */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    r = kernel_filters_events() ? listen_request(fd, &filtered, sizeof(filtered))
                                : listen_request(fd, &plain, sizeof(plain));
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}

/* A process (not a thread) ended: held for its kernel lines if it is an attached target. */
static void on_exit_event(struct exits *e, pid_t pid, int status, int64_t event_mono_ns)
{
    int64_t now = mono_ns(), start = 0;
    struct target_key key;

    /* the latest attach of that pid. The sampler may have ended it well before the kernel's
     * event: a process dumping core is unreadable from its first signal, and its exit comes
     * after the dump; so one that ended a short while ago is still it */
    if (targets__find(e->reg, pid, false, &key) < 0 || key.state == TARGET_DETACHED ||
        (key.state != TARGET_SAMPLING && real_ns() - key.ended_ns > EXITS_REMEMBER_MS * 1000000LL))
        return;
    /* the same process as the attach: its start time, while it is still there (a zombie); a
     * pid reused since is not it */
    if (procfs_start_time(pid, &start) == 0 && start != key.start_time)
        return;
    for (size_t i = 0; i < e->n_pending; i++)
        if (e->pending[i].target_id == key.id)
            return;
    for (size_t i = 0; i < EXITS_RECORDED; i++)
        if (e->recorded[i] == key.id)
            return;
    if (e->n_pending == EXITS_PENDING_MAX) {
        atomic_fetch_add(&e->lost, 1);
        return;
    }
    e->pending[e->n_pending++] =
        (struct pending){.target_id = key.id,
                         /* when it ended, not when this was read */
                         .ts_ns = real_ns() - (event_mono_ns <= now ? now - event_mono_ns : 0),
                         .due_ns = mono_ns() + EXITS_SETTLE_MS * 1000000LL,
                         .pid = pid,
                         .status = status};
}

static void read_connector(struct exits *e)
{
    char buf[8192] __attribute__((aligned(NLMSG_ALIGNTO)));

    for (;;) {
        ssize_t n = recv(e->nl_fd, buf, sizeof(buf), 0);

        if (n < 0 && errno == ENOBUFS) { /* the kernel dropped events: some exits lost */
            atomic_fetch_add(&e->lost, 1);
            continue;
        }
        if (n <= 0)
            return;
        for (struct nlmsghdr *nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, (size_t)n);
             nh = NLMSG_NEXT(nh, n)) {
            struct cn_msg *cn = NLMSG_DATA(nh);
            struct proc_event ev; /* copied out: in the message it is 4 bytes off its alignment */

            if (nh->nlmsg_type != NLMSG_DONE || cn->id.idx != CN_IDX_PROC || cn->len < sizeof(ev))
                continue;
            memcpy(&ev, cn->data, sizeof(ev));
            /* a thread's end is not the process's: its leader's is */
            if (ev.what != PROC_EVENT_EXIT ||
                ev.event_data.exit.process_pid != ev.event_data.exit.process_tgid)
                continue;
            on_exit_event(e, (pid_t)ev.event_data.exit.process_pid,
                          (int)ev.event_data.exit.exit_code, (int64_t)ev.timestamp_ns);
        }
    }
}

/* ---- the rows ---- */

/* The kernel's lines about @pid read up to now, joined; whether one is the OOM killer's. */
static bool kernel_lines(struct exits *e, pid_t pid, char *out, size_t size, char *oom_line,
                         size_t oom_size)
{
    size_t len = 0, first = e->next_kline > EXITS_KMSG_LINES ? e->next_kline - EXITS_KMSG_LINES : 0;
    bool oom = false;

    out[0] = oom_line[0] = '\0';
    for (size_t i = first; i < e->next_kline; i++) {
        const struct kline *k = &e->klines[i % EXITS_KMSG_LINES];
        if (k->pid != pid)
            continue;
        if (k->oom && !oom) {
            oom = true;
            snprintf(oom_line, oom_size, "%s", k->text);
        }
        if (len + strlen(k->text) + 2 < size)
            len += (size_t)snprintf(out + len, size - len, "%s%s", len ? "\n" : "", k->text);
    }
    return oom;
}

static void make_row(struct exits *e, const struct pending *p, struct ob_crash *c)
{
    char oom_line[240], when[16];
    bool oom = kernel_lines(e, p->pid, c->kernel, sizeof(c->kernel), oom_line, sizeof(oom_line));
    time_t t = (time_t)(p->ts_ns / 1000000000LL);
    struct tm tm;

    c->target_id = p->target_id;
    c->ts_ns = p->ts_ns;
    c->pid = p->pid;
    c->exit_code = c->signal = -1;
    localtime_r(&t, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    if (WIFSIGNALED(p->status)) {
        const char *name = sigabbrev_np(WTERMSIG(p->status));
        const char *rss = strstr(oom_line, "anon-rss:");

        c->signal = WTERMSIG(p->status);
        c->core_dumped = WCOREDUMP(p->status) ? 1 : 0;
        if (oom && c->signal == SIGKILL) {
            double kb = rss ? atof(rss + strlen("anon-rss:")) : 0;
            snprintf(c->kind, sizeof(c->kind), "%s", exit_kind_name(EXIT_OOM));
            if (kb >= 1048576)
                snprintf(c->message, sizeof(c->message),
                         "killed by the OOM killer at %s (anon-rss %.1f GB)", when, kb / 1048576);
            else
                snprintf(c->message, sizeof(c->message),
                         "killed by the OOM killer at %s (anon-rss %.0f MB)", when, kb / 1024);
            return;
        }
        snprintf(c->kind, sizeof(c->kind), "%s", exit_kind_name(EXIT_SIGNAL));
        snprintf(c->message, sizeof(c->message), "killed by signal %d (SIG%s) at %s%s", c->signal,
                 name ? name : "?", when, c->core_dumped ? ", core dumped" : "");
        return;
    }
    c->exit_code = WEXITSTATUS(p->status);
    snprintf(c->kind, sizeof(c->kind), "%s", exit_kind_name(EXIT_CLEAN));
    snprintf(c->message, sizeof(c->message), "exited with status %d at %s", c->exit_code, when);
}

/* The exits whose kernel lines have had time to come: into the outbox. */
static void flush_pending(struct exits *e, bool all)
{
    int64_t now = mono_ns();
    size_t kept = 0;

    for (size_t i = 0; i < e->n_pending; i++) {
        struct pending *p = &e->pending[i];
        struct ob_crash c = {0};
        struct ob_half *h;
        bool ok;

        if (!all && p->due_ns > now) {
            e->pending[kept++] = *p;
            continue;
        }
        make_row(e, p, &c);
        h = outbox__lock(e->ob);
        ok = ob_half__crash(h, &c);
        outbox__unlock(e->ob);
        if (!ok) { /* the half is full this second: again at the next pass */
            if (all) {
                atomic_fetch_add(&e->lost, 1);
            } else {
                p->due_ns = now + 100000000LL;
                e->pending[kept++] = *p;
            }
            continue;
        }
        e->recorded[e->next_recorded++ % EXITS_RECORDED] = p->target_id;
        atomic_fetch_add(&e->counts[strcmp(c.kind, "exit") == 0     ? EXIT_CLEAN
                                    : strcmp(c.kind, "signal") == 0 ? EXIT_SIGNAL
                                                                    : EXIT_OOM],
                         1);
        log_msg(LOG_INFO, "pid %d %s%s%s", (int)c.pid, c.message, c.kernel[0] ? ": " : "",
                c.kernel);
    }
    e->n_pending = kept;
}

static void *run(void *arg)
{
    struct exits *e = arg;

    for (;;) {
        struct pollfd p[3] = {{.fd = e->stop_fd, .events = POLLIN},
                              {.fd = e->nl_fd, .events = POLLIN},
                              {.fd = e->kmsg_fd, .events = POLLIN}};

        if (poll(p, 3, e->n_pending ? 50 : 1000) < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            break;
        if (e->kmsg_fd >= 0)
            read_kmsg(e); /* first: the lines about an exit come before it */
        if (e->nl_fd >= 0 && p[1].revents)
            read_connector(e);
        flush_pending(e, false);
    }
    if (e->kmsg_fd >= 0)
        read_kmsg(e);
    flush_pending(e, true);
    return NULL;
}

int exits_start(struct targets *reg, struct outbox *ob, struct exits **ret)
{
    struct exits *e = calloc(1, sizeof(*e));
    struct stat ns;
    int r = 0, stop_err;

    *ret = NULL;
    if (!e)
        return -ENOMEM;
    e->reg = reg;
    e->ob = ob;
    /* the kernel's events name processes by their pids in the first pid namespace: in
     * another (a container without the host's pids) they would be other processes' */
    if (stat("/proc/self/ns/pid", &ns) == 0 && ns.st_ino != PROC_PID_INIT_INO) {
        log_msg(LOG_WARN, "not in the host's pid namespace: how attached processes end is not"
                          " recorded (the kernel's process events name the host's pids)");
        free(e);
        return -ENOTSUP;
    }
    e->stop_fd = eventfd(0, EFD_CLOEXEC);
    stop_err = errno; /* the opens below may change it */
    e->nl_fd = connector_open();
    if (e->nl_fd < 0) {
        log_errno(LOG_WARN, e->nl_fd,
                  "the kernel's process events (netlink connector; CAP_NET_ADMIN): how attached"
                  " processes end is not recorded");
        if (e->stop_fd >= 0)
            close(e->stop_fd);
        free(e);
        return -ENOTSUP;
    }
    e->kmsg_fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (e->kmsg_fd < 0)
        log_errno(LOG_WARN, -errno,
                  "/dev/kmsg (CAP_SYSLOG): exits are recorded without the kernel's lines (the"
                  " OOM killer's, segfaults)");
    else
        lseek(e->kmsg_fd, 0, SEEK_END); /* what it logs from now on */
    if (e->stop_fd < 0 || (r = pthread_create(&e->thread, NULL, run, e)) != 0) {
        r = e->stop_fd < 0 ? -stop_err : -r;
        close(e->nl_fd);
        if (e->kmsg_fd >= 0)
            close(e->kmsg_fd);
        if (e->stop_fd >= 0)
            close(e->stop_fd);
        free(e);
        return r;
    }
    pthread_setname_np(e->thread, "probed-exits");
    *ret = e;
    return 0;
}

void exits_stop(struct exits *e)
{
    uint64_t one = 1;

    if (!e)
        return;
    if (write(e->stop_fd, &one, sizeof(one)) < 0)
        log_errno(LOG_WARN, -errno, "stopping the exits thread");
    pthread_join(e->thread, NULL);
    close(e->nl_fd);
    if (e->kmsg_fd >= 0)
        close(e->kmsg_fd);
    close(e->stop_fd);
    free(e);
}
