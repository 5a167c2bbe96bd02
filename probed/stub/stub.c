/*
 * stub.c - libprobed-stub.so, the only code probed ever puts inside a target.
 *
 * The daemon copies this library into a 0700 directory of the target's, and the target's main
 * thread dlopen()s it: hijacked for a moment (inject.c), or on 3.14+ running a script the
 * daemon asked it to run through PEP 768's hook (remote_exec.c). The constructor runs with
 * the loader lock held,
 * so it only notes which thread is the main one and starts the stub's thread; everything else
 * happens on that thread, which never runs on the hijacked stack.
 * The stub's thread serves a Unix socket (mode 0600) next to the library. Each connection is
 * served by a thread of its own: requests (stub_proto.h) run Python with the GIL taken on
 * that thread, or on the main thread through a pending call; an interrupt request raises
 * KeyboardInterrupt in the thread running a session's code.
 *
 * The C API is resolved at run time (dlsym, capi.h), so one build serves every CPython from
 * 3.6 on and the stub links against no libpython. The Python half (bootstrap.py) is built in.
 * Once Python is usable, the torch trace's hot path (torchhot.c) is published as the module
 * _probed_stub; it does nothing until the daemon turns a trace on.
 *
 * Memory: one struct stub for the life of the process (it cannot be unloaded: a request may
 * still be running). Failure: a request that cannot run gets STUB_ERROR and a message; the
 * target is never stopped or signalled.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <dirent.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "capi.h"
#include "catch.h"
#include "stub_proto.h"
#include "torchhot.h"

extern const char stub_bootstrap_py[]; /* bootstrap.py, embedded at build time */

/* What runs a request on the main thread (a pending call) and its waiter share. */
struct main_job {
    const struct stub_request *rq;
    const char *code;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs; /* the waiter and the pending call; the last one out frees */
    bool done;
    uint8_t status;
    char *text;
};

/* A session's code running now, for interrupt requests. */
#define RUNNING_MAX 64
struct running {
    uint32_t session;
    unsigned long ident; /* the Python thread ident running it */
};

struct stub {
    struct capi api;
    char dir[PATH_MAX]; /* the directory the library was loaded from */
    unsigned long main_ident;
    long main_tid;
    char init_error[256]; /* why Python cannot be used: reported on every request */
    bool ready;
    bool threads_requested;   /* 3.6: the main thread was asked to make the GIL */
    PyObject *run, *complete; /* bootstrap.py's _run and _complete */
    struct torch_hot torch;   /* the torch trace's hot path (module _probed_stub) */
    pthread_mutex_t lock;     /* ready, init_error, running */
    struct running running[RUNNING_MAX];
};

/* The library's one object: filled by the constructor, then owned by the stub's threads. */
static struct stub the_stub = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int fail(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* libpython's handle when it was loaded RTLD_LOCAL by an embedder, else RTLD_DEFAULT. */
static int find_libpython(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libpython3")) {
        *(void **)arg = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
        return 1;
    }
    return 0;
}

