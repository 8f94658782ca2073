/*
 * clock.h — the library's one clock: monotonic milliseconds, for the timings
 * every layer reports (also public as kvi_time_ms in include/kvinfer.h).
 *
 * Invariant: never decreases within a process; unaffected by wall-clock changes.
 */
#ifndef KVI_CLOCK_H
#define KVI_CLOCK_H

double kvi_time_ms(void); /* CLOCK_MONOTONIC in ms */

#endif
