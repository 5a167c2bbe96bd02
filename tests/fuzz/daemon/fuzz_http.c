/*
 * fuzz_http.c - libFuzzer on the API as a client reaches it: the real daemon's api_new() with
 * its sampler, writer and meter threads on a temporary socket and database, and each input
 * sent as the raw bytes of one connection (requests, headers, JSON bodies, garbage).
 *
 * The client connects as a user who owns no process (uid 4242424, set on the connecting
 * thread only for the connect(), which is when SO_PEERCRED records it): the fuzzer reaches
 * every parser and handler up to the permission checks, and can never attach to, stop or run
 * code in a real process of the machine it runs on. A reply not coming within 5 s, or the
 * daemon crashing or leaking, is a finding.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "config.h"
#include "query/query.h"
#include "query/sqlmem.h"
#include "sample/follow.h"
#include "sample/meter.h"
#include "sample/outbox.h"
#include "sample/sampler.h"
#include "sample/targets.h"
#include "store/store.h"
#include "store/writer.h"

#define NOBODY_UID 4242424
#define REPLY_WAIT_MS 5000

static struct event_base *base;
static char socket_path[108];

static struct {
    struct config cfg;
    struct store *store;
    struct outbox *ob;
    struct targets *reg;
    struct sampler *sampler;
    struct follower *follower;
    struct writer writer;
    struct meter meter;
    struct api *api;
} d;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* static: the api keeps db_path (and the socket's) for as long as it runs, past this call;
     * on the stack they were read after return (ASan: stack-buffer-overflow in
     * sqlite3_open_v2 from a flame graph's query, with a seed that reached it) */
    static char dir[] = "/tmp/probed-fuzz-http-XXXXXX", db[160];
    struct errbuf err;
    struct api_config acfg;

    (void)argc, (void)argv;
    signal(SIGPIPE, SIG_IGN);
    if (sqlmem_install(QUERY_ALL_MEMORY_BYTES) < 0 || evthread_use_pthreads() < 0 || !mkdtemp(dir))
        abort();
    chmod(dir, 0755);
    snprintf(db, sizeof(db), "%s/probed.db", dir);
    snprintf(socket_path, sizeof(socket_path), "%s/probed.sock", dir);
    config_init(&d.cfg);
    if (config_set(&d.cfg, CFG_METRICS_ADDRESS, "off", false, true, &err) < 0 ||
        store_open(db, &d.store, &err) < 0 || outbox_new(4096, &d.ob) < 0 ||
        targets_new(d.ob, 1, &d.reg) < 0 || sampler_new(d.reg, d.ob, NULL, &d.sampler) < 0 ||
        follower_new(d.reg, &d.follower) < 0)
        abort();
    d.writer = (struct writer){
        .flush_ns = 1000000000LL, .config = &d.cfg, .store = d.store, .ob = d.ob, .reg = d.reg};
    d.meter = (struct meter){.reg = d.reg, .ob = d.ob, .cfg = &d.cfg};
    base = event_base_new();
    acfg = (struct api_config){.socket_path = socket_path,
                               .db_path = db,
                               .stub_path = "/nonexistent/libprobed-stub.so",
                               .query_max_rows = 1000,
                               .max_rate_hz = CONFIG_RATE_MAX_HZ,
                               .config = &d.cfg};
    if (!base || sampler_start(d.sampler) < 0 || writer_start(&d.writer) < 0 ||
        meter_start(&d.meter) < 0 || follower_start(d.follower) < 0 ||
        api_new(base, &acfg, -1,
                &(struct api_parts){.reg = d.reg,
                                    .sampler = d.sampler,
                                    .follower = d.follower,
                                    .writer = &d.writer,
                                    .meter = &d.meter},
                &d.api) < 0)
        abort();
    chmod(socket_path, 0666); /* the group rule is packaging's; SO_PEERCRED decides here */
    return 0;
}

/* A socket connected as NOBODY_UID: the euid of this thread alone, for the connect(). */
static int connect_as_nobody(void)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), r;

    if (fd < 0)
        return -1;
    memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
    if (syscall(SYS_setresuid, -1, NOBODY_UID, 0) < 0)
        abort();
    r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    if (syscall(SYS_setresuid, -1, 0, 0) < 0)
        abort();
    if (r < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = connect_as_nobody();
    double deadline = now_ms() + REPLY_WAIT_MS;
    char buf[65536];
    bool closed = false;

    if (fd < 0)
        abort();
    for (size_t sent = 0; sent < size;) { /* the daemon reads while we write */
        ssize_t n = send(fd, data + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0)
            sent += (size_t)n;
        else if (n < 0 && errno != EAGAIN)
            break;
        event_base_loop(base, EVLOOP_NONBLOCK);
    }
    shutdown(fd, SHUT_WR);
    /* the reply, until the daemon closes the connection (it has read our end-of-file) */
    while (!closed && now_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        event_base_loop(base, EVLOOP_NONBLOCK);
        if (poll(&p, 1, 1) > 0) {
            ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            closed = n == 0 || (n < 0 && errno != EAGAIN);
        }
    }
    close(fd);
    if (!closed) {
        fprintf(stderr, "fuzz_http: no reply and no close within %d ms\n", REPLY_WAIT_MS);
        abort();
    }
    return 0;
}