static int resolve_api(struct capi *api, char *err, size_t errlen)
{
    static const struct {
        const char *name;
        size_t off;
        bool optional;
    } syms[] = {
#define S(name) {#name, offsetof(struct capi, name), false}
        S(Py_IsInitialized),
        S(PyGILState_Ensure),
        S(PyGILState_Release),
        S(Py_AddPendingCall),
        S(PyEval_SaveThread),
        S(PyEval_RestoreThread),
        S(PyRun_StringFlags),
        S(PyDict_New),
        S(PyDict_GetItem),
        S(PyDict_GetItemString),
        S(PyDict_SetItem),
        S(PyDict_SetItemString),
        S(PyDict_Clear),
        S(PyEval_GetBuiltins),
        S(PyImport_GetModuleDict),
        S(PyModule_New),
        S(PyCFunction_NewEx),
        S(PyUnicode_FromStringAndSize),
        S(PyUnicode_AsUTF8AndSize),
        S(PyLong_FromUnsignedLong),
        S(PyLong_FromLongLong),
        S(PyLong_AsLongLong),
        S(PyLong_FromVoidPtr),
        S(PyTuple_New),
        S(PyTuple_SetItem),
        S(PyTuple_GetItem),
        S(PyTuple_Size),
        S(PyList_GetItem),
        S(PyList_Size),
        S(PyObject_CallFunctionObjArgs),
        S(PyObject_GetAttrString),
        S(PyObject_SetAttrString),
        S(PyObject_IsInstance),
        S(PyObject_IsTrue),
        S(Py_IncRef),
        S(Py_DecRef),
        S(PyErr_Occurred),
        S(PyErr_Clear),
        S(PyErr_Print),
        S(PyErr_SetString),
        S(PyThreadState_SetAsyncExc),
        S(PyExc_KeyboardInterrupt),
        S(PyExc_RuntimeError),
        S(_Py_NoneStruct),
        S(_Py_TrueStruct),
        S(_Py_FalseStruct),
        S(PyTuple_Type),
        S(PyList_Type),
#undef S
        {"PyEval_ThreadsInitialized", offsetof(struct capi, PyEval_ThreadsInitialized), true},
        {"PyEval_InitThreads", offsetof(struct capi, PyEval_InitThreads), true},
    };
    void *lib = RTLD_DEFAULT;

    if (!dlsym(RTLD_DEFAULT, "PyGILState_Ensure"))
        dl_iterate_phdr(find_libpython, &lib);
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *p = dlsym(lib ? lib : RTLD_DEFAULT, syms[i].name);
        if (!p && !syms[i].optional)
            return fail(err, errlen, "this process has no Python C API (%s not found)",
                        syms[i].name);
        memcpy((char *)api + syms[i].off, &p, sizeof(p));
    }
    return 0;
}

/* 3.6 without a second thread has no GIL yet; it must be made on the main thread. */
static int init_threads_pending(void *arg)
{
    (void)arg;
    the_stub.api.PyEval_InitThreads();
    return 0;
}

/* Asks the main thread (once) to make the GIL, and waits a little for it. Not fatal: the next
 * request asks again whether it happened. */
static int wait_threads_initialised(struct stub *s, char *err, size_t errlen)
{
    const struct capi *api = &s->api;

    if (!api->PyEval_ThreadsInitialized || api->PyEval_ThreadsInitialized())
        return 0;
    if (!s->threads_requested) {
        if (!api->PyEval_InitThreads || api->Py_AddPendingCall(init_threads_pending, NULL) < 0)
            return fail(err, errlen, "cannot start Python threads in this process");
        s->threads_requested = true;
    }
    for (int i = 0; i < 2000 && !api->PyEval_ThreadsInitialized(); i++)
        usleep(1000);
    return api->PyEval_ThreadsInitialized()
               ? 0
               : fail(err, errlen,
                      "this Python 3.6 has started no thread, and code can run beside its main "
                      "thread only once that thread has run Python again (it is blocked outside "
                      "Python now); try again when it is");
}

/* The pending call of main_call(): the callable, on the main thread with the GIL held. Its
 * errors are cleared: they are not the main thread's. */
static int run_main_call(void *arg)
{
    const struct capi *api = &the_stub.api;
    PyObject *r = api->PyObject_CallFunctionObjArgs(arg, NULL);

    if (r)
        api->Py_DecRef(r);
    else
        api->PyErr_Clear();
    api->Py_DecRef(arg);
    return 0;
}

/* _probed_stub.main_call(fn): fn() runs on the main thread at its next check of the eval
 * breaker (it must run Python to get there), without waiting for it: debug.py pauses the main
 * thread this way. */
static PyObject *main_call(PyObject *self, PyObject *args)
{
    const struct capi *api = &the_stub.api;
    PyObject *fn = api->PyTuple_Size(args) == 1 ? api->PyTuple_GetItem(args, 0) : NULL;

    (void)self;
    if (!fn)
        return NULL;
    api->Py_IncRef(fn);
    if (api->Py_AddPendingCall(run_main_call, fn) < 0) {
        api->Py_DecRef(fn);
        api->PyErr_SetString(*api->PyExc_RuntimeError,
                             "the main thread's queue of pending calls is full");
        return NULL;
    }
    api->Py_IncRef(api->_Py_NoneStruct);
    return api->_Py_NoneStruct;
}

