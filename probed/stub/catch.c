/*
 * catch.c - see catch.h.
 *
 * The handler runs in whatever state the failing thread was in (a heap being changed, a lock
 * held), so from the signal to the chained handler it calls only async-signal-safe functions:
 * send, poll, recv, clock_gettime, nanosleep, sigaction, raise. It sends one event and waits,
 * at most STUB_CATCH_WAIT_MS, for the daemon to ack it: the daemon reads every thread's
 * stacks meanwhile. Then the handler that was there before ours (faulthandler's, the
 * default) gets the signal, so the exit status and any core dump are what they would have been.
 * A fault at an instruction is left to happen again when the handler returns (the previous
 * handler then sees the real siginfo); a signal that was sent (abort(), kill) is raised again.
 */
#define _GNU_SOURCE
#include "catch.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "stub_proto.h"

#define ALTSTACK_BYTES (64 * 1024)

static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define N_FATAL (sizeof(fatal_signals) / sizeof(fatal_signals[0]))

static const struct capi *the_api;
static atomic_int channel = -1;                /* the daemon's connection, or -1 */
static atomic_flag sending = ATOMIC_FLAG_INIT; /* one event on the channel at a time */
static atomic_uint last_seq;                   /* the events' numbers */
static atomic_ulong n_sent, n_acked;           /* for catch_state() */
static atomic_int handling_tid;                /* the thread in the handler now, or 0 */
static struct sigaction previous[N_FATAL];     /* what ours replaced */
static atomic_bool installed[N_FATAL];         /* ours is (or was, under another) in place */
static atomic_bool enabled[N_FATAL];           /* ours does its work; else it only chains */
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER; /* catch_signals() callers */

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool take_sending(int64_t deadline)
{
    while (atomic_flag_test_and_set(&sending)) {
        struct timespec ms = {0, 1000000};
        if (now_ms() >= deadline)
            return false;
        nanosleep(&ms, NULL);
    }
    return true;
}

static void drop_channel(int fd)
{
    if (atomic_compare_exchange_strong(&channel, &fd, -1))
        close(fd);
}

static bool send_bytes(int fd, const void *buf, size_t len, int64_t deadline)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int64_t left = deadline - now_ms();

        if (n > 0)
            done += (size_t)n;
        else if (n < 0 && errno != EINTR && errno != EAGAIN)
            return false;
        else if (n < 0 && errno == EAGAIN && (left <= 0 || poll(&p, 1, (int)left) < 0))
            return false;
    }
    return true;
}

/* 1 acked, 0 not in time, -1 the channel is gone. */
static int wait_ack(int fd, uint32_t seq, int64_t deadline)
{
    uint32_t got = 0;
    size_t have = 0;

    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - now_ms();
        ssize_t n;

        if (left <= 0)
            return 0;
        if (poll(&p, 1, (int)left) <= 0)
            continue; /* EINTR, or the deadline: checked above */
        n = recv(fd, (char *)&got + have, sizeof(got) - have, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return -1;
        have += n > 0 ? (size_t)n : 0;
        if (have == sizeof(got)) {
            if (got == seq)
                return 1;
            have = 0; /* the ack of an event that had stopped waiting */
        }
    }
}

/* Sends one event and waits for its ack; true when acked. Async-signal-safe. */
static bool send_event(const struct stub_catch_event *proto, const char *payload, size_t len)
{
    int64_t deadline = now_ms() + STUB_CATCH_WAIT_MS;
    struct stub_catch_event ev = *proto;
    int fd, acked = 0;

    if (atomic_load(&channel) < 0 || !take_sending(deadline))
        return false;
    fd = atomic_load(&channel);
    if (fd >= 0) {
        ev.magic = STUB_MAGIC;
        ev.seq = atomic_fetch_add(&last_seq, 1) + 1;
        ev.len = (uint32_t)len;
        atomic_fetch_add(&n_sent, 1);
        if (send_bytes(fd, &ev, sizeof(ev), deadline) && send_bytes(fd, payload, len, deadline))
            acked = wait_ack(fd, ev.seq, deadline);
        else
            acked = -1; /* a part of an event on the stream: nothing after it can be read */
        if (acked < 0)
            drop_channel(fd);
        if (acked > 0)
            atomic_fetch_add(&n_acked, 1);
    }
    atomic_flag_clear(&sending);
    return acked > 0;
}

