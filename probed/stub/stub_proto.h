/*
 * stub_proto.h - what the daemon (stubctl.c) and the stub in a target (stub.c) say to each
 * other over the stub's Unix socket: a request header and its code, a reply header and its
 * text. Both ends are built from this tree together, on one machine, so the structs go on the
 * wire as they are (host order); the magic word catches anything else.
 */
#ifndef PROBED_STUB_PROTO_H
#define PROBED_STUB_PROTO_H

#include <stdbool.h>
#include <stdint.h>

#define STUB_MAGIC 0x50524244u /* "PRBD" */
#define STUB_SOCKET_NAME "sock"
#define STUB_CODE_MAX (4u << 20)
#define STUB_REPLY_MAX (16u << 20) /* longer output is cut there by the stub */
/* The stub names each of its threads so (prctl): the sampler, backtrace and hang tell them
 * from the job's by it and leave them out. */
#define STUB_THREAD_NAME "probed-stub"

enum stub_kind {
    STUB_RUN = 1,          /* run the code; print a final expression's value */
    STUB_IS_COMPLETE = 2,  /* STUB_OK when the code is a whole statement, else STUB_INCOMPLETE */
    STUB_INTERRUPT = 3,    /* KeyboardInterrupt in the session's running code */
    STUB_CATCH_LISTEN = 4, /* after STUB_OK, this connection carries the catch's events */
};

#define STUB_MAIN_THREAD 1u /* flags: run on the main thread (a pending call) */

struct stub_request {
    uint32_t magic;
    uint8_t kind, flags;
    uint16_t reserved;
    uint32_t session; /* 0: a fresh namespace; else a namespace kept for the session */
    uint32_t len;     /* bytes of code that follow */
};

enum stub_status {
    STUB_OK = 0,
    STUB_EXCEPTION = 1,  /* the code raised; the text ends with its traceback */
    STUB_INCOMPLETE = 2, /* STUB_IS_COMPLETE: more lines needed */
    STUB_ERROR = 3,      /* the stub could not run it; the text says why */
};

struct stub_reply {
    uint32_t magic;
    uint8_t status;
    uint8_t reserved[3];
    uint32_t len; /* bytes of text that follow (UTF-8) */
};

/*
 * `probectl catch`: once a connection has asked STUB_CATCH_LISTEN, the stub writes an event
 * on it whenever an uncaught exception or a fatal signal happens in the target (stub/catch.c),
 * and the thread it happened in waits for the daemon's ack (the event's seq, 4 bytes) for at
 * most STUB_CATCH_WAIT_MS: while it waits, the daemon reads the process's stacks.
 */
enum stub_catch_kind {
    STUB_CATCH_EXCEPTION = 1, /* the payload: the exception as JSON (intarget/catch.py) */
    STUB_CATCH_SIGNAL = 2,    /* no payload: the daemon reads the stacks itself */
};

#define STUB_CATCH_WAIT_MS 2000
#define STUB_CATCH_PAYLOAD_MAX (1u << 20)

struct stub_catch_event {
    uint32_t magic;
    uint8_t kind, reserved[3];
    uint32_t seq;
    int32_t signo, code; /* STUB_CATCH_SIGNAL: the signal and its si_code */
    int32_t tid;         /* the thread it happened in (the target's pid namespace) */
    uint64_t addr;       /* si_addr */
    uint32_t len;        /* bytes of payload that follow */
    uint32_t reserved2;
};

#endif