static int register_main_call(const struct capi *api)
{
    static struct py_method_def def = {"main_call", main_call, PY_METH_VARARGS, NULL};
    PyObject *mod = api->PyDict_GetItemString(api->PyImport_GetModuleDict(), "_probed_stub");
    PyObject *fn = mod ? api->PyCFunction_NewEx(&def, NULL, NULL) : NULL;
    int r = fn ? api->PyObject_SetAttrString(mod, def.name, fn) : -1;

    if (fn)
        api->Py_DecRef(fn);
    return r;
}

/* Runs bootstrap.py in a namespace of its own and keeps its two entry points. */
static int load_bootstrap(struct stub *s, char *err, size_t errlen)
{
    const struct capi *api = &s->api;
    int gil = api->PyGILState_Ensure();
    PyObject *ns = api->PyDict_New(), *r = NULL;
    int ret = -1;

    PyObject *name = api->PyUnicode_FromStringAndSize("_probed", 7);
    PyObject *src =
        api->PyUnicode_FromStringAndSize(stub_bootstrap_py, (ssize_t)strlen(stub_bootstrap_py));

    /* compiled as "<probed stub>", not PyRun's "<string>": its frames and the memory it
     * allocates are told from the job's by that name (the sampler, allocation tracking) */
    if (ns && name && src &&
        api->PyDict_SetItemString(ns, "__builtins__", api->PyEval_GetBuiltins()) == 0 &&
        api->PyDict_SetItemString(ns, "__name__", name) == 0 &&
        api->PyDict_SetItemString(ns, "_probed_src", src) == 0)
        r = api->PyRun_StringFlags("exec(compile(_probed_src, '<probed stub>', 'exec'))\n"
                                   "del _probed_src\n",
                                   PY_FILE_INPUT, ns, ns, NULL);
    for (PyObject **p = (PyObject *[]){name, src}, **e = p + 2; p < e; p++)
        if (*p)
            api->Py_DecRef(*p);
    if (r) {
        s->run = api->PyDict_GetItemString(ns, "_run");
        s->complete = api->PyDict_GetItemString(ns, "_complete");
        ret = s->run && s->complete ? 0 : fail(err, errlen, "bootstrap.py defines no _run");
        if (ret == 0 && (torch_hot_register(&s->torch, api) < 0 || catch_register(api) < 0 ||
                         register_main_call(api) < 0))
            api->PyErr_Clear(); /* eval works without them; catch and torch say they are missing */
        api->Py_DecRef(r);      /* ns stays alive: it holds the functions */
    } else {
        api->PyErr_Print();
        fail(err, errlen, "bootstrap.py failed to run (its traceback went to the target's stderr)");
    }
    api->PyGILState_Release(gil);
    return ret;
}

