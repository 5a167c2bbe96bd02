/* clock.c - see clock.h. */
#include "clock.h"

#include <time.h>

int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t real_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

double mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t clock_tick_at_or_after(int64_t t_ns, int64_t period_ns)
{
    int64_t r = t_ns % period_ns;

    return r == 0 ? t_ns : t_ns - r + period_ns;
}
