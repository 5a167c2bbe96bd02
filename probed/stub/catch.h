/*
 * catch.h - the stub's half of `probectl catch`: the channel to the daemon and the fatal-signal
 * handler (catch.c). The Python half (intarget/catch.py, run through eval) installs the
 * exception hooks and calls the functions registered here in the module _probed_stub.
 *
 * Threads: the channel is set by a connection thread of the stub; events are sent from
 * whichever thread fails, one at a time. Memory: the alternate signal stacks it gives threads
 * stay for the life of the process. Failure: an event that cannot be sent, or is not acked in
 * time, is dropped; the failure then goes on exactly as it would have without the stub.
 */
#ifndef PROBED_STUB_CATCH_H
#define PROBED_STUB_CATCH_H

#include "capi.h"

/* @fd becomes the channel (the one before it is closed). */
void catch_channel_set(int fd);

/* Adds catch_report, catch_signals, catch_close and catch_state to the module
 * _probed_stub (already in sys.modules). The GIL is held. 0, or -1 with a Python error. */
int catch_register(const struct capi *api);

#endif