/* Once, on the first request: Python may not be usable yet when the library loads. */
static bool ensure_python(struct stub *s, char *err, size_t errlen)
{
    bool ok;

    pthread_mutex_lock(&s->lock);
    if (!s->ready && !s->init_error[0]) {
        char why[256] = "";
        if (resolve_api(&s->api, why, sizeof(why)) == 0 && !s->api.Py_IsInitialized())
            fail(why, sizeof(why), "Python is not initialised in this process");
        if (!why[0] && wait_threads_initialised(s, err, errlen) < 0) {
            pthread_mutex_unlock(&s->lock);
            return false; /* not for good: asked again next time */
        }
        if (!why[0])
            load_bootstrap(s, why, sizeof(why));
        s->ready = !why[0];
        snprintf(s->init_error, sizeof(s->init_error), "%s", why); /* for good */
    }
    ok = s->ready;
    if (!ok)
        snprintf(err, errlen, "%s", s->init_error);
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* Calls _run(code, session, main ident, main tid) with the GIL held: the status and text. */
static uint8_t call_run(struct stub *s, const char *code, uint32_t session, char **ret_text)
{
    const struct capi *api = &s->api;
    PyObject *args[4] = {api->PyUnicode_FromStringAndSize(code, (ssize_t)strlen(code)),
                         api->PyLong_FromUnsignedLong(session),
                         api->PyLong_FromUnsignedLong(s->main_ident),
                         api->PyLong_FromUnsignedLong((unsigned long)s->main_tid)};
    PyObject *r = NULL;
    uint8_t status = STUB_ERROR;
    const char *text = NULL;
    ssize_t len = 0;

    if (args[0] && args[1] && args[2] && args[3])
        r = api->PyObject_CallFunctionObjArgs(s->run, args[0], args[1], args[2], args[3], NULL);
    for (int i = 0; i < 4; i++)
        if (args[i])
            api->Py_DecRef(args[i]);
    if (r) {
        PyObject *ok = api->PyTuple_GetItem(r, 0), *out = api->PyTuple_GetItem(r, 1);
        text = out ? api->PyUnicode_AsUTF8AndSize(out, &len) : NULL;
        status = ok && api->PyObject_IsTrue(ok) == 1 ? STUB_OK : STUB_EXCEPTION;
    }
    *ret_text = text ? strndup(text, (size_t)len) : strdup("probed: the stub's runner failed\n");
    if (r)
        api->Py_DecRef(r);
    else
        api->PyErr_Print();
    return status;
}

static void set_running(struct stub *s, uint32_t session, unsigned long ident)
{
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < RUNNING_MAX; i++) {
        if (ident && !s->running[i].ident) { /* start */
            s->running[i] = (struct running){session, ident};
            break;
        }
        if (!ident && s->running[i].session == session) { /* end */
            s->running[i] = (struct running){0, 0};
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

static unsigned long running_ident(struct stub *s, uint32_t session)
{
    unsigned long ident = 0;

    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < RUNNING_MAX && !ident; i++)
        if (s->running[i].ident && s->running[i].session == session)
            ident = s->running[i].ident;
    pthread_mutex_unlock(&s->lock);
    return ident;
}

/* The default: this thread takes the GIL (works while the main thread is blocked). */
static uint8_t run_here(struct stub *s, const struct stub_request *rq, const char *code,
                        char **ret_text)
{
    int gil = s->api.PyGILState_Ensure();
    uint8_t status;

    if (rq->session)
        set_running(s, rq->session, (unsigned long)pthread_self());
    status = call_run(s, code, rq->session, ret_text);
    if (rq->session)
        set_running(s, rq->session, 0);
    s->api.PyGILState_Release(gil);
    return status;
}

static void main_job_put(struct main_job *j)
{
    bool last;

    pthread_mutex_lock(&j->lock);
    last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (last) {
        free(j->text);
        free(j);
    }
}

/* The pending call, on the main thread with the GIL held. */
static int run_main_job(void *arg)
{
    struct main_job *j = arg;
    struct stub *s = &the_stub;
    char *text = NULL;
    uint8_t status;

    if (j->rq->session)
        set_running(s, j->rq->session, s->main_ident);
    status = call_run(s, j->code, j->rq->session, &text);
    if (j->rq->session)
        set_running(s, j->rq->session, 0);
    pthread_mutex_lock(&j->lock);
    j->status = status;
    j->text = text;
    j->done = true;
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->lock);
    main_job_put(j);
    return 0;
}

/*
 * --main-thread: a pending call, run by the main thread at its next check of the eval
 * breaker. 3.9-3.12 only notice a pending call added by another thread once the main thread
 * takes the GIL again, so this thread then takes and drops it once (the "nudge"), which makes
 * the main thread ask for it back within a switch interval. Nothing runs while the main thread
 * is blocked outside Python; the daemon's timeout then answers the user.
 */
static uint8_t run_on_main(struct stub *s, const struct stub_request *rq, const char *code,
                           char **ret_text)
{
    struct main_job *j = calloc(1, sizeof(*j));
    uint8_t status;

    if (!j)
        return *ret_text = strdup("probed: out of memory\n"), STUB_ERROR;
    *j = (struct main_job){.rq = rq, .code = code, .refs = 2};
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    if (s->api.Py_AddPendingCall(run_main_job, j) < 0) {
        free(j);
        return *ret_text = strdup("probed: the main thread's queue of pending calls is full\n"),
               STUB_ERROR;
    }
    usleep(1000);
    s->api.PyGILState_Release(s->api.PyGILState_Ensure());
    pthread_mutex_lock(&j->lock);
    while (!j->done)
        pthread_cond_wait(&j->cond, &j->lock);
    status = j->status;
    *ret_text = j->text;
    j->text = NULL;
    pthread_mutex_unlock(&j->lock);
    main_job_put(j);
    return status;
}

static uint8_t is_complete(struct stub *s, const char *code, char **ret_text)
{
    const struct capi *api = &s->api;
    int gil = api->PyGILState_Ensure();
    PyObject *src = api->PyUnicode_FromStringAndSize(code, (ssize_t)strlen(code));
    PyObject *r = src ? api->PyObject_CallFunctionObjArgs(s->complete, src, NULL) : NULL;
    uint8_t status = r ? (api->PyObject_IsTrue(r) == 1 ? STUB_OK : STUB_INCOMPLETE) : STUB_ERROR;

    if (src)
        api->Py_DecRef(src);
    if (r)
        api->Py_DecRef(r);
    api->PyGILState_Release(gil);
    *ret_text = strdup("");
    return status;
}

static uint8_t interrupt(struct stub *s, uint32_t session, char **ret_text)
{
    unsigned long ident = running_ident(s, session);
    int gil, n = 0;

    if (ident) {
        gil = s->api.PyGILState_Ensure();
        n = s->api.PyThreadState_SetAsyncExc(ident, *s->api.PyExc_KeyboardInterrupt);
        s->api.PyGILState_Release(gil);
    }
    *ret_text = strdup(n ? "interrupted\n" : "nothing running\n");
    return STUB_OK;
}

static int read_all(int fd, void *buf, size_t len)
{
    for (size_t got = 0; got < len;) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n == 0 || (n < 0 && errno != EINTR))
            return -1;
        if (n > 0)
            got += (size_t)n;
    }
    return 0;
}

