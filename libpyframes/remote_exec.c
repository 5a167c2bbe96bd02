/* remote_exec.c - where PEP 768 asks a thread to run a script (3.14+); see pyframes.h. */
#include <errno.h>
#include <inttypes.h>

#include "err.h"
#include "remote.h"
#include "target.h"

int pyf_target__remote_exec(struct pyf_target *t, const struct pyf_thread *th,
                            struct pyf_remote_exec *ret, struct pyf_err *reterr)
{
    const struct pyf_layout *l = &t->lay;
    uint64_t interp = 0;
    int32_t enabled = 0;
    int r;

    if (l->ts_debugger_pending < 0 || l->is_remote_debug < 0 || l->eval_stop_bit <= 0)
        return pyf_fail(reterr, PYF_UNSUPPORTED, EOPNOTSUPP, 0,
                        "pid %d runs Python %s, which has no safe external debugger hook "
                        "(PEP 768: 3.14 and later)",
                        t->info.pid, t->info.version_str);
    if (t->info.core)
        return pyf_fail(reterr, PYF_UNSUPPORTED, EOPNOTSUPP, 0, "a core file runs nothing");
    r = target_read_u64(t, th->tstate_raddr + (uint64_t)l->ts_interp, &interp, reterr,
                        "thread state");
    if (r < 0)
        return r;
    r = remote_read(&t->mem, interp + (uint64_t)l->is_remote_debug, &enabled, sizeof(enabled));
    if (r < 0)
        return target_fail_read(t, reterr, r, interp, "interpreter config");
    if (enabled != 1)
        return pyf_fail(reterr, PYF_UNSUPPORTED, EOPNOTSUPP, interp,
                        "pid %d was started with remote debugging off (-X disable_remote_debug "
                        "or PYTHON_DISABLE_REMOTE_DEBUG)",
                        t->info.pid);
    *ret = (struct pyf_remote_exec){
        .script_raddr = th->tstate_raddr + (uint64_t)l->ts_debugger_script,
        .script_size = (uint32_t)l->debugger_script_size,
        .pending_raddr = th->tstate_raddr + (uint64_t)l->ts_debugger_pending,
        .eval_breaker_raddr = th->tstate_raddr + (uint64_t)l->ts_eval_breaker,
        .eval_breaker_bit = (uint64_t)l->eval_stop_bit,
    };
    return 0;
}