void catch_channel_set(int fd)
{
    bool took = take_sending(now_ms() + STUB_CATCH_WAIT_MS);
    int old = atomic_exchange(&channel, fd);

    if (old >= 0)
        close(old);
    if (took)
        atomic_flag_clear(&sending);
}

/* ---- the fatal-signal handler ---- */

static int index_of(int signo)
{
    for (size_t i = 0; i < N_FATAL; i++)
        if (fatal_signals[i] == signo)
            return (int)i;
    return -1;
}

static void on_fatal(int signo, siginfo_t *si, void *uc)
{
    int saved_errno = errno, i = index_of(signo), none = 0;
    pid_t tid = (pid_t)syscall(SYS_gettid);

    (void)uc;
    if (i < 0)
        return;
    /* Only the first thread to fail tells the daemon (a second one, or a fault in here, goes
     * straight on): the process is about to end either way. */
    if (atomic_load(&enabled[i]) && atomic_compare_exchange_strong(&handling_tid, &none, tid)) {
        struct stub_catch_event ev = {.kind = STUB_CATCH_SIGNAL,
                                      .signo = signo,
                                      .code = si ? si->si_code : 0,
                                      .tid = tid,
                                      .addr = si ? (uint64_t)(uintptr_t)si->si_addr : 0};
        send_event(&ev, "", 0);
    }
    sigaction(signo, &previous[i], NULL);
    if (!si || si->si_code <= 0)
        raise(signo); /* sent (abort, kill): again, to the previous handler, once we return */
    /* else a fault: the instruction faults again when we return, with its own siginfo */
    errno = saved_errno;
}

static bool ours(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == on_fatal;
}

/* Puts ours in front of each fatal signal's handler (@on), or takes it out. The count of
 * signals ours now handles. */
static int set_signals(bool on)
{
    int n = 0;

    pthread_mutex_lock(&install_lock);
    for (size_t i = 0; i < N_FATAL; i++) {
        struct sigaction cur,
            sa = {.sa_sigaction = on_fatal, .sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART};
        if (sigaction(fatal_signals[i], NULL, &cur) < 0)
            continue;
        if (on && !ours(&cur)) {
            sigemptyset(&sa.sa_mask);
            previous[i] = cur;
            if (sigaction(fatal_signals[i], &sa, NULL) == 0)
                atomic_store(&installed[i], true);
        }
        if (!on && ours(&cur) && sigaction(fatal_signals[i], &previous[i], NULL) == 0)
            atomic_store(&installed[i], false);
        /* a handler put in front of ours since keeps calling ours: ours then only chains */
        atomic_store(&enabled[i], on && atomic_load(&installed[i]));
        n += atomic_load(&enabled[i]);
    }
    pthread_mutex_unlock(&install_lock);
    return n;
}

/* ---- the module functions ---- */

static PyObject *bool_of(bool v)
{
    PyObject *o = v ? the_api->_Py_TrueStruct : the_api->_Py_FalseStruct;

    the_api->Py_IncRef(o);
    return o;
}

/* catch_report(text): sends an exception (catch.py's JSON); True once the daemon has it. The
 * GIL is let go while the thread waits. */
static PyObject *catch_report(PyObject *self, PyObject *args)
{
    const struct capi *api = the_api;
    PyObject *text = api->PyTuple_Size(args) == 1 ? api->PyTuple_GetItem(args, 0) : NULL;
    ssize_t len = 0;
    const char *utf8 = text ? api->PyUnicode_AsUTF8AndSize(text, &len) : NULL;
    struct stub_catch_event ev = {.kind = STUB_CATCH_EXCEPTION,
                                  .tid = (int32_t)syscall(SYS_gettid)};
    PyThreadState *ts;
    bool acked;

    (void)self;
    if (!utf8)
        return NULL;                          /* the Python error is set */
    if ((size_t)len > STUB_CATCH_PAYLOAD_MAX) /* catch.py bounds it long before */
        return bool_of(false);
    ts = api->PyEval_SaveThread(); /* @text stays alive: @args holds it */
    acked = send_event(&ev, utf8, (size_t)len);
    api->PyEval_RestoreThread(ts);
    return bool_of(acked);
}