static void reply(int fd, uint8_t status, const char *text)
{
    size_t len = strlen(text);
    struct stub_reply h = {.magic = STUB_MAGIC,
                           .status = status,
                           .len = (uint32_t)(len > STUB_REPLY_MAX ? STUB_REPLY_MAX : len)};

    /* MSG_NOSIGNAL: a daemon that stopped waiting must not SIGPIPE the target */
    if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h))
        for (size_t sent = 0; sent < h.len;) {
            ssize_t n = send(fd, text + sent, h.len - sent, MSG_NOSIGNAL);
            if (n <= 0 && errno != EINTR)
                return;
            sent += n > 0 ? (size_t)n : 0;
        }
}

/* One connection: requests one after the other until the daemon hangs up. Its thread is
 * named STUB_THREAD_NAME (stub_proto.h), for the daemon to tell it from the job's: it leaves
 * it out of samples (sampler.c), and a reader of `ps -L` or a backtrace sees whose it is. */
static void *serve_connection(void *arg)
{
    int fd = (int)(intptr_t)arg;
    struct stub *s = &the_stub;
    struct stub_request rq;

    prctl(PR_SET_NAME, STUB_THREAD_NAME, 0, 0, 0);
    while (read_all(fd, &rq, sizeof(rq)) == 0 && rq.magic == STUB_MAGIC &&
           rq.len <= STUB_CODE_MAX) {
        char *code = malloc((size_t)rq.len + 1), *text = NULL, err[256];
        uint8_t status;

        if (!code || read_all(fd, code, rq.len) < 0) {
            free(code);
            break;
        }
        code[rq.len] = '\0';
        if (!ensure_python(s, err, sizeof(err)))
            status = STUB_ERROR, text = strdup(err);
        else if (rq.kind == STUB_RUN && (rq.flags & STUB_MAIN_THREAD))
            status = run_on_main(s, &rq, code, &text);
        else if (rq.kind == STUB_RUN)
            status = run_here(s, &rq, code, &text);
        else if (rq.kind == STUB_IS_COMPLETE)
            status = is_complete(s, code, &text);
        else if (rq.kind == STUB_INTERRUPT)
            status = interrupt(s, rq.session, &text);
        else if (rq.kind == STUB_CATCH_LISTEN) {
            /* the daemon keeps this connection for the catch's events (catch.c) */
            reply(fd, STUB_OK, "");
            free(code);
            catch_channel_set(fd);
            return NULL;
        } else
            status = STUB_ERROR, text = strdup("unknown request");
        reply(fd, status, text ? text : "probed: out of memory\n");
        free(text);
        free(code);
    }
    close(fd);
    return NULL;
}

