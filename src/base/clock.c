/*
 * clock.c — kvi_time_ms (clock.h): CLOCK_MONOTONIC as double milliseconds.
 */
#include "base/clock.h"

#include <time.h>

double kvi_time_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