/* Gives the calling thread an alternate signal stack unless it has one (faulthandler's), so
 * that a stack overflow can still be reported. Run on the main thread as a pending call. */
static int give_altstack(void *arg)
{
    stack_t cur, ss = {.ss_size = ALTSTACK_BYTES};

    (void)arg;
    if (sigaltstack(NULL, &cur) < 0 || !(cur.ss_flags & SS_DISABLE))
        return 0;
    ss.ss_sp = mmap(NULL, ALTSTACK_BYTES, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (ss.ss_sp != MAP_FAILED && sigaltstack(&ss, NULL) < 0)
        munmap(ss.ss_sp, ALTSTACK_BYTES);
    return 0;
}

/* catch_signals(on): the number of fatal signals our handler now handles. Turned on, the main
 * thread is asked to take an alternate signal stack too (whenever it next runs Python). */
static PyObject *catch_signals(PyObject *self, PyObject *args)
{
    static atomic_bool altstack_asked;
    PyObject *on = the_api->PyTuple_Size(args) == 1 ? the_api->PyTuple_GetItem(args, 0) : NULL;
    bool want;

    (void)self;
    if (!on)
        return NULL;
    want = the_api->PyObject_IsTrue(on) == 1;
    if (want && !atomic_exchange(&altstack_asked, true))
        the_api->Py_AddPendingCall(give_altstack, NULL);
    return the_api->PyLong_FromLongLong(set_signals(want));
}

/* catch_close(): the daemon's channel is closed (`catch off`). */
static PyObject *catch_close(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    catch_channel_set(-1);
    the_api->Py_IncRef(the_api->_Py_NoneStruct);
    return the_api->_Py_NoneStruct;
}

/* catch_state(): (channel open, events sent, events acked). */
static PyObject *catch_state(PyObject *self, PyObject *args)
{
    const struct capi *api = the_api;
    PyObject *t = api->PyTuple_New(3);

    (void)self;
    (void)args;
    if (t) {
        api->PyTuple_SetItem(t, 0, bool_of(atomic_load(&channel) >= 0));
        api->PyTuple_SetItem(t, 1, api->PyLong_FromLongLong((long long)atomic_load(&n_sent)));
        api->PyTuple_SetItem(t, 2, api->PyLong_FromLongLong((long long)atomic_load(&n_acked)));
    }
    return t;
}

/* A forked child (a DataLoader worker) is not the process the daemon watches: its copy of the
 * channel is closed and its handlers only chain. */
static void after_fork_child(void)
{
    int fd = atomic_exchange(&channel, -1);

    if (fd >= 0)
        close(fd);
    for (size_t i = 0; i < N_FATAL; i++)
        atomic_store(&enabled[i], false);
    pthread_mutex_init(&install_lock, NULL);
    atomic_flag_clear(&sending);
}

int catch_register(const struct capi *api)
{
    static struct py_method_def defs[] = {
        {"catch_report", catch_report, PY_METH_VARARGS, NULL},
        {"catch_signals", catch_signals, PY_METH_VARARGS, NULL},
        {"catch_close", catch_close, PY_METH_NOARGS, NULL},
        {"catch_state", catch_state, PY_METH_NOARGS, NULL},
    };
    PyObject *mod = api->PyDict_GetItemString(api->PyImport_GetModuleDict(), "_probed_stub");

    the_api = api;
    if (!mod || pthread_atfork(NULL, NULL, after_fork_child) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
        PyObject *fn = api->PyCFunction_NewEx(&defs[i], NULL, NULL);
        int r = fn ? api->PyObject_SetAttrString(mod, defs[i].name, fn) : -1;
        if (fn)
            api->Py_DecRef(fn);
        if (r < 0)
            return -1;
    }
    return 0;
}