static void start_detached(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_t th;
    sigset_t all, old;

    /* The target's signals must keep going to its own threads, never to ours. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, fn, arg) != 0 && fn == serve_connection)
        close((int)(intptr_t)arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The socket appears whole (bound, 0600, listening) under its final name, or not at all. */
static int listen_socket(const char *dir)
{
    struct sockaddr_un tmp = {.sun_family = AF_UNIX}, final = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || strlen(dir) > 96) { /* sun_path holds 107 bytes */
        if (fd >= 0)
            close(fd);
        return -1;
    }
    snprintf(tmp.sun_path, sizeof(tmp.sun_path), "%.96s/%s.tmp", dir, STUB_SOCKET_NAME);
    snprintf(final.sun_path, sizeof(final.sun_path), "%.96s/%s", dir, STUB_SOCKET_NAME);
    unlink(tmp.sun_path);
    if (bind(fd, (struct sockaddr *)&tmp, sizeof(tmp)) < 0 || chmod(tmp.sun_path, 0600) < 0 ||
        listen(fd, 8) < 0 || rename(tmp.sun_path, final.sun_path) < 0) {
        close(fd);
        unlink(tmp.sun_path);
        return -1;
    }
    return fd;
}

static void *stub_main(void *arg)
{
    struct stub *s = arg;
    int lfd;

    prctl(PR_SET_NAME, STUB_THREAD_NAME, 0, 0, 0);
    lfd = listen_socket(s->dir);
    if (lfd < 0)
        return NULL; /* the daemon, waiting for the socket, reports the failure */
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            start_detached(serve_connection, (void *)(intptr_t)fd);
        else if (errno != EINTR && errno != ECONNABORTED)
            usleep(100 * 1000);
    }
    return NULL;
}

__attribute__((constructor)) static void stub_load(void)
{
    struct stub *s = &the_stub;
    Dl_info info;
    char *slash;

    if (!dladdr((void *)stub_load, &info) || !info.dli_fname)
        return;
    snprintf(s->dir, sizeof(s->dir), "%s", info.dli_fname);
    slash = strrchr(s->dir, '/');
    if (!slash)
        return;
    *slash = '\0';
    /* we run on the main thread: hijacked by ptrace, or running the script of PEP 768's hook
     * (remote_exec.c asks the main thread only) */
    s->main_ident = (unsigned long)pthread_self();
    s->main_tid = syscall(SYS_gettid);
    start_detached(stub_main, s);
}

/* At a normal exit the stub's directory goes: the socket, every copy of the library in it and
 * the scripts of the PEP 768 entry (all of them this process's: the directory is named after
 * its pid and start time). After a kill -9 the daemon sweeps it instead (stubctl.c). */
__attribute__((destructor)) static void stub_unload(void)
{
    struct stub *s = &the_stub;
    DIR *d = s->dir[0] ? opendir(s->dir) : NULL;
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, STUB_SOCKET_NAME) == 0 || strncmp(e->d_name, "stub-", 5) == 0 ||
            strncmp(e->d_name, "enter-", 6) == 0) /* the PEP 768 entry's script (stubctl.c) */
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(s->dir);
}
